"""One module, a Python fusion pipeline against stock XLA: the measurement that
``bench/fusion_vs_stock.py`` and ``hlo demo`` print, in one place.

Both are one ``xla_bridge.Measurement`` compiling the module under two
``Pipeline``s: stock, and "as-written" with our pipeline (a ``PassManager``)
hooked in at ``HookStage.for_fusion(backend)``.

CPU (measured): stock XLA:CPU on the original vs XLA:CPU "as-written" with our
pipeline run at its pre-scheduler hook: kernels, XLA's bytes accessed,
interleaved timings, outputs compared, and whether XLA compiled exactly the
fusions we wrote.

GPU (compiled, no GPU needed): stock XLA:GPU compiled here for a target
(deviceless) vs XLA:GPU "as-written" with our pipeline at its post-scheduler
hook, kernels and bytes from XLA's HloCostAnalysis of both optimized modules,
time predicted by our roofline for that device, and whether XLA:GPU compiled
every fusion we wrote.

Both run in the XLA worker by default (``contained=True``): an XLA abort on one
module raises ``XlaAbortError`` (an ``XlaCompileError``) for that module, and a
caller looping over modules records it and goes on (``studies`` does).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any, Sequence

from fusion_analysis import devices
from fusion_analysis.roofline import roofline
from hlo_tools import HloOpcode, Module
from hlo_tools.opcode import NO_KERNEL
from passes import PassManager
from passes.fusion.pipeline import passes_of
from xla_bridge import xla, xla_worker
from xla_bridge.errors import XlaCompileError
from xla_bridge.hook_stage import HookStage
from xla_bridge.measure import STOCK, Measurement, Pipeline
from xla_bridge.xla_compile import CompileResult

#: CPU-only passes, dropped from a pipeline for the GPU columns.
CPU_ONLY = frozenset({"library-dot-fusion"})


def kernels(module: Module) -> int:
    """Entry instructions that run code (fusions, dots, copies, custom calls...):
    everything but ``NO_KERNEL`` (counted the same way for stock and ours)."""
    return sum(1 for i in module.entry if i.opcode not in NO_KERNEL)


def fusions(module: Module) -> int:
    return sum(1 for i in module.entry if i.opcode is HloOpcode.FUSION)


def _fusion_names(module: Module | None) -> frozenset[str]:
    return frozenset(i.name for i in module.entry if i.opcode is HloOpcode.FUSION) if module is not None else frozenset()


def ours(spec: str | Sequence, backend: str) -> Pipeline:
    """XLA as written, with the passes of ``spec`` (names or ``Pass`` objects) deciding every fusion at the
    stage where XLA keeps what they write (``HookStage.for_fusion``)."""
    return Pipeline.as_written().hooked(PassManager(passes_of(spec)), HookStage.for_fusion(backend))


def _stock_and_ours(measurement: Measurement, text: str, spec: str | Sequence) -> tuple[CompileResult, CompileResult, frozenset[str]]:
    """The module compiled stock and under ``ours``, and the names of the fusions
    our passes wrote (empty when the hook never ran)."""
    res = measurement.compile_each(text, {"stock": STOCK, "ours": ours(spec, measurement.backend)})
    return res["stock"], res["ours"], _fusion_names(res["ours"].hook.after)


def _kept(written: frozenset[str], optimized: Module) -> bool:
    """Did XLA compile every fusion we wrote, under its name? (XLA:GPU's
    fusion-wrapper may add one-op fusions around what we left alone.)"""
    return written <= _fusion_names(optimized)


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


def cpu_study(name: str, text: str, spec: str, *, reps: int = 30, warmup: int = 5, backend: str = "cpu",
              contained: bool = True) -> CpuRow:
    """Stock XLA vs our pipeline at the pre-scheduler hook, outputs compared.
    ``backend="gpu"`` does the same on a real GPU (CPU-only passes dropped); with
    this jax it fails at compile time (see the module docstring).  ``contained``:
    all of it in the XLA worker (``spec`` goes there as names or Pass objects)."""
    if contained and not xla_worker.in_worker():
        return xla_worker.contained(cpu_study, (name, text, spec), dict(reps=reps, warmup=warmup, backend=backend),
                                    phase="compiling", module=name, backend=backend)

    t0 = time.perf_counter()
    if backend != "cpu":
        spec = gpu_pipeline(spec)
    measurement = Measurement(backend)
    stock, mine, written = _stock_and_ours(measurement, text, spec)
    b = measurement.benchmark(stock, mine, reps=reps, warmup=warmup)
    hook = mine.hook
    n_written = len(written) if hook.after is not None else -1
    return CpuRow(
        module=name, kernels_stock=kernels(stock.optimized_module), kernels_ours=kernels(mine.optimized_module),
        bytes_stock=stock.cost.get("bytes accessed", 0.0), bytes_ours=mine.cost.get("bytes accessed", 0.0),
        ms_stock=b.a.median_us / 1e3, ms_ours=b.b.median_us / 1e3, speedup=b.speedup,
        speedup_p10=b.speedup_p10, speedup_p90=b.speedup_p90, outputs=b.verdict,
        fusions_written=n_written,
        fusions_compiled=n_written if _kept(written, mine.optimized_module) else fusions(mine.optimized_module),
        seconds=time.perf_counter() - t0, before=hook.seen[0] if hook.seen else "", after=hook.after,
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
    fusions_written: int
    kept: bool

    @property
    def predicted_speedup(self) -> float:
        return self.predicted_us_stock / self.predicted_us_ours if self.predicted_us_ours else float("inf")

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "predicted_speedup": self.predicted_speedup}


def gpu_pipeline(spec: str) -> str:
    """``spec`` without the CPU-only passes."""
    return ",".join(p for p in spec.split(",") if p.strip() and p.strip() not in CPU_ONLY)


def gpu_study(name: str, text: str, spec: str, target: str = "h100", *, contained: bool = True) -> GpuRow:
    """Stock XLA:GPU vs XLA:GPU as written with our pipeline at its post-scheduler
    hook, both compiled here for ``target`` without a GPU: kernels and bytes from
    XLA's optimized modules (HloCostAnalysis), time from our roofline.
    ``contained``: in the XLA worker."""
    if contained and not xla_worker.in_worker():
        return xla_worker.contained(gpu_study, (name, text, spec, target), phase="compiling", module=name,
                                    backend="gpu")

    device = devices.load(target)
    stock, mine, written = _stock_and_ours(Measurement("gpu", target=target), text, gpu_pipeline(spec))
    a, b = stock.optimized_module, mine.optimized_module
    return GpuRow(module=name, target=target, kernels_stock=kernels(a), kernels_ours=kernels(b),
                  bytes_stock=xla.cost_analysis_of_text(stock.optimized_text).get("bytes accessed", float("nan")),
                  bytes_ours=xla.cost_analysis_of_text(mine.optimized_text).get("bytes accessed", float("nan")),
                  predicted_us_stock=roofline(a, device).time_s * 1e6, predicted_us_ours=roofline(b, device).time_s * 1e6,
                  fusions_written=len(written) if mine.hook.after is not None else -1, kept=_kept(written, b))


@dataclass
class StudyError:
    """A module whose study failed (an XLA error or abort): the row it gets."""

    module: str
    error: str

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def studies(modules, spec: str, *, reps: int = 30, warmup: int = 5, backend: str = "cpu",
            target: str | None = None) -> list[CpuRow | GpuRow | StudyError]:
    """``cpu_study`` (or ``gpu_study`` for ``target``) of each ``(name, text)``, in
    order; a module XLA refuses or aborts on becomes a ``StudyError`` row and the
    others go on."""
    rows: list[CpuRow | GpuRow | StudyError] = []
    for name, text in modules:
        try:
            rows.append(gpu_study(name, text, spec, target) if target else
                        cpu_study(name, text, spec, reps=reps, warmup=warmup, backend=backend))
        except XlaCompileError as e:
            rows.append(StudyError(name, str(e)))
    return rows
