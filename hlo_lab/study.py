"""One module, a Python fusion pipeline against stock XLA: the measurement that
``bench/fusion_vs_stock.py`` and ``hlo demo`` print, in one place.

CPU and GPU studies: docs/fusion_passes.md#study-one-module-both-ways
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Sequence

from hlo_analysis import cost, devices
from hlo_lab.measured import xla_gpu_model
from hlo_analysis.roofline import roofline
from hlo_tools import HloOpcode, Module, parse
from passes import PassManager
from passes.base import split_on_input
from passes.registry import pass_names, parse_pipeline
from xla_bridge import worker
from xla_bridge.errors import XlaCompileError
from xla_bridge.measure import STOCK, Measurement, XlaPipeline
from xla_bridge.compiler import CompileResult

#: CPU-only passes, dropped from a pipeline for the GPU columns.
CPU_ONLY = frozenset({"library-dot-fusion"})


def kernels(module: Module) -> int:
    """Kernels the module runs, loop and call bodies included: the one count
    (``hlo_analysis.cost.kernel_instructions``) that ``analyze`` and ``regress`` print too."""
    return len(cost.kernel_instructions(module))


def fusions(module: Module) -> int:
    return sum(1 for i in module.entry if i.opcode is HloOpcode.FUSION)


def _fusion_names(module: Module | None) -> frozenset[str]:
    return frozenset(i.name for i in module.entry if i.opcode is HloOpcode.FUSION) if module is not None else frozenset()


def ours(spec: str | Sequence, backend: str, mode: str = "as-written") -> XlaPipeline:
    """The passes of ``spec`` (names or ``Pass`` objects) run inside XLA in ``mode``
    (``XlaPipeline.fusion``: by default XLA as written, ours deciding every fusion)."""
    return XlaPipeline.fusion(PassManager(parse_pipeline(spec)), backend, mode)


def on_input(text: str, passes: Sequence, name: str = "<module>") -> tuple[str, list]:
    """``text`` rewritten by those of ``passes`` that take the module as given
    (``Pass.on_input``, such as cache-update-in-place), and the rest, which run
    inside XLA at its hook: our side of every study starts from that text."""
    first, hooked = split_on_input(passes)
    if not first:
        return text, hooked
    module = parse(text, source=name)
    PassManager(first).run(module)
    return module.to_text(), hooked


def _stock_and_ours(measurement: Measurement, text: str, spec: str | Sequence,
                    mode: str = "as-written") -> tuple[CompileResult, CompileResult, frozenset[str]]:
    """The module compiled stock and under ``ours`` in ``mode`` (our passes that
    take the module as given first, ``on_input``), and the names of the fusions
    our passes wrote (empty when the hook never ran)."""
    mine, hooked = on_input(text, parse_pipeline(spec))
    stock = measurement.compile(text, STOCK)
    res = measurement.compile(mine, ours(hooked, measurement.backend, mode))
    return stock, res, _fusion_names(res.hook.after)


def _kept(written: frozenset[str], optimized: Module) -> bool:
    """Did XLA compile every fusion we wrote, under its name? (XLA:GPU's
    fusion-wrapper may add one-op fusions around what we left alone; its
    rematerialization, when the module does not fit the device, recomputes a
    fusion as a clone named ``NAME.remat...``, which counts as kept.)"""
    names = _fusion_names(optimized)
    missing = written - names
    return not missing or all(any(n.startswith(m + ".remat") for n in names) for m in missing)


def _written(hook) -> frozenset[str]:
    """The fusions a hooked pass wrote at its last call: those in the module it
    left that were not in the module XLA handed it (on top of XLA, its own
    fusions are XLA's)."""
    if hook.after is None:
        return frozenset()
    before = parse(hook.seen[-1], source="<hook input>") if hook.seen else None
    return _fusion_names(hook.after) - _fusion_names(before)


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
              mode: str = "as-written", input_sets: int = 3, contained: bool = True) -> CpuRow:
    """Stock XLA vs our pipeline run in ``mode`` (``XlaPipeline.fusion``; on XLA:CPU
    at its pre-scheduler hook), timed interleaved on ``input_sets`` input sets,
    outputs compared.  ``backend="gpu"`` does the same on a real GPU (CPU-only
    passes dropped).  ``contained``: all of it in the XLA worker (``spec`` goes
    there as names or Pass objects)."""
    if contained and not worker.in_worker():
        return worker.contained(cpu_study, (name, text, spec),
                                    dict(reps=reps, warmup=warmup, backend=backend, mode=mode, input_sets=input_sets),
                                    phase="compiling", module=name, backend=backend)

    t0 = time.perf_counter()
    if backend != "cpu":
        spec = gpu_pipeline(spec)
    measurement = Measurement(backend)
    stock, mine, written = _stock_and_ours(measurement, text, spec, mode)
    b = measurement.benchmark(stock, mine, reps=reps, warmup=warmup, input_sets=input_sets)
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
class GpuSide:
    """One side of a GPU study, every figure from one model for both sides: kernels,
    bytes and flops from our cost model, time from our roofline, and
    ``xla_where_priced_us``: XLA's own estimate for each of the ``xla_priced``
    kernels it priced, our roofline for the rest (``xla_gpu_model.module_time``).
    XLA writes its estimates before the post-scheduler hook, so a fusion our
    passes wrote is never XLA-priced: on our side that figure is mostly ours."""

    kernels: int
    bytes: float
    flops: float
    predicted_us: float
    xla_where_priced_us: float
    xla_priced: int

    @classmethod
    def of(cls, module: Module, device: devices.Device) -> "GpuSide":
        """The figures of one optimized module on ``device``."""
        c = cost.analyze(module)
        t = xla_gpu_model.module_time(module, device)
        return cls(kernels=kernels(module), bytes=c.bytes_accessed, flops=c.flops,
                   predicted_us=roofline(module, device).time_s * 1e6, xla_where_priced_us=t.seconds * 1e6,
                   xla_priced=t.priced)


