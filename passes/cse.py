"""Common subexpression elimination (XLA's HloCSE): identical instructions on
identical operands become one.  Metadata is ignored; side-effecting and
non-deterministic instructions (rng) are never merged."""

from __future__ import annotations

import re
from dataclasses import dataclass

from hlo_tools import Computation, HloOpcode, Instruction, Module
from hlo_tools.printer import print_attributes
from hlo_tools.rewriter import Rewriter
from hlo_tools.side_effects import NON_DETERMINISTIC, SideEffects, side_effects

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
    """The first of two equal instructions stays: in a scheduled module the first in
    the schedule (so every use still follows its operand), else the first in post order."""

    name = "cse"

    def run(self, module: Module) -> bool:
        effects = side_effects()  # one memo for the module: a call chain is walked once, not once per computation
        changed = False
        for comp in self.computations(module):
            changed |= self._cse(comp, effects)
        return changed

    def run_on_computation(self, comp: Computation) -> bool:
        return self._cse(comp, side_effects())

    def _cse(self, comp: Computation, effects: SideEffects) -> bool:
        rewriter = Rewriter()
        seen: dict[tuple, Instruction] = {}
        scheduled = comp.parent is not None and comp.parent.is_scheduled
        for instr in (list(comp) if scheduled else comp.post_order()):
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
