"""A user's pass with a bug, for ``hlo bisect`` tests (loaded with ``--load``): it
puts the operands of add, multiply and subtract in reverse order, which is right
for the first two and wrong for subtract.  Each swap is one decision, asked of
the fuel (``passes.fuel.consume_fuel``), so bisect can name the swap that breaks."""

from dataclasses import dataclass

from hlo_tools import HloOpcode, Instruction, Module
from hlo_tools.rewriter import Rewriter
from passes import Pass
from passes.fuel import consume_fuel

SWAPPED = (HloOpcode.ADD, HloOpcode.MULTIPLY, HloOpcode.SUBTRACT)


@dataclass(frozen=True)
class SwapOperands(Pass):
    name = "swap-operands"

    def run(self, module: Module) -> bool:
        rw = Rewriter()
        for comp in module.computations:
            for instr in list(comp):
                if instr.opcode not in SWAPPED or instr.operand_count != 2 or instr.operand(0) is instr.operand(1):
                    continue
                if not consume_fuel(lambda: f"swap the operands of %{instr.name}"):
                    continue
                a, b = instr.operands
                rw.replace_instruction(instr, Instruction.create(instr.opcode_text, instr.shape, [b, a],
                                                                 name=instr.name + ".swapped"))
        return rw.changed
