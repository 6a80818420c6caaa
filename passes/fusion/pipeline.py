"""Fusion pipelines: named pass lists, and how to hand one to XLA.

Two ways to measure a Python fusion pipeline against stock XLA:

- ``hooked`` (the default of the bench): compile the original module with the
  "as-written" pipeline (XLA's fusion passes off) and run our passes inside
  XLA's pipeline at the pre-scheduler hook. Our passes then see XLA's
  layout-assigned, simplified, unfused module (each op wrapped in a one-op
  kLoop fusion) and decide all fusion; XLA only schedules and emits.
- ``text``: run the passes on the pre-optimization module and compile the
  result "as-written". On XLA:CPU this loses the layouts inside fusion bodies
  (they travel through StableHLO), and XLA:CPU's emitter CHECK-fails on
  transposes, bitcasts and multi-output fusions without layouts; so this route
  is only safe for producer-consumer fusion without those ops (see
  docs/fusion_passes.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from hlo_tools import HloOpcode, Module

from passes.base import Pass
from passes.manager import PassManager
from passes.registry import parse_pipeline
from xla_bridge.xla_compile import HOOK_STAGE  # noqa: F401 - where FusionHook runs; defined by the bridge

#: The best pipeline found on the bundled corpus (XLA:CPU, hooked route): every
#: fusion pass but priority (its own alternative to the first three), in the order
#: that lets each build on the last. Fewest kernels and bytes on all 15 runnable
#: modules; timings in docs/fusion_passes.md.
BEST = ("reduction-epilogue-fusion,producer-consumer-fusion,multi-output-fusion,producer-consumer-fusion,"
        "horizontal-fusion,library-dot-fusion,dce")
#: The priority-queue alternative.
PRIORITY = "priority-fusion,horizontal-fusion,library-dot-fusion,dce"
#: Cleanups before fusing the pre-optimization module (text route).
TEXT_PREFIX = "call-inliner,simplify,cse,dce"


@dataclass
class FusionHook:
    """A callable for ``compile(..., hook=(FusionHook(passes), "pre-scheduler"))``
    that runs ``passes`` as one pipeline, answers whether they changed the module,
    and remembers how many fusions it handed XLA."""

    passes: Sequence[Pass]
    fusions_out: int = -1
    modules: list[Module] = field(default_factory=list)
    names_out: frozenset[str] = frozenset()

    def __call__(self, module: Module) -> bool:
        changed = PassManager(self.passes).run(module)
        written = [i.name for i in module.entry if i.opcode is HloOpcode.FUSION]
        self.fusions_out, self.names_out = len(written), frozenset(written)
        self.modules.append(module)
        return changed

    def kept_in(self, optimized: Module) -> bool:
        """Did XLA compile every fusion we wrote, under its name? (XLA:GPU's
        fusion-wrapper may add one-op fusions around what we left alone.)"""
        return self.names_out <= {i.name for i in optimized.entry if i.opcode is HloOpcode.FUSION}


def passes_of(spec: str | Sequence[Pass]) -> list[Pass]:
    return parse_pipeline(spec) if isinstance(spec, str) else list(spec)
