"""Time two compiled modules side by side in one process.

Warm-up, then A and B interleaved (ABBA order, so drift hits both alike), each
repetition cycling through several input sets already on the device.  The timed
region is exactly the executable's ``execute`` call plus waiting for its outputs
(``block_until_ready``, which synchronises a GPU); nothing else runs inside it.
The speedup is A/B per interleaved pair (> 1: B is faster), reported as the
median with p10/p90 of those paired ratios.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field

import numpy as np

from . import jax_internals, worker
from .display import speedup_label, speedup_verdict, within_noise
from hlo_analysis.units import finite, html_table
from .errors import XlaCompileError
from .compiler import CompileResult, Hook, adopt_hook_state, compile, parse_flags
from .inputs import make_inputs
from .mlir_rewrite import hlo_of
from .runner import (_compiled, _module_of, _name_of, _not_runnable, compare_outputs, labels, output_precisions,
                      require_device, run)


@dataclass(frozen=True)
class Timing:
    """Run times in microseconds."""

    median_us: float
    p10_us: float
    p90_us: float
    samples_us: tuple[float, ...] = field(repr=False, default=())

    @classmethod
    def of(cls, samples_ns) -> "Timing":
        us = np.asarray(samples_ns, dtype=np.float64) / 1e3
        return cls(float(np.median(us)), float(np.percentile(us, 10)), float(np.percentile(us, 90)), tuple(us.tolist()))

    def __str__(self) -> str:
        return f"{_fmt(self.median_us)} [{_fmt(self.p10_us)} .. {_fmt(self.p90_us)}]"


def _fmt(us: float) -> str:
    return f"{us / 1e3:.3f} ms" if us >= 1000 else f"{us:.1f} us"


@dataclass(frozen=True)
class BenchResult:
    """A side-by-side measurement of A (reference) and B."""

    name_a: str
    name_b: str
    pipeline_a: str
    pipeline_b: str
    backend: str
    device: str
    reps: int
    warmup: int
    input_sets: int
    a: Timing
    b: Timing | None
    speedup: float | None          # median of paired A/B ratios (> 1: B faster)
    speedup_p10: float | None
    speedup_p90: float | None
    verdict: str = "unchecked"     # of comparing B's outputs with A's
    mismatch: str = ""             # the first output that differs, when the verdict is "mismatch"
    compile_seconds: tuple[float, float | None] = (0.0, None)
    hook_b: Hook | None = field(default=None, repr=False, compare=False)  # what B's hooked pass saw and left
    #: XLA's optimized texts of A and B: what was timed, for a diff without compiling again
    optimized: tuple[str, str | None] = field(default=("", None), repr=False, compare=False)

    def table(self) -> str:
        rows = [("", "median", "p10", "p90")]
        rows.append((f"A {self.name_a} ({self.pipeline_a})", _fmt(self.a.median_us), _fmt(self.a.p10_us), _fmt(self.a.p90_us)))
        if self.b is not None:
            rows.append((f"B {self.name_b} ({self.pipeline_b})", _fmt(self.b.median_us), _fmt(self.b.p10_us), _fmt(self.b.p90_us)))
            rows.append(("speedup A/B", f"{self.speedup:.3f}x", f"{self.speedup_p10:.3f}x", f"{self.speedup_p90:.3f}x"))
        widths = [max(len(r[i]) for r in rows) for i in range(4)]
        lines = ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))) for r in rows]
        lines.append(f"{self.backend} {self.device}; {self.reps} reps after {self.warmup} warm-up, "
                     f"{self.input_sets} input sets; outputs: {self.verdict}")
        if self.b is not None:
            lines.append(self.noise)
        return "\n".join(lines)

    @property
    def noise(self) -> str:
        """What the speedup's p10-p90 range says (``display.speedup_verdict``)."""
        return speedup_verdict(self.speedup_p10, self.speedup_p90)

    @property
    def within_noise(self) -> bool:
        """The p10-p90 range of the speedup spans 1.0: not a result."""
        return within_noise(self.speedup_p10, self.speedup_p90)

    def as_dict(self) -> dict:
        """The result as JSON-ready data (``hlo bench --json``); no samples."""
        def timing(t: Timing | None) -> dict | None:
            return None if t is None else {"median_us": t.median_us, "p10_us": t.p10_us, "p90_us": t.p90_us}

        return finite({"a": {"module": self.name_a, "pipeline": self.pipeline_a, **timing(self.a)},
                       "b": None if self.b is None else {"module": self.name_b, "pipeline": self.pipeline_b,
                                                         **timing(self.b)},
                       "a_median_us": self.a.median_us, "b_median_us": self.b.median_us if self.b else None,
                       "speedup": self.speedup, "speedup_p10": self.speedup_p10, "speedup_p90": self.speedup_p90,
                       "within_noise": self.within_noise, "noise": self.noise if self.b is not None else None,
                       "outputs": self.verdict, "backend": self.backend, "device": self.device,
                       "pipeline_a": self.pipeline_a, "pipeline_b": self.pipeline_b, "reps": self.reps,
                       "warmup": self.warmup, "input_sets": self.input_sets,
                       "compile_seconds": list(self.compile_seconds)})

    def _repr_html_(self) -> str:
        rows = [(f"A {self.name_a}", self.pipeline_a, _fmt(self.a.median_us), _fmt(self.a.p10_us), _fmt(self.a.p90_us))]
        if self.b is not None:
            rows.append((f"B {self.name_b}", self.pipeline_b, _fmt(self.b.median_us), _fmt(self.b.p10_us),
                         _fmt(self.b.p90_us)))
        notes = [f"speedup A/B {speedup_label(self.speedup, self.speedup_p10, self.speedup_p90)}; "
                 f"outputs: {self.verdict}"] if self.b is not None else [f"outputs: {self.verdict}"]
        if self.b is not None:
            notes.append(self.noise)
        notes.append(f"XLA:{self.backend.upper()} on {self.device}; {self.reps} ABBA reps after {self.warmup} warm-up")
        return html_table("benchmark", ("", "pipeline", "median", "p10", "p90"), rows, notes)


