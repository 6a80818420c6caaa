"""The pass interface: a name and ``run(module) -> bool`` (changed), like XLA's
HloPassInterface::Run."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from hlo_tools import Computation, Module


@dataclass(frozen=True)
class Pass:
    """A module pass. Subclasses set ``name`` (kebab-case) and implement ``run``,
    which returns True exactly when it changed the module.  ``decides_fusion``
    says how the lab measures it against XLA: a pass that decides fusion runs
    inside XLA's pipeline with XLA's own fusion off (else XLA fuses on top of it);
    any other pass runs on the text and both sides are compiled stock."""

    name = "pass"
    decides_fusion: ClassVar[bool] = False
    #: a rewrite of the module as the user gave it (before XLA's pipeline), such as
    #: ``cache-update-in-place``: where a pipeline mixes it with passes run inside
    #: XLA (a GPU study's modes), it runs on the module first (``split_on_input``)
    on_input: ClassVar[bool] = False
    #: the module levels ``run`` takes: "hlo" (our IR), "stablehlo" (``xla_bridge.mlir_rewrite.StableHloModule``)
    levels: ClassVar[tuple[str, ...]] = ("hlo",)

    def run(self, module: Module) -> bool:
        raise NotImplementedError


@dataclass(frozen=True)
class FusionPass(Pass):
    """Base of the passes that decide fusion (ours in ``passes.fusion`` and users'):
    ``decides_fusion`` is True."""

    decides_fusion: ClassVar[bool] = True


def split_on_input(passes) -> tuple[list, list]:
    """(the passes that rewrite the module as given, ``Pass.on_input``; the rest)."""
    passes = list(passes)
    return [p for p in passes if getattr(p, "on_input", False)], [p for p in passes if not getattr(p, "on_input", False)]


def runs_on(p, level: str) -> bool:
    """Whether pass ``p`` takes modules of ``level`` (``Pass.levels``; a plain callable: HLO only)."""
    return level in getattr(p, "levels", ("hlo",))


def decides_fusion(passes) -> bool:
    """Whether any of ``passes`` decides fusion (pipelines and FixedPoint ask
    theirs); an object without the attribute (a plain callable) does not."""
    return any(getattr(p, "decides_fusion", False) for p in passes)


@dataclass(frozen=True)
class ComputationPass(Pass):
    """A pass applied to each computation; ``run`` ORs the results.

    Fusion bodies are skipped unless ``include_fused`` is set (most cleanups
    should not rewrite inside a fusion that a fusion pass already formed)."""

    include_fused: bool = False

    def run_on_computation(self, computation: Computation) -> bool:
        raise NotImplementedError

    def computations(self, module: Module) -> list[Computation]:
        """The computations ``run`` visits: all, less fusion bodies unless ``include_fused``."""
        fused = set() if self.include_fused else {id(c) for c in module.fusion_computations()}
        return [c for c in module.computations if id(c) not in fused]

    def run(self, module: Module) -> bool:
        changed = False
        for comp in self.computations(module):
            changed |= self.run_on_computation(comp)
        return changed
