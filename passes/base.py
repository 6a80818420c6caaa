"""The pass interface: a name and ``run(module) -> bool`` (changed), like XLA's
HloPassInterface::Run."""

from __future__ import annotations

from dataclasses import dataclass

from hlo_tools import Computation, Module


@dataclass(frozen=True)
class Pass:
    """A module pass. Subclasses set ``name`` (kebab-case) and implement ``run``,
    which returns True exactly when it changed the module."""

    name = "pass"

    def run(self, module: Module) -> bool:
        raise NotImplementedError


@dataclass(frozen=True)
class ComputationPass(Pass):
    """A pass applied to each computation; ``run`` ORs the results.

    Fusion bodies are skipped unless ``include_fused`` is set (most cleanups
    should not rewrite inside a fusion that a fusion pass already formed)."""

    include_fused: bool = False

    def run_on_computation(self, computation: Computation) -> bool:
        raise NotImplementedError

    def run(self, module: Module) -> bool:
        fused = set() if self.include_fused else fused_computations(module)
        changed = False
        for comp in list(module.computations):
            if id(comp) not in fused:
                changed |= self.run_on_computation(comp)
        return changed


def fused_computations(module: Module) -> set[int]:
    """ids of the computations called by fusion instructions."""
    out: set[int] = set()
    for instr in module.instructions():
        fc = instr.fused_computation
        if fc is not None:
            out.add(id(fc))
    return out