class _Runner:
    """An executable with its input sets on the device: ``time_once`` is the
    timed call and nothing more."""

    def __init__(self, compiled, host_sets: list[list[np.ndarray]]):
        if not compiled.runnable:
            raise XlaCompileError(_not_runnable(compiled), module_name=compiled.module_name,
                                      backend=compiled.backend, stage="run")
        worker.note("running", compiled.module_name)
        self.compiled = compiled
        self.host_sets = host_sets
        self.dev = compiled.device_handle
        self.sets = [[jax_internals.device_put(x, self.dev) for x in s] for s in host_sets]
        self.execute = jax_internals.executor(compiled.executable)
        self.donates = False  # set when XLA consumed (donated) the inputs

    def time_once(self, k: int) -> int:
        bufs = self.sets[k]
        if self.donates:
            bufs = self.sets[k] = [jax_internals.device_put(x, self.dev) for x in self.host_sets[k]]
        execute, clock = self.execute, time.perf_counter_ns
        t0 = clock()
        out = execute(bufs)
        for o in out:
            o.block_until_ready()
        t1 = clock()
        if not self.donates and any(b.is_deleted() for b in bufs):
            self.donates = True
        return t1 - t0


def time_compiled(compiled, input_sets: list[list[np.ndarray]], *, reps: int = 50, warmup: int = 5) -> Timing:
    """Times one compiled module alone."""
    r = _Runner(compiled, input_sets)
    for i in range(warmup):
        r.time_once(i % len(input_sets))
    return Timing.of([r.time_once(i % len(input_sets)) for i in range(reps)])


