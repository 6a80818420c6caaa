"""Dead code elimination: instructions nothing uses, and computations nothing
calls (XLA's HloDCE).  Side effects, parameters and roots are kept."""

from __future__ import annotations

from dataclasses import dataclass

from hlo_tools import Computation, HloOpcode, Module

from .base import Pass
from .registry import register_pass
from hlo_tools.side_effects import SideEffects


def remove_dead_instructions(comp: Computation, effects: SideEffects | None = None) -> bool:
    """Removes dead instructions of one computation, users before operands."""
    effects = effects or SideEffects()
    changed = False
    for instr in reversed(comp.post_order()):
        if instr.users or instr is comp.root or instr.opcode is HloOpcode.PARAMETER:
            continue
        if instr.control_successors or effects.instruction(instr):
            continue
        comp.remove_instruction(instr)
        changed = True
    return changed


def remove_unreachable_computations(module: Module) -> bool:
    """Removes computations that the entry does not (transitively) call."""
    if module.entry is None:
        return False
    keep = {id(module.entry)} | {id(c) for c in module.entry.make_embedded_computations_post_order()}
    dead = [c for c in module.computations if id(c) not in keep]
    for comp in dead:
        module.computations.remove(comp)
        comp.parent = None
    if dead:
        module._names_cache = None
    return bool(dead)


@register_pass
@dataclass(frozen=True)
class DeadCodeElimination(Pass):
    name = "dce"
    remove_computations: bool = True

    def run(self, module: Module) -> bool:
        effects = SideEffects()
        changed = False
        for comp in module.computations:
            changed |= remove_dead_instructions(comp, effects)
        if self.remove_computations:
            changed |= remove_unreachable_computations(module)
        return changed