@dataclass
class GpuRow:
    """Stock XLA:GPU against our pipeline in one ``FUSION_MODES`` mode, compiled
    for ``target`` without a GPU."""

    module: str
    target: str
    mode: str
    stock: GpuSide
    ours: GpuSide
    fusions_written: int
    kept: bool

    @property
    def predicted_speedup(self) -> float:
        return self.stock.predicted_us / self.ours.predicted_us if self.ours.predicted_us else float("inf")

    @property
    def xla_where_priced_speedup(self) -> float:
        """Stock over ours in ``xla_where_priced_us`` (see ``GpuSide``: a mixed figure)."""
        us = self.ours.xla_where_priced_us
        return self.stock.xla_where_priced_us / us if us else float("inf")

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "predicted_speedup": self.predicted_speedup,
                "xla_where_priced_speedup": self.xla_where_priced_speedup}


def gpu_pipeline(spec: str) -> str:
    """``spec`` without the CPU-only passes."""
    return ",".join(p for p in pass_names(spec) if p not in CPU_ONLY)


def gpu_passes(spec: str | Sequence, target: str) -> list:
    """The passes of ``spec`` for XLA:GPU ``target``: CPU-only ones dropped, and
    those that price their decisions on a GPU (``target`` fields, the GPU
    profile's) pricing on this one."""
    passes = parse_pipeline(gpu_pipeline(spec)) if isinstance(spec, str) else list(spec)
    return [dataclasses.replace(p, target=target) if "target" in getattr(p, "__dataclass_fields__", {}) else p
            for p in passes]


def gpu_study(name: str, text: str, spec: str, target: str = "h100", *, mode: str = "on-top",
              contained: bool = True) -> GpuRow:
    """Stock XLA:GPU vs our pipeline in ``mode`` (``XlaPipeline.fusion``), both compiled
    here for ``target`` without a GPU and with XLA's per-fusion estimates collected:
    ``GpuSide`` figures of both optimized modules, and whether XLA:GPU compiled
    every fusion we wrote.  ``contained``: in the XLA worker."""
    return gpu_study_modes(name, text, spec, target, modes=(mode,), contained=contained)[0]


def gpu_study_modes(name: str, text: str, spec: str, target: str = "h100", *,
                    modes: Sequence[str] = ("replace", "on-top", "as-written"), contained: bool = True) -> list[GpuRow]:
    """``gpu_study`` in each of ``modes``, stock compiled once."""
    if contained and not worker.in_worker():
        return worker.contained(gpu_study_modes, (name, text, spec, target), dict(modes=tuple(modes)),
                                    phase="compiling", module=name, backend="gpu")

    device = devices.load(target)
    measurement = Measurement("gpu", target=target, flags={xla_gpu_model.COLLECT_FLAG: True})
    stock = GpuSide.of(measurement.compile(text, STOCK).optimized_module, device)
    mine_text, hooked = on_input(text, gpu_passes(spec, target), name)
    rows = []
    for mode in modes:
        mine = measurement.compile(mine_text, ours(hooked, "gpu", mode))
        written = _written(mine.hook)
        rows.append(GpuRow(module=name, target=target, mode=mode, stock=stock,
                           ours=GpuSide.of(mine.optimized_module, device),
                           fusions_written=len(written) if mine.hook.after is not None else -1,
                           kept=mine.hook.after is not None and _kept(written, mine.optimized_module)))
    return rows


@dataclass
class StudyError:
    """A module whose study failed (an XLA error or abort): the row it gets."""

    module: str
    error: str

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def studies(modules, spec: str, *, reps: int = 30, warmup: int = 5, backend: str = "cpu",
            target: str | None = None, mode: str = "on-top") -> list[CpuRow | GpuRow | StudyError]:
    """``cpu_study`` (or ``gpu_study`` for ``target``) of each ``(name, text)``, in
    order; a module XLA refuses or aborts on becomes a ``StudyError`` row and the
    others go on."""
    rows: list[CpuRow | GpuRow | StudyError] = []
    for name, text in modules:
        try:
            rows.append(gpu_study(name, text, spec, target, mode=mode) if target else
                        cpu_study(name, text, spec, reps=reps, warmup=warmup, backend=backend))
        except XlaCompileError as e:
            rows.append(StudyError(name, str(e)))
    return rows