def benchmark(a, b=None, *, backend: str = "cpu", pipeline_a: str = "stock", pipeline_b: str = "as-written",
              reps: int = 50, warmup: int = 5, input_sets: int = 3, seed: int = 0, flags=None,
              check: bool = True, hook_b=None, contained: bool = False) -> BenchResult:
    """Compiles (unless given CompileResults) and times A and B interleaved on the
    same inputs; ``check`` first compares B's outputs with A's (the verdict is part
    of the result).  ``b=None`` times A alone.  ``hook_b``: a ``Hook`` (or
    ``(pass, stage)``) run inside XLA's pipeline when compiling B.

    ``contained``: compile, run and time in the XLA worker (Modules and texts
    only), where an abort raises ``XlaAbortError`` instead of ending this process;
    the timings are as good there (both sides run in that one process).  What
    ``hook_b`` saw comes back onto it. ``StableHloModule``s are converted to our IR first."""
    a, b = hlo_of(a), hlo_of(b)
    if reps < 1:
        raise ValueError("reps must be >= 1")
    if isinstance(hook_b, tuple):
        hook_b = Hook(*hook_b)
    if contained and not worker.in_worker():
        if any(isinstance(x, CompileResult) for x in (a, b)):
            raise TypeError("benchmark(contained=True) compiles in the XLA worker: give Modules or HLO texts, "
                            "not CompileResults (their executables cannot move there)")
        parse_flags(flags)
        kwargs = dict(backend=backend, pipeline_a=pipeline_a, pipeline_b=pipeline_b, reps=reps, warmup=warmup,
                      input_sets=input_sets, seed=seed, flags=flags, check=check, hook_b=hook_b)
        res = worker.contained(benchmark, (a, b), kwargs, phase="compiling", module=_label(a), backend=backend)
        if hook_b is not None and res.hook_b is not None:
            adopt_hook_state(hook_b, res.hook_b)
        return dataclasses.replace(res, hook_b=hook_b)
    require_device(backend)
    ma = _module_of(a)
    sets = make_inputs(ma, seed=seed, sets=max(1, input_sets))
    name_b = _label(b) if b is not None else ""
    la, lb = labels(_label(a), name_b, pipeline_a, pipeline_b) if b is not None else (_label(a), "")
    with worker.naming(la):
        ca = _compiled(a, backend, pipeline_a, flags, None)
    with worker.naming(lb):
        cb = _compiled(b, backend, pipeline_b, flags, None, hook_b) if b is not None else None
    verdict, mismatch = "unchecked", ""
    if check and cb is not None:
        with worker.naming(la):
            out_a = run(ca, sets[0])
        with worker.naming(lb):
            out_b = run(cb, sets[0])
        cmp = compare_outputs(out_a, out_b, through=output_precisions(ma))
        verdict = cmp.verdict
        mismatch = cmp.first_difference
    with worker.naming(la):
        runners = [_Runner(ca, sets)]
    if cb is not None:
        with worker.naming(lb):
            runners.append(_Runner(cb, sets))
    worker.note("running", f"{la} and {lb}" if cb is not None else la)  # the timed loop runs both
    n = len(sets)
    for i in range(warmup):
        for r in runners:
            r.time_once(i % n)
    samples = [[0] * reps for _ in runners]
    for i in range(reps):
        order = runners if i % 2 == 0 else runners[::-1]  # ABBA
        for r in order:
            samples[runners.index(r)][i] = r.time_once(i % n)
    ta = Timing.of(samples[0])
    tb = Timing.of(samples[1]) if cb is not None else None
    sp = sp10 = sp90 = None
    if cb is not None:
        ratios = np.asarray(samples[0], np.float64) / np.maximum(np.asarray(samples[1], np.float64), 1)
        sp, sp10, sp90 = float(np.median(ratios)), float(np.percentile(ratios, 10)), float(np.percentile(ratios, 90))
    return BenchResult(
        name_a=ca.module_name, name_b=cb.module_name if cb else "", pipeline_a=ca.pipeline,
        pipeline_b=cb.pipeline if cb else "", backend=ca.backend, device=ca.device, reps=reps, warmup=warmup,
        input_sets=n, a=ta, b=tb, speedup=sp, speedup_p10=sp10, speedup_p90=sp90, verdict=verdict, mismatch=mismatch,
        compile_seconds=(ca.compile_seconds, cb.compile_seconds if cb else None), hook_b=hook_b,
        optimized=(ca.optimized_text, cb.optimized_text if cb else None))


def _label(x) -> str:
    return _name_of(x)


TRIVIAL_MODULE = """HloModule trivial, entry_computation_layout={(f32[])->f32[]}

ENTRY %main (x: f32[]) -> f32[] {
  %x = f32[] parameter(0)
  ROOT %y = f32[] add(%x, %x)
}
"""


def harness_overhead(*, reps: int = 2000, backend: str = "cpu") -> dict[str, float]:
    """What the harness adds: the measured run time of a trivial module (one
    scalar add), and the cost of the clock pair alone, both in microseconds."""
    c = compile(TRIVIAL_MODULE, backend)
    t = time_compiled(c, [[np.float32(1.0)]], reps=reps, warmup=50)
    clock = time.perf_counter_ns
    pairs = []
    for _ in range(reps):
        t0 = clock()
        t1 = clock()
        pairs.append(t1 - t0)
    return {"trivial_median_us": t.median_us, "trivial_p10_us": t.p10_us, "trivial_p90_us": t.p90_us,
            "clock_pair_us": float(np.median(pairs)) / 1e3}
