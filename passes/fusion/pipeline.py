"""Fusion pipelines: named pass lists.  Handing one to XLA is the bridge's
``Measurement`` with ``Pipeline.as_written().hooked(PassManager(...), HookStage.for_fusion(backend))``.

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

from typing import Sequence

from passes.base import Pass
from passes.registry import parse_pipeline

#: The best pipeline found on the bundled corpus (XLA:CPU, hooked route): every
#: fusion pass but priority (its own alternative to the first three), in the order
#: that lets each build on the last. Fewest kernels and bytes on all 15 runnable
#: modules; timings in docs/fusion_passes.md.
BEST = ("reduction-epilogue-fusion,producer-consumer-fusion,multi-output-fusion,producer-consumer-fusion,"
        "horizontal-fusion,library-dot-fusion,dce")
#: The best pipeline for XLA:GPU (``hlo_lab.study.gpu_study``, on-top mode: over
#: XLA's own fusions at the post-scheduler hook): BEST's shape under the GPU
#: profile (``gpu_profile``: every producer-consumer and sibling fusion priced by
#: the GPU roofline, launches counted; siblings whose heroes agree, reductions
#: included), without the CPU-only reduction-epilogue rule (a reduction under a
#: broadcast is recomputed per element on a GPU) and library-dot fusion.
#: Figures in docs/xla_gpu_modes.md.
GPU_BEST = ("gpu-producer-consumer-fusion,gpu-multi-output-fusion,gpu-producer-consumer-fusion,"
            "horizontal-fusion,dce")
#: The priority-queue alternative.
PRIORITY = "priority-fusion,horizontal-fusion,library-dot-fusion,dce"
#: Cleanups before fusing the pre-optimization module (text route).
TEXT_PREFIX = "call-inliner,simplify,cse,dce"


#: Pipelines by name: a spec may name one wherever it names a pass (``--passes gpu-best``).
NAMED: dict[str, str] = {"best": BEST, "gpu-best": GPU_BEST, "priority": PRIORITY}


def expand(spec: str) -> str:
    """``spec`` with each pipeline name replaced by its passes."""
    return ",".join(NAMED.get(n.strip(), n.strip()) for n in spec.split(",") if n.strip())


def passes_of(spec: str | Sequence[Pass]) -> list[Pass]:
    """A pipeline given by names (``"dce,cse"``, pipeline names such as ``gpu-best``
    included) or as pass objects, as a list.  KeyError for an unknown name."""
    if not isinstance(spec, str):
        return list(spec)
    try:
        return parse_pipeline(expand(spec))
    except KeyError as e:
        raise KeyError(f"{e.args[0]}; pipelines: {', '.join(NAMED)}") from None
