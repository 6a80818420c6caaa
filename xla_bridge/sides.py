"""One module through one "side" of a comparison: an XLA version (``versions``)
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

import contextlib
import dataclasses
from dataclasses import dataclass, field

import numpy as np

from hlo_tools.errors import HloError
from hlo_tools.parser import parse

from . import jax_internals, versions, worker
from .errors import XlaAbortError
from .bench import BenchResult, Timing, _Runner, time_compiled
from .compiler import compile, parse_flags
from .inputs import make_inputs
from .runner import run


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
            versions.check_spelling(self.version)

    @property
    def label(self) -> str:
        v = versions.current() if self.version == "current" else self.version
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
    device: str = ""
    bench: BenchResult | None = None
    measure_note: str = ""
    outputs: list[np.ndarray] | None = field(default=None, repr=False)
    compile_seconds: dict[str, float] = field(default_factory=dict)


#: In a worker: executables with their inputs on the device, held between calls
#: so that two versions' workers can be timed in alternating rounds (``time_sides``).
_HELD: dict[str, _Runner] = {}


def cpu_side(text: str, flags: list[str], measure: bool, reps: int, warmup: int, seed: int,
             hold: str | None = None) -> dict:
    """In the worker: XLA:CPU's stock compile of ``text``; when ``measure``, its
    outputs on ``make_inputs(seed)`` and its run time, or (``hold``) the executable
    kept under that key, warmed up, for ``time_held``."""
    running = jax_internals.jax_versions()
    c = compile(text, "cpu", "stock", flags=flags)
    out = {"versions": running, "text": c.optimized_text, "seconds": c.compile_seconds, "device": c.device}
    if measure:
        sets = make_inputs(parse(text, source=f"<{c.module_name}>"), seed=seed, sets=2)
        out["outputs"] = run(c, sets[0])
        if hold is not None:
            runner = _HELD[hold] = _Runner(c, sets)
            for i in range(warmup):
                runner.time_once(i % len(sets))
            return out
        t: Timing = time_compiled(c, sets, reps=reps, warmup=warmup)
        out["bench"] = _bench(c.module_name, c.device, t, reps, warmup, len(sets), c.compile_seconds)
    return out


def _bench(name: str, device: str, t: Timing, reps: int, warmup: int, sets: int, seconds: float) -> BenchResult:
    return BenchResult(name_a=name, name_b="", pipeline_a="stock", pipeline_b="", backend="cpu", device=device,
                       reps=reps, warmup=warmup, input_sets=sets, a=t, b=None, speedup=None, speedup_p10=None,
                       speedup_p90=None, compile_seconds=(seconds, None))


def time_held(hold: str, reps: int) -> list[int]:
    """In the worker: ``reps`` run times (ns) of the executable held under ``hold``."""
    r = _HELD[hold]
    worker.note("running", r.compiled.module_name)
    return [r.time_once(i % len(r.sets)) for i in range(reps)]


def release(hold: str) -> None:
    """In the worker: drops the executable held under ``hold``."""
    _HELD.pop(hold, None)


def gpu_side(text: str, flags: list[str], target: str) -> dict:
    """In the worker: XLA:GPU's compile of ``text`` for ``target``, without a GPU."""
    if not jax_internals.cuda_plugin_available():
        v = jax_internals.jax_versions()["jaxlib"]
        raise HloError(f"jax {v} has no CUDA plugin here (deviceless XLA:GPU): `hlo xla add {v}` installs it")
    c = compile(text, "gpu", "stock", flags=flags, target=target)
    return {"text": c.optimized_text, "seconds": c.compile_seconds}


def _why(e: BaseException) -> str:
    s = str(e).strip()
    return s.splitlines()[0] if s else type(e).__name__


def profile(text: str, side: Side, *, cpu: bool = True, target: str | None = "h100", measure: bool = True,
            reps: int = 20, warmup: int = 3, seed: int = 0, module: str = "?", hold: str | None = None) -> SideRun:
    """``text`` through ``side``: XLA:CPU (compiled; run and timed when ``measure``)
    and, when ``target`` is given, XLA:GPU for that GPU without one.  Each in the
    side's worker; a failure (an XLA error or abort) is recorded, not raised.
    ``hold``: run, but keep the executable in the worker under that key instead of
    timing it (``time_sides`` times several sides in alternating rounds)."""
    flags = list(side.flags)
    res: dict = {"side": side, "target": target}
    with versions.activated(side.version):
        if cpu:
            try:
                got = worker.contained(cpu_side, (text, flags, measure, reps, warmup, seed, hold),
                                           phase="compiling", module=module, backend="cpu")
                v = got["versions"]
                res.update(jax=v["jax"], jaxlib=v["jaxlib"], cpu_text=got["text"], bench=got.get("bench"),
                           device=got["device"],
                           outputs=got.get("outputs"), compile_seconds={"cpu": got["seconds"]})
            except (HloError, XlaAbortError, ValueError) as e:
                res["cpu_error"] = _why(e)
        if target is not None:
            try:
                got = worker.contained(gpu_side, (text, flags, target), phase="compiling", module=module,
                                           backend="gpu")
                res["gpu_text"] = got["text"]
                res.setdefault("compile_seconds", {})["gpu"] = got["seconds"]
            except (HloError, XlaAbortError, ValueError) as e:
                res["gpu_error"] = _why(e)
        if not res.get("jax"):
            v = worker.contained(jax_internals.jax_versions, phase="starting", module=module)
            res.update(jax=v["jax"], jaxlib=v["jaxlib"])
    return SideRun(**res)


def time_sides(runs: list[SideRun], hold: str, *, reps: int = 50, rounds: int = 5, module: str = "?") -> list[SideRun]:
    """Times the executables ``profile(..., hold=hold)`` left in each side's worker
    in ``rounds`` alternating rounds (ABBA: A B, B A, ...), ``reps`` runs in all
    per side, so that a drift of the machine's speed hits every side alike; then
    releases them.  A side whose worker failed keeps no timing (``measure_note``)."""
    per = max(1, -(-reps // rounds))
    samples: list[list[int]] = [[] for _ in runs]
    alive = [r.outputs is not None for r in runs]
    notes = ["" for _ in runs]
    for k in range(rounds):
        order = list(range(len(runs))) if k % 2 == 0 else list(range(len(runs)))[::-1]
        for i in order:
            if not alive[i]:
                continue
            with versions.activated(runs[i].side.version):
                try:
                    samples[i] += worker.contained(time_held, (hold, per), phase="running", module=module)
                except (HloError, XlaAbortError) as e:
                    alive[i], notes[i] = False, f"timing failed: {_why(e)}"
    out = []
    for i, r in enumerate(runs):
        with versions.activated(r.side.version), contextlib.suppress(HloError, XlaAbortError):
            worker.contained(release, (hold,), phase="running", module=module)
        bench = None
        if alive[i] and samples[i]:
            bench = _bench(module, r.device, Timing.of(samples[i]), len(samples[i]), 0, 2, r.compile_seconds.get("cpu", 0.0))
        out.append(dataclasses.replace(r, bench=bench, measure_note=notes[i] or r.measure_note))
    return out
