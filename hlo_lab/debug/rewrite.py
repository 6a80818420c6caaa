"""How a rewrite (our passes on a module) is compiled and measured against stock
XLA, the one rule ``hlo bisect``, ``hlo reduce --until-slower`` and ``hlo upstream``
share: a pipeline with a fusion pass runs inside XLA's pipeline where XLA keeps
our fusions (``XlaPipeline.fusion``, as ``hlo bench --hook`` and ``hlo tune``
measure), other passes run on the text and both sides are compiled stock."""

from __future__ import annotations

from typing import Sequence

from hlo_tools import Module
from passes import Pass, PassManager, decides_fusion
from xla_bridge.hook_stage import HookStage
from xla_bridge.measure import STOCK, Measurement, XlaPipeline
from xla_bridge.bench import BenchResult
from xla_bridge.runner import compare


def has_fusion_pass(passes: Sequence[Pass]) -> bool:
    """Whether the pipeline decides fusion: asked of each pass (``Pass.decides_fusion``;
    pipelines and FixedPoint ask theirs), so a user's ``--load`` pass that subclasses
    ``FusionPass`` is measured inside XLA like ours."""
    return decides_fusion(passes)


def default_pipeline(passes: Sequence[Pass]) -> str:
    """How a text-route candidate is compiled: as written when a fusion pass is in the
    pipeline (so that XLA keeps our fusions), else stock."""
    return "as-written" if has_fusion_pass(passes) else "stock"


def rewrite_route(passes: Sequence[Pass], backend: str) -> tuple[XlaPipeline, bool, str]:
    """The rule: (B's pipeline, whether the passes run on the module's text first,
    the route in words).  A fusion pass runs inside XLA where XLA keeps its fusions
    (as-written at ``HookStage.for_fusion``); other passes run on the text and B is
    compiled stock, as A is."""
    passes = list(passes)
    if has_fusion_pass(passes):
        return (XlaPipeline.fusion(PassManager(passes), backend), False,
                f"as-written + passes at {HookStage.for_fusion(backend)}")
    return STOCK, True, "stock, on the rewritten module"


def measure_rewrite(measurement: Measurement, module: Module, passes: Sequence[Pass],
                    reps: int) -> tuple[BenchResult | None, str]:
    """Stock XLA (A) against the rewrite (B) on ``module``, ABBA-interleaved, outputs
    compared; (None, route) when the passes change nothing."""
    passes = list(passes)
    pipeline_b, on_text, route = rewrite_route(passes, measurement.backend)
    if not on_text:
        res = measurement.benchmark(module, module, STOCK, pipeline_b, reps=reps)
        return (res if res.hook_b is not None and res.hook_b.changed else None), route
    rewritten = module.clone()
    if not PassManager(passes).run(rewritten):
        return None, route
    return measurement.benchmark(module, rewritten, STOCK, pipeline_b, reps=reps), route


def baseline_moved(measurement: Measurement, original: Module, rewritten: Module, res: BenchResult,
                   pipeline_a: XlaPipeline, pipeline_b: XlaPipeline) -> tuple[str, str | None]:
    """When B's outputs differ from A's and B compiles on another base than A
    (XLA's fusion off), whether that base alone, with no pass, already differs
    from A: then the baseline moved (XLA's fusions round bf16 differently), and B
    is compared against that baseline too.  Returns what to say ("" when
    nothing) and B's verdict against the moved baseline (None when it did not
    move)."""
    if res.verdict != "mismatch" or pipeline_b.base == pipeline_a.base:
        return "", None
    base = compare(original, original, backend=measurement.backend, pipeline_a=pipeline_a.base,
                   pipeline_b=pipeline_b.base, flags=measurement.flags, contained=True)
    if base.ok:
        return (f"baseline: {pipeline_b.base} without the passes matches {pipeline_a.base} ({base.verdict}): "
                f"the difference comes from the passes"), None
    against = measurement.benchmark(original, rewritten, XlaPipeline(pipeline_b.base), pipeline_b, reps=1, warmup=0)
    return (f"baseline moved: {pipeline_b.base} without any pass already differs from {pipeline_a.base} "
            f"({base.first_difference}); against that baseline the passes' outputs are {against.verdict}"
            + (f" ({against.mismatch})" if against.mismatch else "")), against.verdict
