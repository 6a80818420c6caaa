"""Per-kernel run times from XLA's own trace events.

Wall-clocking one ``execute`` call times the harness as much as the kernel: on
XLA:CPU a trivial module takes 6-13 us (PjRt argument handling, the thunk
executor, waking the thread pool) while most corpus kernels run for 1-5 us. XLA:CPU's
thunk executor records a TraceMe event around every thunk it runs, named after
the HLO instruction (``hlo_op``), and a matching ``end: NAME`` event when the thunk
completes (later than the first event's end when its work went to the thread
pool). ``thunk_times`` runs an executable under jaxlib's profiler and returns, per
instruction, the span from the start of its event to its ``end:`` event, over
every run.

This uses jaxlib's ``ProfilerSession`` and ``ProfileData``
(``jax_internals.profiler_modules``), both present in jax 0.10-0.12.
"""

from __future__ import annotations

import contextlib
import os
import struct
import warnings
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from hlo_tools.formats import wire_fields

from . import jax_internals
from .bench import _Runner
from .compiler import compile as xla_compile
from .inputs import make_inputs
from .worker import contained as in_worker

_NOT_KERNELS = ("ThreadpoolListener", "ThunkExecutor", "$")


@dataclass(frozen=True)
class ThunkTiming:
    """One instruction's run times over the traced runs, in microseconds."""

    name: str
    samples_us: tuple[float, ...]

    @property
    def median_us(self) -> float:
        return float(np.median(self.samples_us))

    @property
    def p10_us(self) -> float:
        return float(np.percentile(self.samples_us, 10))


class TraceUnavailable(RuntimeError):
    """jaxlib's profiler is missing or recorded no thunk events."""


def _profiler():
    try:
        return jax_internals.profiler_modules()
    except ImportError as e:  # pragma: no cover - present in every supported jaxlib
        raise TraceUnavailable(f"jaxlib has no profiler module: {e}") from e


def _profile(run, *, host_tracer_level: int, strict: bool = False):
    """Calls ``run()`` under jaxlib's profiler; returns the captured ProfileData.
    ``strict`` asks the profiler to fail when a tracer (CUPTI) cannot start,
    where this jaxlib has that option."""
    profiler, profile_data = _profiler()
    opts = profiler.ProfileOptions()
    opts.host_tracer_level = host_tracer_level
    opts.python_tracer_level = 0
    if strict and hasattr(opts, "raise_error_on_start_failure"):
        opts.raise_error_on_start_failure = True
    session = profiler.ProfilerSession(opts)
    try:
        run()
    except BaseException:
        with contextlib.suppress(Exception):  # the run's error is the one to report
            session.stop()
        raise
    space = session.stop()
    return profile_data.ProfileData.from_serialized_xspace(space)


def _events(data, plane_prefix: str, line_prefix: str = "") -> list[tuple[str, float, float]]:
    return [(ev.name, float(ev.start_ns), float(ev.start_ns + ev.duration_ns))
            for plane in data.planes if plane.name.startswith(plane_prefix)
            for line in plane.lines if line.name.startswith(line_prefix) for ev in line.events]


def trace_events(run, *, host_tracer_level: int = 2) -> list[tuple[str, float, float]]:
    """Calls ``run()`` under the profiler; returns its host events as
    ``(name, start_ns, end_ns)``, all threads merged."""
    return _events(_profile(run, host_tracer_level=host_tracer_level), "/host:")


def _runs(compiled, input_sets: list[list[np.ndarray]], reps: int, warmup: int):
    """``warmup`` untraced runs now; returns the function doing the ``reps`` traced ones."""
    runner = _Runner(compiled, input_sets)
    for i in range(warmup):
        runner.time_once(i % len(input_sets))

    def run():
        for i in range(reps):
            runner.time_once(i % len(input_sets))
    return run


