"""A user's passes for the debugging tests, loaded with ``--load``: both put the
operands of binary ops in reverse order, each swap one fuelled decision
(``passes.fuel.consume_fuel``), so ``hlo bisect`` can name the swap that breaks.

``swap-operands`` has a bug on purpose: it swaps subtract too.
``commute-operands`` is the fixed version, for add and multiply only (commutative):
a valid rewrite, which ``hlo upstream`` can hand over (docs/debugging.md)."""

from dataclasses import dataclass

from hlo_tools import HloOpcode, Instruction, Module
from hlo_tools.rewriter import Rewriter
from passes import Pass
from passes.fuel import consume_fuel


@dataclass(frozen=True)
class _ReverseOperands(Pass):
    opcodes = ()

    def run(self, module: Module) -> bool:
        rw = Rewriter()
        for comp in module.computations:
            for instr in list(comp):
                if instr.opcode not in self.opcodes or instr.operand_count != 2 or instr.operand(0) is instr.operand(1):
                    continue
                if not consume_fuel(lambda: f"swap the operands of %{instr.name}"):
                    continue
                a, b = instr.operands
                rw.replace_instruction(instr, Instruction.create(instr.opcode_text, instr.shape, [b, a],
                                                                 name=instr.name + ".swapped"))
        return rw.changed


@dataclass(frozen=True)
class SwapOperands(_ReverseOperands):
    name = "swap-operands"
    opcodes = (HloOpcode.ADD, HloOpcode.MULTIPLY, HloOpcode.SUBTRACT)


@dataclass(frozen=True)
class CommuteOperands(_ReverseOperands):
    name = "commute-operands"
    opcodes = (HloOpcode.ADD, HloOpcode.MULTIPLY)
