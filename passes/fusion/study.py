"""One module, a Python fusion pipeline against stock XLA: the measurement that
``bench/fusion_vs_stock.py`` and ``hlo demo`` print, in one place.

CPU (measured): stock XLA:CPU on the original vs XLA:CPU "as-written" with our
pipeline run at its pre-scheduler hook (``pipeline.FusionHook``): kernels,
XLA's bytes accessed, interleaved timings, outputs compared, and whether XLA
compiled exactly the fusions we wrote.

GPU (predicted, no GPU needed): stock XLA:GPU compiled here for a target
(deviceless) vs our pipeline run on the module XLA:GPU's fusion passes would
have seen (its pipeline with them off, read at jax's "pre-scheduler" hook, which
on XLA:GPU runs before layout assignment; row-major reshapes are made bitcasts
as XLA's layout normalization would), both
costed by XLA's HloCostAnalysis where it can read the module (else our cost
model, which agrees with it within 1% on the corpus) and timed by our roofline
for that device. XLA:GPU cannot compile our fusions as written through jax's
hook: it runs at the end of XLA:GPU's "optimization" pipeline
(``apply-xla-transforms-0``), before layout assignment, and layout assignment
CHECK-fails on the fusion bodies it finds there (docs/fusion_passes.md). So the
GPU columns compare decisions, not compiled kernels.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any

from hlo_tools import HloOpcode, Module

from .pipeline import TEXT_PREFIX, FusionHook, passes_of

#: Not kernels: no code runs for them.
FREE = frozenset({HloOpcode.PARAMETER, HloOpcode.CONSTANT, HloOpcode.BITCAST, HloOpcode.TUPLE,
                  HloOpcode.GET_TUPLE_ELEMENT})

#: CPU-only passes, dropped from a pipeline for the GPU columns.
CPU_ONLY = frozenset({"library-dot-fusion"})


def kernels(module: Module) -> int:
    """Entry instructions that run code (fusions, dots, copies, custom calls...)."""
    return sum(1 for i in module.entry if i.opcode not in FREE)


def fusions(module: Module) -> int:
    return sum(1 for i in module.entry if i.opcode is HloOpcode.FUSION)


@dataclass
class CpuRow:
    module: str
    kernels_stock: int
    kernels_ours: int
    bytes_stock: float
    bytes_ours: float
    ms_stock: float
    ms_ours: float
    speedup: float
    speedup_p10: float
    speedup_p90: float
    outputs: str
    fusions_written: int
    fusions_compiled: int
    seconds: float
    before: str = field(default="", repr=False)  # XLA's module as our passes got it
    after: Module | None = field(default=None, repr=False)  # ... and as they left it

    @property
    def kept(self) -> bool:
        return self.fusions_written == self.fusions_compiled

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("before"), d.pop("after")
        d["kept"] = self.kept
        return d


def cpu_study(name: str, text: str, spec: str, *, reps: int = 30, warmup: int = 5, backend: str = "cpu") -> CpuRow:
    """Stock XLA vs our pipeline at the pre-scheduler hook, outputs compared.
    ``backend="gpu"`` does the same on a real GPU (CPU-only passes dropped); with
    this jax it fails at compile time (see the module docstring)."""
    from hlo_tools.xla_bench import benchmark
    from hlo_tools.xla_compile import Hook, compile

    t0 = time.perf_counter()
    if backend != "cpu":
        spec = gpu_pipeline(spec)
    stock = compile(text, backend, "stock")
    fusion_hook = FusionHook(passes_of(spec))
    hook = Hook(fusion_hook, "pre-scheduler")
    ours = compile(text, backend, "as-written", hook=hook)
    b = benchmark(stock, ours, reps=reps, warmup=warmup)
    return CpuRow(
        module=name, kernels_stock=kernels(stock.optimized_module), kernels_ours=kernels(ours.optimized_module),
        bytes_stock=stock.cost.get("bytes accessed", 0.0), bytes_ours=ours.cost.get("bytes accessed", 0.0),
        ms_stock=b.a.median_us / 1e3, ms_ours=b.b.median_us / 1e3, speedup=b.speedup,
        speedup_p10=b.speedup_p10, speedup_p90=b.speedup_p90, outputs=b.verdict,
        fusions_written=fusion_hook.fusions_out, fusions_compiled=fusions(ours.optimized_module),
        seconds=time.perf_counter() - t0, before=hook.seen[0] if hook.seen else "",
        after=fusion_hook.modules[-1] if fusion_hook.modules else None,
    )


@dataclass
class GpuRow:
    module: str
    target: str
    kernels_stock: int
    kernels_ours: int
    bytes_stock: float
    bytes_ours: float
    predicted_us_stock: float
    predicted_us_ours: float
    bytes_source: str  # "xla" (HloCostAnalysis) or "ours" (cost model) for each side, "a/b"

    @property
    def predicted_speedup(self) -> float:
        return self.predicted_us_stock / self.predicted_us_ours if self.predicted_us_ours else float("inf")

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "predicted_speedup": self.predicted_speedup}


def _descending(shape) -> bool:
    from passes.layout import minor_to_major

    return tuple(minor_to_major(shape)) == tuple(range(shape.rank - 1, -1, -1))


def reshapes_to_bitcasts(module: Module) -> int:
    """Row-major reshapes become bitcasts, as XLA:GPU's layout normalization makes
    them after layout assignment (the hook's module is read before it): they run
    no kernel, and counting them would charge our side for XLA's own later step."""
    from hlo_tools import Instruction

    from .clusters import fusible_computations

    n = 0
    for comp in fusible_computations(module):
        for instr in list(comp):
            src = instr.operand(0) if instr.operand_count else None
            if (instr.opcode is HloOpcode.RESHAPE and instr.shape.is_array and src.shape.is_array
                    and _descending(instr.shape) and _descending(src.shape)):
                comp.replace_instruction(instr, Instruction.create("bitcast", instr.shape, [src], name=f"{instr.name}.bitcast"))
                n += 1
    return n


def gpu_pipeline(spec: str) -> str:
    """``spec`` without the CPU-only passes."""
    return ",".join(p for p in spec.split(",") if p.strip() and p.strip() not in CPU_ONLY)


def _bytes(module: Module, text: str) -> tuple[float, str]:
    from hlo_tools import xla

    theirs = xla.cost_analysis_of_text(text)
    if "bytes accessed" in theirs:
        return theirs["bytes accessed"], "xla"
    from fusion_analysis.cost import module_cost

    return module_cost(module)["bytes accessed"], "ours"


def gpu_study(name: str, text: str, spec: str, target: str = "h100") -> GpuRow:
    """Stock XLA:GPU (deviceless) vs our pipeline's decisions, costed for ``target``."""
    import hlo_tools
    from fusion_analysis import devices
    from fusion_analysis.roofline import roofline
    from hlo_tools.xla_compile import Hook, compile

    from ..manager import PassManager

    device = devices.load(target)
    stock = compile(text, target=target).optimized_module
    # the module XLA:GPU's fusion passes would see: its pipeline with them off, read at the hook
    seen = Hook(lambda module: False, "pre-scheduler")
    compile(text, target=target, pipeline="as-written", hook=seen)
    ours = hlo_tools.parse(seen.seen[0])
    reshapes_to_bitcasts(ours)
    PassManager(passes_of(gpu_pipeline(spec))).run(ours)
    bs, src_s = _bytes(stock, stock.to_text())
    bo, src_o = _bytes(ours, ours.to_text())
    return GpuRow(module=name, target=target, kernels_stock=kernels(stock), kernels_ours=kernels(ours),
                  bytes_stock=bs, bytes_ours=bo, predicted_us_stock=roofline(stock, device).time_s * 1e6,
                  predicted_us_ours=roofline(ours, device).time_s * 1e6, bytes_source=f"{src_s}/{src_o}")