def _paired_ends(starts: list[tuple[float, float]], ends: list[float]) -> list[float]:
    """The end of each of one name's events (``starts``: (start, own end), sorted):
    the first ``end: NAME`` event after its start and before the name's next start
    (when the executor saw the thunk complete), or its own end when that is later or
    there is none. The one pairing rule of ``spans`` and ``kernel_events``."""
    en = sorted(ends)
    j = 0
    out = []
    for k, (t0, t1) in enumerate(starts):
        nxt = starts[k + 1][0] if k + 1 < len(starts) else float("inf")
        while j < len(en) and en[j] < t0:
            j += 1
        if j < len(en) and en[j] < nxt:
            out.append(max(en[j], t1))
            j += 1
        else:
            out.append(t1)
    return out


def spans(events: list[tuple[str, float, float]], names: set[str] | None = None) -> dict[str, list[float]]:
    """Per instruction name, its run times in ns: from the start of its event to
    the start of the next ``end: NAME`` event (when the executor saw it complete),
    or to its own event's end when that is later or there is no ``end:`` event."""
    starts: dict[str, list[tuple[float, float]]] = defaultdict(list)
    ends: dict[str, list[float]] = defaultdict(list)
    for name, t0, t1 in events:
        if name.startswith("end: "):
            ends[name[5:]].append(t0)
        elif not name.startswith(_NOT_KERNELS) and (names is None or name in names):
            starts[name].append((t0, t1))
    out: dict[str, list[float]] = {}
    for name, st in starts.items():
        st.sort()
        out[name] = [end - t0 for (t0, _), end in zip(st, _paired_ends(st, ends.get(name, [])))]
    return out


def thunk_times(compiled, input_sets: list[list[np.ndarray]], names, *, reps: int = 20,
                warmup: int = 3) -> dict[str, ThunkTiming]:
    """Runs ``compiled`` ``reps`` times under the profiler (after ``warmup`` untraced
    runs) and returns each of ``names`` (the kernels to look for) with its run
    times. Raises ``TraceUnavailable`` when the trace holds none of them."""
    run = _runs(compiled, input_sets, reps, warmup)
    wanted = set(names)
    found = spans(trace_events(run), wanted)
    if not found:
        raise TraceUnavailable(f"{compiled.module_name}: the profiler recorded none of its {len(wanted)} kernels "
                               f"(is this jaxlib's {compiled.backend} runtime emitting thunk TraceMe events?)")
    return {n: ThunkTiming(n, tuple(t / 1e3 for t in ts)) for n, ts in found.items()}


def device_events(run) -> list[tuple[str, float, float]]:
    """Like ``trace_events`` but the GPU planes' stream lines (``/device:GPU:N``,
    ``Stream #K``): the work as the GPU ran it (CUPTI), not its launches on the
    host, and not the collector's own lines (CUPTI overhead, graph metadata)."""
    return _events(_profile(run, host_tracer_level=0, strict=True), "/device:GPU:", "Stream")


# Transfers between host and device: the harness's argument and result copies, not
# the executable's work.  A device-to-device memcpy stays: XLA:GPU runs a copy
# between equal layouts as one.
_HOST_TRANSFER = ("h2d", "d2h", "htod", "dtoh", "hosttodevice", "devicetohost")


def _is_host_transfer(name: str) -> bool:
    n = name.lower().replace(" ", "").replace("_", "")
    return "memcpy" in n and any(k in n for k in _HOST_TRANSFER)


def device_kernel_us(compiled, input_sets: list[list[np.ndarray]], *, reps: int = 20, warmup: int = 3) -> float:
    """Mean GPU time per run of the executable's device work (kernels, memsets and
    device-to-device copies; host transfers left out), from the device trace.
    Raises ``TraceUnavailable`` when the trace holds none."""
    return sum(device_kernel_times(compiled, input_sets, reps=reps, warmup=warmup).values())


