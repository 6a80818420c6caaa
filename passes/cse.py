"""Common subexpression elimination (XLA's HloCSE): identical instructions on
identical operands become one.  Metadata is ignored; side-effecting and
non-deterministic instructions (rng) are never merged."""

from __future__ import annotations

import re
from dataclasses import dataclass

from hlo_tools import Computation, HloOpcode, Instruction
from hlo_tools.printer import print_attributes
from hlo_tools.rewriter import Rewriter
from hlo_tools.side_effects import NON_DETERMINISTIC

from .base import ComputationPass
from .fuel import consume_fuel

_METADATA = re.compile(r', metadata=\{(?:[^{}"]|"(?:[^"\\]|\\.)*")*\}')


def cse_key(instr: Instruction) -> tuple:
    """What makes two instructions the same value (given identical operands)."""
    attrs = _METADATA.sub("", print_attributes(instr))
    return (
        instr.opcode_text,
        instr.shape.to_text(),
        tuple(id(o) for o in instr.operands),
        instr.literal,
        attrs,
    )


@dataclass(frozen=True)
class CommonSubexpressionElimination(ComputationPass):
    name = "cse"

    def run_on_computation(self, comp: Computation) -> bool:
        rewriter = Rewriter()
        effects = rewriter.effects
        seen: dict[tuple, Instruction] = {}
        for instr in comp.post_order():
            op = instr.opcode
            if op is HloOpcode.PARAMETER or op in NON_DETERMINISTIC or instr.control_predecessors or instr.control_successors:
                continue
            if effects.instruction(instr):
                continue
            key = cse_key(instr)
            first = seen.get(key)
            if first is None:
                seen[key] = instr
                continue
            if not consume_fuel(lambda: f"replace %{instr.name} by %{first.name}"):
                continue
            rewriter.replace_all_uses_with(instr, first)
            rewriter.erase(instr)
        return rewriter.changed
