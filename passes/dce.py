"""Dead code elimination: instructions nothing uses, and computations nothing
calls (XLA's HloDCE).  Side effects, parameters and roots are kept: "dead" is
``Rewriter.is_dead``, the one rule (``hlo_tools.side_effects``)."""

from __future__ import annotations

from dataclasses import dataclass

from hlo_tools import Computation, Module
from hlo_tools.rewriter import Rewriter

from .base import Pass


def remove_dead_instructions(comp: Computation, rewriter: Rewriter | None = None) -> bool:
    """Removes dead instructions of one computation, users before operands."""
    rw = rewriter or Rewriter()
    removed = False
    for instr in reversed(comp.post_order()):
        if rw.is_dead(instr):
            rw.erase(instr)
            removed = True
    return removed


def remove_unreachable_computations(module: Module, rewriter: Rewriter | None = None) -> bool:
    """Removes computations that the entry does not (transitively) call."""
    if module.entry is None:
        return False
    rw = rewriter or Rewriter()
    keep = {id(module.entry)} | {id(c) for c in module.entry.make_embedded_computations_post_order()}
    dead = [c for c in module.computations if id(c) not in keep]
    rw.remove_computations(module, dead)
    return bool(dead)


@dataclass(frozen=True)
class DeadCodeElimination(Pass):
    name = "dce"
    remove_computations: bool = True

    def run(self, module: Module) -> bool:
        rewriter = Rewriter()
        for comp in module.computations:
            remove_dead_instructions(comp, rewriter)
        if self.remove_computations:
            remove_unreachable_computations(module, rewriter)
        return rewriter.changed