def device_kernel_times(compiled, input_sets: list[list[np.ndarray]], *, reps: int = 20,
                        warmup: int = 3) -> dict[str, float]:
    """Mean GPU time per run of each device kernel, by the kernel's name in the
    trace (XLA:GPU names a kernel after its instruction, ``.`` spelled ``_``; host
    transfers left out).  Raises ``TraceUnavailable`` when the trace holds none."""
    run = _runs(compiled, input_sets, reps, warmup)
    total: dict[str, float] = defaultdict(float)
    for n, t0, t1 in device_events(run):
        if not _is_host_transfer(n):
            total[n] += t1 - t0
    if not total:
        raise TraceUnavailable(f"{compiled.module_name}: the device trace holds no kernels "
                               "(is CUPTI available? jaxlib loads libcupti from the CUDA install)")
    return {n: t / reps / 1e3 for n, t in total.items()}


# -- traces joined to instructions (``hlo profile``) -------------------------------------------


@dataclass(frozen=True, slots=True)
class KernelEvent:
    """One execution of one instruction in a trace, with the keys XLA's profiler
    puts on it (``hlo_op``, ``hlo_module``, ``program_id``; ``run_id`` tells the
    module's runs apart: the join in ``hlo_analysis.profiles``), where it ran (plane:
    the device or host; line: the thread or stream), its own span, and its end as
    the executor saw it (``_paired_ends``: later than its own end when its work went
    to XLA:CPU's thread pool)."""

    hlo_op: str
    hlo_module: str
    program_id: int | None
    run_id: int | None
    plane: str
    line: str
    start_ns: float
    own_end_ns: float
    end_ns: float
    #: XLA:GPU's id shared by the fragments of one kernel launch (XLA's PGLE converter merges them)
    scope_range_id: int | None = None
    #: the device that ran it: an SPMD program runs on each of its devices every run
    device_ordinal: int | None = None


def _int(x) -> int | None:
    try:
        return int(x)
    except (TypeError, ValueError):
        return None


def kernel_events(data) -> list[KernelEvent]:
    """Every event of a ProfileData that names an instruction (an ``hlo_op`` stat),
    on any plane: XLA:CPU's thunks on the host plane, XLA:GPU's kernels on a device
    plane."""
    out: list[KernelEvent] = []
    with warnings.catch_warnings():  # pybind's "builtin type event_stats has no __module__" on some jaxlibs
        warnings.simplefilter("ignore", DeprecationWarning)
        for plane in data.planes:
            for line in plane.lines:
                starts: dict[str, list[tuple[float, float, dict]]] = defaultdict(list)
                ends: dict[str, list[float]] = defaultdict(list)
                for ev in line.events:
                    name = ev.name
                    if name.startswith("end: "):
                        ends[name[5:]].append(float(ev.start_ns))
                        continue
                    stats = dict(ev.stats)
                    if "hlo_op" in stats:
                        t0 = float(ev.start_ns)
                        starts[name].append((t0, t0 + float(ev.duration_ns), stats))
                for name, st in starts.items():
                    st.sort(key=lambda e: e[0])
                    paired = _paired_ends([(t0, t1) for t0, t1, _ in st], ends.get(name, []))
                    for (t0, t1, stats), end in zip(st, paired):
                        out.append(KernelEvent(str(stats["hlo_op"]), str(stats.get("hlo_module", "")),
                                               _int(stats.get("program_id")), _int(stats.get("run_id")),
                                               plane.name, line.name, t0, t1, end,
                                               _int(stats.get("scope_range_id")), _int(stats.get("device_ordinal"))))
    return out


def trace_files(path: str | os.PathLike) -> list[Path]:
    """The XPlane files of a trace: ``path`` itself, or under a folder the newest
    run's (``jax.profiler.trace(DIR)`` writes ``DIR/plugins/profile/RUN/HOST.xplane.pb``,
    one file per host, a new RUN folder per trace)."""
    p = Path(path)
    if p.is_file():
        return [p]
    if not p.is_dir():
        raise TraceUnavailable(f"{path}: no such file or folder")
    files = sorted(p.rglob("*.xplane.pb"))
    if not files:
        raise TraceUnavailable(f"{path}: no *.xplane.pb file under it (jax.profiler.trace(DIR) writes "
                               "DIR/plugins/profile/RUN/HOST.xplane.pb)")
    newest = max(f.parent for f in files)  # RUN folders are named by their start time
    return [f for f in files if f.parent == newest]


