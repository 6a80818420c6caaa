"""The fixed ``swap_operands.py``: reverses the operands of add and multiply only
(commutative), each swap one fuelled decision.  ``hlo upstream`` tests load it as a
user's pass whose rewrite is valid (docs/debugging.md)."""

from dataclasses import dataclass

from hlo_tools import HloOpcode, Instruction, Module
from hlo_tools.rewriter import Rewriter
from passes import Pass
from passes.fuel import consume_fuel

COMMUTATIVE = (HloOpcode.ADD, HloOpcode.MULTIPLY)


@dataclass(frozen=True)
class CommuteOperands(Pass):
    name = "commute-operands"

    def run(self, module: Module) -> bool:
        rw = Rewriter()
        for comp in module.computations:
            for instr in list(comp):
                if instr.opcode not in COMMUTATIVE or instr.operand_count != 2 or instr.operand(0) is instr.operand(1):
                    continue
                if not consume_fuel(lambda: f"swap the operands of %{instr.name}"):
                    continue
                a, b = instr.operands
                rw.replace_instruction(instr, Instruction.create(instr.opcode_text, instr.shape, [b, a],
                                                                 name=instr.name + ".swapped"))
        return rw.changed
