"""One module through one "side" of a comparison: an XLA version (``xla_versions``)
with extra XLA flags (a pass disabled, say), compiled for XLA:CPU (run and timed
here) and for a GPU without one (deviceless XLA:GPU), each in that version's
worker.

    side = Side("0.11.2")
    run = profile(text, side, target="h100")
    run.cpu_text, run.gpu_text, run.bench.a.median_us, run.outputs

What comes back is plain data (texts, floats, numpy arrays, a ``BenchResult``),
so that it crosses from a worker under another jax; an XLA abort on one side is
that side's error (``cpu_error`` / ``gpu_error``), and the next call gets a
fresh worker.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from hlo_tools.errors import HloError
from hlo_tools.parser import parse

from . import xla, xla_versions, xla_worker
from .errors import XlaAbortError
from .xla_bench import BenchResult, Timing, time_compiled
from .xla_compile import compile, parse_flags
from .xla_inputs import make_inputs
from .xla_run import run


@dataclass(frozen=True)
class Side:
    """What compiles a module: ``version`` (a jax version set up with ``hlo xla add``,
    or "current": this environment's) and ``flags`` (XLA debug options,
    ``--xla_name=value``; e.g. ``--xla_disable_hlo_passes=fusion``)."""

    version: str = "current"
    flags: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "flags", tuple(self.flags))
        parse_flags(list(self.flags))  # a malformed flag fails here, before any compile
        if self.version != "current":
            xla_versions.check_spelling(self.version)

    @property
    def label(self) -> str:
        v = xla_versions.current() if self.version == "current" else self.version
        return v + "".join(f" {f}" for f in self.flags)


@dataclass(frozen=True)
class SideRun:
    """One module through one side: XLA's optimized modules (texts), the CPU
    timing and outputs, and what failed, as plain data."""

    side: Side
    jax: str = ""
    jaxlib: str = ""
    cpu_text: str | None = None
    cpu_error: str | None = None
    gpu_text: str | None = None
    gpu_error: str | None = None
    target: str | None = None
    bench: BenchResult | None = None
    measure_note: str = ""
    outputs: list[np.ndarray] | None = field(default=None, repr=False)
    compile_seconds: dict[str, float] = field(default_factory=dict)


def cpu_side(text: str, flags: list[str], measure: bool, reps: int, warmup: int, seed: int) -> dict:
    """In the worker: XLA:CPU's stock compile of ``text``; when ``measure``, its
    outputs on ``make_inputs(seed)`` and its run time."""
    versions = xla.jax_versions()
    c = compile(text, "cpu", "stock", flags=flags)
    out = {"versions": versions, "text": c.optimized_text, "seconds": c.compile_seconds}
    if measure:
        sets = make_inputs(parse(text, source=f"<{c.module_name}>"), seed=seed, sets=2)
        outputs = run(c, sets[0])
        t: Timing = time_compiled(c, sets, reps=reps, warmup=warmup)
        out["outputs"] = outputs
        out["bench"] = BenchResult(name_a=c.module_name, name_b="", pipeline_a="stock", pipeline_b="",
                                   backend="cpu", device=c.device, reps=reps, warmup=warmup, input_sets=len(sets),
                                   a=t, b=None, speedup=None, speedup_p10=None, speedup_p90=None,
                                   compile_seconds=(c.compile_seconds, None))
    return out


def gpu_side(text: str, flags: list[str], target: str) -> dict:
    """In the worker: XLA:GPU's compile of ``text`` for ``target``, without a GPU."""
    if not xla.cuda_plugin_available():
        v = xla.jax_versions()["jaxlib"]
        raise HloError(f"jax {v} has no CUDA plugin here (deviceless XLA:GPU): `hlo xla add {v}` installs it")
    c = compile(text, "gpu", "stock", flags=flags, target=target)
    return {"text": c.optimized_text, "seconds": c.compile_seconds}


def _why(e: BaseException) -> str:
    s = str(e).strip()
    return s.splitlines()[0] if s else type(e).__name__


def profile(text: str, side: Side, *, cpu: bool = True, target: str | None = "h100", measure: bool = True,
            reps: int = 20, warmup: int = 3, seed: int = 0, module: str = "?") -> SideRun:
    """``text`` through ``side``: XLA:CPU (compiled; run and timed when ``measure``)
    and, when ``target`` is given, XLA:GPU for that GPU without one.  Each in the
    side's worker; a failure (an XLA error or abort) is recorded, not raised."""
    flags = list(side.flags)
    res: dict = {"side": side, "target": target}
    with xla_versions.activated(side.version):
        if cpu:
            try:
                got = xla_worker.contained(cpu_side, (text, flags, measure, reps, warmup, seed),
                                           phase="compiling", module=module, backend="cpu")
                v = got["versions"]
                res.update(jax=v["jax"], jaxlib=v["jaxlib"], cpu_text=got["text"], bench=got.get("bench"),
                           outputs=got.get("outputs"), compile_seconds={"cpu": got["seconds"]})
            except (HloError, XlaAbortError, ValueError) as e:
                res["cpu_error"] = _why(e)
        if target is not None:
            try:
                got = xla_worker.contained(gpu_side, (text, flags, target), phase="compiling", module=module,
                                           backend="gpu")
                res["gpu_text"] = got["text"]
                res.setdefault("compile_seconds", {})["gpu"] = got["seconds"]
            except (HloError, XlaAbortError, ValueError) as e:
                res["gpu_error"] = _why(e)
        if not res.get("jax"):
            v = xla_worker.contained(xla.jax_versions, phase="starting", module=module)
            res.update(jax=v["jax"], jaxlib=v["jaxlib"])
    return SideRun(**res)