def read_trace(path: str | os.PathLike) -> list[KernelEvent]:
    """The instruction events of a trace a user brings (from any machine): an
    ``.xplane.pb`` file or a ``jax.profiler.trace`` folder (``trace_files``)."""
    _, profile_data = _profiler()
    out: list[KernelEvent] = []
    for f in trace_files(path):
        try:
            data = profile_data.ProfileData.from_file(str(f))
        except Exception as e:  # noqa: BLE001 - jaxlib raises its own types for a bad file
            raise TraceUnavailable(f"{f}: not an XPlane profile jaxlib can read ({type(e).__name__}: {e})") from None
        out += kernel_events(data)
    if not out:
        raise TraceUnavailable(f"{path}: the trace holds no instruction events (none carries XLA's hlo_op stat); "
                               "was a jitted computation run while it was recorded?")
    return out


def xla_pgle_costs(path: str | os.PathLike) -> dict[str, float]:
    """XLA's own profile-guided latency estimator input from a trace (jaxlib's
    ``get_profiled_instructions_proto``, XLA's ``xplane_to_profile_instructions``):
    ``{key: cost_us}``. XLA reads device planes only (GPU, TPU, custom): empty for a
    trace of XLA:CPU."""
    profiler, _ = _profiler()
    if not hasattr(profiler, "get_profiled_instructions_proto"):
        raise TraceUnavailable("this jaxlib has no get_profiled_instructions_proto (XLA's PGLE converter)")
    folder = trace_files(path)[0].parent
    data = profiler.get_profiled_instructions_proto(str(folder))
    return dict(_costs(bytes(data)))


def _costs(data: bytes):
    """The ``costs`` (field 1: name 1, cost_us 2 as a double) of a serialized
    ``ProfiledInstructionsProto``."""
    top = wire_fields(data) if data else {}
    if top is None:
        raise TraceUnavailable("XLA's PGLE converter returned a malformed ProfiledInstructionsProto")
    for _, start, end in top.get(1, ()):
        blob = data[start:end]
        f = wire_fields(blob) or {}
        name = blob[f[1][0][1]:f[1][0][2]].decode() if 1 in f else ""
        cost = struct.unpack("<d", blob[f[2][0][1]:f[2][0][2]])[0] if 2 in f else 0.0
        yield name, cost


def _profile_in_worker(text: str, backend: str, reps: int, warmup: int, seed: int) -> tuple[str, list[KernelEvent]]:
    res = xla_compile(text, backend, "stock")
    run = _runs(res, make_inputs(res.optimized_module, seed=seed, sets=2), reps, warmup)
    data = _profile(run, host_tracer_level=2, strict=backend == "gpu")
    return res.optimized_text, kernel_events(data)


def profile_module(text: str, *, backend: str = "cpu", reps: int = 10, warmup: int = 2, seed: int = 0,
                   contained: bool = True, name: str = "?") -> tuple[str, list[KernelEvent]]:
    """Compiles ``text`` with stock XLA, runs it ``reps`` times under the profiler
    (after ``warmup`` untraced runs, two input sets taking turns, as the kernel
    bench does) and returns XLA's optimized module text and the trace's instruction
    events. ``contained``: in the XLA worker (an abort there is an ``XlaAbortError``)."""
    if not contained:
        return _profile_in_worker(text, backend, reps, warmup, seed)
    return in_worker(_profile_in_worker, (text, backend, reps, warmup, seed), phase="profiling", module=name,
                     backend=backend)
