"""What an ``hlo tune`` worker process does with one candidate: compile it with
real XLA (its decision set replayed at the fusion hook), check its outputs
against stock's, and time both interleaved; or, for a GPU target compiled
without a GPU, price both optimized modules with the GPU roofline.

Each worker is an ``worker.Worker`` process (an XLA abort loses only that
candidate) and keeps, per module, stock's compile and its last few candidates'
compiles, so a candidate measured again (a win is, before it is kept) on the
worker that measured it first is not compiled again (on another, it is).  Several workers compile at once, but nothing compiles while
one times: compiles hold a lock file shared, timing holds it exclusively
(on a 2-core machine a compile beside a timed loop takes a core from it).
"""

from __future__ import annotations

import contextlib
import fcntl
import time
from collections import OrderedDict
from typing import Any, Iterator

from hlo_analysis import devices
from passes.fusion.decisions import DecisionFusion, FusionDecisions
from xla_bridge.measure import STOCK, Measurement, XlaPipeline
from xla_bridge.bench import benchmark
from xla_bridge.compiler import CompileResult
from xla_bridge.runner import require_device

from hlo_lab.study import GpuSide, kernels

from .space import text_hash
from .store import Measured

#: How a decision set runs inside XLA: on XLA:CPU ours decide every fusion; on
#: XLA:GPU ours go on top of stock's (docs/xla_gpu_modes.md: the best mode).
MODE = {"cpu": "as-written", "gpu": "on-top"}

_STOCK: dict[tuple, tuple[CompileResult, str, GpuSide | None]] = {}
_CANDIDATES: "OrderedDict[tuple, CompileResult]" = OrderedDict()
_KEEP = 6


def _see(module) -> None:
    """A hooked pass that changes nothing: the hook records what XLA hands it."""
    return None


def _measurement(backend: str, target: str | None) -> Measurement:
    return Measurement("gpu" if target else backend, target=target)


def _side(cr: CompileResult, target: str) -> GpuSide:
    return GpuSide.of(cr.optimized_module, devices.load(target))


def _stock(text: str, backend: str, target: str | None) -> tuple[CompileResult, str, GpuSide | None]:
    """Stock's compile, the module the hook is handed, and (for ``target``) stock's
    figures on that GPU, each made once per module."""
    key = (text_hash(text), backend, target)
    if key not in _STOCK:
        m = _measurement(backend, target)
        stock = m.compile(text, STOCK)
        seen = m.compile(text, XlaPipeline.fusion(_see, m.backend, MODE[m.backend]))
        _STOCK[key] = (stock, seen.hook.seen[-1], _side(stock, target) if target else None)
    return _STOCK[key]


def prepare(text: str, backend: str, target: str | None) -> dict[str, Any]:
    """Compiles stock (kept for ``evaluate``) and returns the module our passes
    are handed at the hook (``seen``) and stock's optimized module (to read its
    decisions back).  Without a target, raises at once when nothing can run on
    ``backend`` here (``NoDeviceError``: no GPU)."""
    if not target:
        require_device(backend)
    stock, seen, _ = _stock(text, backend, target)
    return {"seen": seen, "stock_optimized": stock.optimized_module.to_text()}


@contextlib.contextmanager
def _lock(path: str | None, exclusive: bool) -> Iterator[None]:
    """The timing lock: shared for a compile, exclusive for a timed loop."""
    if not path:
        yield
        return
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _candidate(text: str, decisions: FusionDecisions, backend: str, target: str | None,
               model: str | None) -> tuple[CompileResult, float]:
    key = (text_hash(text), backend, target, model, decisions.key())
    if key in _CANDIDATES:
        _CANDIDATES.move_to_end(key)
        return _CANDIDATES[key], 0.0
    m = _measurement(backend, target)
    t0 = time.perf_counter()
    # on XLA:CPU, a GPU profile's fusions (``model``) are labelled as XLA:CPU labels them
    hooked = DecisionFusion(decisions, model, cpu_kinds=m.backend == "cpu" and model is not None)
    cr = m.compile(text, XlaPipeline.fusion(hooked, m.backend, MODE[m.backend]))
    _CANDIDATES[key] = cr
    while len(_CANDIDATES) > _KEEP:
        _CANDIDATES.popitem(last=False)
    return cr, time.perf_counter() - t0


def predict(text: str, decisions: dict, *, target: str) -> dict[str, float | None]:
    """One decision set against stock XLA:GPU, both compiled for ``target`` without
    a GPU (ours on top of stock's fusions, as ``hlo tune --target``): the speedup
    by our roofline (``ours``) and by XLA's own GPU model where it priced the
    kernels (``xla``, ``GpuSide.xla_where_priced_us``)."""
    _, _, s = _stock(text, "gpu", target)
    cr, _ = _candidate(text, FusionDecisions.from_dict(decisions), "gpu", target, target)
    c = _side(cr, target)
    return {"ours": s.predicted_us / c.predicted_us if c.predicted_us else None,
            "xla": s.xla_where_priced_us / c.xla_where_priced_us if c.xla_where_priced_us else None}


def evaluate(text: str, decisions: dict, fused_hash: str, *, backend: str = "cpu", target: str | None = None,
             model: str | None = None, reps: int = 20, warmup: int = 3, input_sets: int = 2,
             lock: str | None = None) -> Measured:
    """One candidate against stock: measured (paired ABBA ratios stock/candidate,
    outputs compared first) or, for ``target``, predicted by the GPU roofline.
    ``model``: the GPU the GPU-profile passes price on (None on XLA:CPU)."""
    with _lock(lock, exclusive=False):
        stock, _, stock_side = _stock(text, backend, target)
        cr, compile_s = _candidate(text, FusionDecisions.from_dict(decisions), backend, target, model)
    hook_hash = text_hash(cr.hook.after.to_text()) if cr.hook is not None and cr.hook.after is not None else None
    n_kernels = kernels(cr.optimized_module)
    if target:
        stock_pred, pred = stock_side.predicted_us, _side(cr, target).predicted_us
        s = stock_pred / pred if pred else None
        return Measured(fused_hash, "ok", s, s, s, stock_pred, pred, compile_s, "unchecked", kernels=n_kernels,
                        reps=0, hook_hash=hook_hash)
    with _lock(lock, exclusive=True):
        b = benchmark(stock, cr, reps=reps, warmup=warmup, input_sets=input_sets, check=True)
    status = "ok" if b.verdict in ("exact", "close") else "unequal"
    return Measured(fused_hash, status, b.speedup, b.speedup_p10, b.speedup_p90, b.a.median_us, b.b.median_us,
                    compile_s, b.verdict, error=b.mismatch if status == "unequal" else "", kernels=n_kernels, reps=reps,
                    hook_hash=hook_hash)
