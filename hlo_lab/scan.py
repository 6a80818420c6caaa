"""Corpus-wide analysis: every module of a folder, in parallel, resumable.
``scan(source, out_dir)`` writes ``report.json``, ``report.md`` and ``report.html``.

Sources, caching, reports and what a scan promises: docs/analysis.md#scan-and-report-hlo_labscan-hlo_labscan_report
"""

from __future__ import annotations

import hashlib
import html
import json
import multiprocessing
import os
import re
import secrets
import signal
import sys
import tempfile
import threading
import time
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Iterable

import corpus
from corpus.dump import is_dump_file_name
from hlo_tools.formats import is_inside, walk_module_files
from hlo_tools import parse
from hlo_tools.collector import collector_paused
from hlo_tools.errors import HloError, HloParseError
from hlo_tools.fileio import describe_mode, make_dirs, write_output
from xla_bridge import load

from hlo_analysis import communication, cost, devices, opportunities, quantization, roofline
from hlo_analysis.collectives import infer_mesh

from .md import md_escape
from .scan_report import html_page, markdown

#: Bump when the analysis changes what it computes: old cache entries are ignored.
ANALYSIS_VERSION = 5
SCATTER_POINTS_PER_MODULE = 150
GROUPS_PER_MODULE = 40
REPORT_FORMAT = "fusion_analysis.scan/3"
#: the report lists modules whose predicted time is at least this share of the
#: slowest module's (jax's helper jits must not bury the train step)
DEFAULT_MIN_SHARE = 0.01
REPORT_FILES = ("report.json", "report.md", "report.html")


class NoModulesError(ValueError):
    """The scanned place holds no module file: nothing to analyse."""


@dataclass(frozen=True)
class Task:
    """One module file to analyse; ``label`` names it in the report, ``module``
    groups the files of one module (a dump's module id, a corpus entry), and
    ``root`` is the folder it must stay inside (resolved), checked again by the
    worker right before it reads. ``device`` is the device model it is analysed
    on (empty: the scan's), ``device_why`` why that one."""

    label: str
    path: str
    stage: str = ""
    size: int = 0
    module: str = ""
    root: str = ""
    device: str = ""
    device_why: str = ""


@dataclass
class Found:
    """What discovery found: the tasks, the files it would not read (and why),
    and what kind of place it scanned."""

    tasks: list[Task] = field(default_factory=list)
    skipped: list[dict[str, str]] = field(default_factory=list)
    kind: str = "folder"  # "corpus", "dump", "folder" or "file"


# -- which files are modules, and which may be read -----------------------------------

def _size(p: str | os.PathLike) -> int:
    try:
        return os.stat(p).st_size
    except OSError:
        return 0


def discover(source: str | Path | None = None, *, stages: Iterable[str] | None = None) -> list[Task]:
    """The module files under ``source`` (None: the bundled corpus)."""
    return find(source, stages=stages).tasks


def find(source: str | Path | None = None, *, stages: Iterable[str] | None = None) -> Found:
    """The module files under ``source`` (None: the bundled corpus), and the files
    left out because reading them would leave the folder."""
    wanted = set(stages) if stages else None
    root = None if source is None else Path(source)
    if root is None or (root / "manifest.json").is_file():
        base = os.path.realpath(corpus.CORPUS_DIR if root is None else root)
        found = Found(kind="corpus")
        try:
            entries = list(corpus.load(root=root))
        except (KeyError, TypeError, ValueError) as e:  # JSONDecodeError is a ValueError
            raise ValueError(f"{Path(base) / 'manifest.json'}: not a corpus manifest ({type(e).__name__}: {e})") from None
        for e in entries:
            for stage in e.stages:
                if wanted is not None and stage not in wanted:
                    continue
                try:
                    p = e.path(stage)  # refuses a path that leaves the corpus folder
                except HloParseError:
                    found.skipped.append({"file": str(Path(e.root) / e.files[stage]),
                                          "reason": "manifest path leads outside the corpus folder"})
                    continue
                found.tasks.append(Task(f"{e.name}/{stage}", str(p), stage, _size(p), e.name, base))
        return found
    if not root.exists():
        raise FileNotFoundError(f"no such folder or file: {root}")
    if root.is_file():  # named by the user: read wherever it points
        return Found([Task(root.name, str(root), "", _size(root), root.name, "")], kind="file")
    if not root.is_dir():  # a FIFO or a device would block the scan forever
        raise ValueError(f"{root}: not a regular file ({describe_mode(root.stat().st_mode)}): only module files are read")
    base = os.path.realpath(root)
    walk = walk_module_files(root)
    found = Found(kind="folder")
    if any(is_dump_file_name(p.name) for p in root.iterdir()):
        found = _find_in_dump(root, base, wanted)
        if not found.tasks:  # dump-named files, but no module stage among them: read it as a folder
            found = Found(kind="folder")
    for p, why in walk.skipped:
        found.skipped.append({"file": str(p.relative_to(root)), "reason": why})
    for p in walk.files:
        top = p.relative_to(root).parts[0]
        if found.kind == "dump" and is_dump_file_name(top):
            continue  # a dump's own file (a stage, a per-pass dump, module.mlir): its module is scanned once
        label = str(p.relative_to(root))
        found.tasks.append(Task(label, str(p), "", _size(p), label, base))
    return found


def _find_in_dump(root: Path, base: str, wanted: set[str] | None) -> Found:
    """An ``--xla_dump_to`` folder: each module's ``*optimizations`` stages
    (per-pass dumps and side files are not scanned; ``hlo passes-dump`` walks passes)."""
    found = Found(kind="dump")
    for m in corpus.read_dump_folder(root).modules:  # its skipped files are the folder walk's too
        per_pass = {x.key for x in m.passes}
        for stage, p in sorted(m.stages.items()):
            if not stage.endswith(("before_optimizations", "after_optimizations")) or stage in per_pass:
                continue  # per-pass dumps and XLA:GPU's snapshots (after_spmd_partitioner...) are not scanned
            if wanted is not None and stage not in wanted:
                continue
            key = f"module_{m.module_id:04d}.{m.name}"
            found.tasks.append(Task(f"{key}/{stage}", str(p), stage, _size(p), key, base))
    return found


# -- which device model a module is analysed on ---------------------------------------

_STAGE_PLATFORM = re.compile(r"(?:^|[._])(?:sm_[\d.]+_)?(cpu|gpu)(?:_([a-z0-9]+))?_after_optimizations")


def platform_of(stage_or_name: str) -> str | None:
    """The device model an optimized stage (or a dump file's name) names:
    ``cpu_after_optimizations`` -> ``host``, ``gpu_h200_after_optimizations`` ->
    ``h200``, any other GPU stage (``gpu_``, ``sm_9.0_gpu_``) -> ``h100``; None
    when it names no platform (``before_optimizations``). Only the words right
    before ``after_optimizations`` count (a module may be called ``jit_cpu_thing``)."""
    m = _STAGE_PLATFORM.search(stage_or_name.lower())
    if m is None:
        return None
    if m.group(1) == "cpu":
        return "host"
    return m.group(2) if m.group(2) in devices.GPUS else "h100"


def assign_devices(tasks: list[Task], device: str | None) -> list[Task]:
    """Each task with the device it is analysed on and why. ``device`` given
    (``--device``): that one for all. Otherwise from the stage: an optimized
    stage names its platform (XLA:CPU -> the host CPU model, XLA:GPU -> h100, or
    the GPU it names); a ``before_optimizations`` file follows the optimized
    stage of its own module when there is exactly one platform among them, or
    (a module with no optimized stage) the folder's when it has one platform, and
    is h100 (the default GPU) otherwise."""
    if device:
        return [replace(t, device=device, device_why="--device") for t in tasks]
    by_module: dict[str, set[tuple[str, str]]] = {}
    for t in tasks:
        name = platform_of(t.stage or Path(t.path).name)
        if name is not None:
            by_module.setdefault(t.module or t.label, set()).add((name, t.stage or Path(t.path).name))
    everywhere = {n for seen in by_module.values() for n, _ in seen}
    out = []
    for t in tasks:
        stage = t.stage or Path(t.path).name
        name = platform_of(stage)
        if name is not None:
            why = f"{t.stage or 'file name'} names XLA:{'CPU' if name == 'host' else 'GPU'}" + (
                ": the host CPU model" if name == "host" else f": {name}")
        else:
            seen = by_module.get(t.module or t.label, set())
            platforms = {n for n, _ in seen}
            if len(platforms) == 1:
                name = platforms.pop()
                why = f"not optimized; its module's optimized stage ({sorted(s for _, s in seen)[0]}) ran on " + (
                    "XLA:CPU: the host CPU model" if name == "host" else f"XLA:GPU: {name}")
            elif not platforms and len(everywhere) == 1:
                name = next(iter(everywhere))
                why = "not optimized; every optimized stage in this folder ran on " + (
                    "XLA:CPU: the host CPU model" if name == "host" else f"XLA:GPU: {name}")
            else:
                name = "h100"
                why = ("not optimized and no platform named: h100, the default GPU" if not platforms else
                       f"not optimized, its module was compiled for {', '.join(sorted(platforms))}: h100, the default")
        out.append(replace(t, device=name, device_why=why))
    return out


def device_summary(name: str) -> dict[str, Any]:
    """What the report says about a device model: its name as asked (``name``:
    what each module's ``device`` says) and as loaded (``model``), its roofs
    (memory bandwidth, compute peaks) and where its numbers come from."""
    dev = devices.load(name)
    peaks: dict[str, float] = {}
    for dtype in (("f32",) if dev.kind == "cpu" else ("bf16", "f32")):
        label = f"{dtype if dev.kind == 'cpu' or dtype != 'f32' else 'tf32'} matmul"
        peaks.setdefault(label, dev.matmul_peak(dtype))
    peaks["vector"] = dev.vector_flops
    bandwidths = {"memory": dev.memory_bandwidth}
    if dev.bandwidth_curve and max(r for _, r in dev.bandwidth_curve) > 1.05 * dev.memory_bandwidth:
        bandwidths["cache (fastest measured)"] = max(r for _, r in dev.bandwidth_curve)
    return {"name": name, "model": dev.name, "kind": dev.kind, "source": dev.source, "peak_flops": peaks,
            "bandwidth": bandwidths}


def _round(x: float) -> float:
    return float(f"{x:.6g}")


def analyze_text(text: str, *, label: str, device: str, source: str = "<string>") -> dict[str, Any]:
    """Everything the report needs about one module, as plain JSON data."""
    t0 = time.perf_counter()
    out = analyze_module(parse(text, source=source), label=label, device=device)
    out["seconds"] = time.perf_counter() - t0
    return out


def analyze_module(module, *, label: str, device: str) -> dict[str, Any]:  # module: hlo_tools.ir.Module
    """``analyze_text`` for a module already in our IR (a proto or StableHLO file
    loaded by ``xla_bridge.load``)."""
    t0 = time.perf_counter()
    dev = devices.load(device)
    mc = cost.analyze(module)
    rf = roofline.roofline(module, dev, mc)
    opps = opportunities.find(module, dev, mc)
    groups = opportunities.group(opps, entry=module.entry.name)
    kernels = sorted(rf.kernels, key=lambda k: -k.time_s)
    patterns: dict[str, dict[str, float]] = {}
    for o in opps:
        if o.pattern and o.legal:
            p = patterns.setdefault(o.pattern, {"count": 0, "bytes_saved": 0.0, "time_saved_s": 0.0})
            p["count"] += 1
            p["bytes_saved"] += o.bytes_saved
            p["time_saved_s"] += max(o.time_saved_s, 0.0)
    return {
        "label": label,
        "module": module.name,
        "instructions": module.instruction_count,
        "cost": mc.as_dict(),
        "kernels": len(rf.kernels),
        "time_s": rf.time_s,
        "headroom_s": rf.headroom_s,
        # the saving if every GEMM on floating operands ran at 8 bits (None: no fp8 peak)
        "quantization_headroom_s": quantization.headroom_s(module, dev, rf),
        # per module run, loop bodies times their known trip counts ("cost" is XLA's: bodies once)
        "per_run": {"flops": rf.flops, "bytes accessed": rf.bytes_accessed},
        "loops": rf.loops_note,
        "bounds": rf.bound_counts(),
        "categories": {c: {"kernels": s.kernels, "time_s": s.time_s, "headroom_s": s.headroom_s,
                           "bytes_accessed": s.bytes_accessed, "flops": s.flops}
                       for c, s in rf.by_category().items()},
        "top_kernels": [{"name": k.name, "computation": k.computation, "category": k.category, "bound": k.bound,
                         "time_s": k.time_s, "flops": k.flops, "bytes_accessed": k.bytes_accessed, "executions": k.executions}
                        for k in kernels[:10]],
        "points": [[_round(k.intensity if k.bytes_accessed else 0.0), _round((k.flops + k.transcendentals) / k.time_s),
                    k.category, k.bound, k.name, _round(k.time_s)]
                   for k in kernels[:SCATTER_POINTS_PER_MODULE] if k.time_s > 0],
        "opportunities": {
            "count": len(opps),
            "legal": sum(1 for o in opps if o.legal),
            "bytes_saved_legal": sum(o.bytes_saved for o in opps if o.legal),
            "time_saved_s_legal": sum(max(o.time_saved_s, 0.0) for o in opps if o.legal),
            "patterns": patterns,
            "groups": [{"signature": g.signature, "kind": g.kind, "pattern": g.pattern, "count": g.count,
                        "legal": g.legal_count, "bytes_saved": g.bytes_saved, "time_saved_s": g.time_saved_s,
                        "examples": list(g.examples)}
                       for g in sorted(groups, key=lambda g: (-g.time_saved_s, -g.bytes_saved))[:GROUPS_PER_MODULE]],
        },
        "collectives": communication_summary(module, dev),
        "seconds": time.perf_counter() - t0,
    }


def communication_summary(module, dev: devices.Device) -> dict[str, Any] | None:
    """A sharded module's collective inventory in brief (``communication.analyze``,
    mesh from the module's groups), priced on ``dev`` when it has interconnect
    figures, else on an H100; None for a module on one device."""
    attrs = module.attributes
    if int(attrs.get("num_partitions", 1) or 1) * int(attrs.get("replica_count", 1) or 1) < 2:
        return None
    target = dev if dev.nvlink_bandwidth else devices.load("h100")
    r = communication.analyze(module, infer_mesh(module), target, 1)
    d = r.as_dict()
    return {"mesh": str(r.mesh), "target": target.name, "counts": d["counts"], "bytes": d["bytes"],
            "bytes_by_axis": d["bytes_by_axis"], "comm_s": r.comm_s, "exposed_s": r.exposed_s,
            "exposed_fraction": r.exposed_fraction,
            "peak_bytes": r.memory.peak_bytes if r.memory else None,
            "parameters_bytes": r.memory.parameters_bytes if r.memory else None}


def _describe(e: BaseException) -> str:
    return e.format() if isinstance(e, HloParseError) else f"{type(e).__name__}: {e}"


def _identity(task: Task) -> dict[str, str]:
    """What every result says about its file, analysed or not."""
    return {"label": task.label, "path": task.path, "stage": task.stage, "module_key": task.module or task.label,
            "device": task.device, "device_why": task.device_why}


def _digest(task: Task) -> tuple[str | None, str]:
    """``(SHA-256 of the file, "")``, or ``(None, why it was not read)``: the file
    is read only while it still resolves inside the scanned folder."""
    if task.root and not is_inside(task.path, task.root):
        return None, "not read: it now resolves outside the scanned folder"
    try:
        data = Path(task.path).read_bytes()
    except Exception as e:  # noqa: BLE001 - OSError, a folder, a vanished file: one error entry
        return None, f"cannot read file: {getattr(e, 'strerror', None) or e}"
    return hashlib.sha256(data).hexdigest(), ""


def _cache_file(digest: str, device: str, cache_dir: str | None) -> Path | None:
    if not cache_dir:
        return None
    key = hashlib.sha256(f"{digest}:{device}:{ANALYSIS_VERSION}".encode()).hexdigest()[:32]
    return Path(cache_dir) / f"{key}.json"


def _from_cache(cache: Path | None, task: Task) -> dict[str, Any] | None:
    """The cached result for ``task``, or None: not cached, or unreadable or
    half-written (analysed again)."""
    if cache is None or not cache.is_file():
        return None
    try:
        out = json.loads(cache.read_text())
    except (OSError, ValueError):
        return None
    out.update(_identity(task), cached=True)
    return out


def cached_result(task: Task, device: str, cache_dir: str | None) -> dict[str, Any] | None:
    """The cached result for the file as it is now, or None (then a worker reads
    it, and reports it or analyses it). The scan looks here first: a file the
    cache holds needs no worker, and a scan the cache holds whole, no pool."""
    digest, _ = _digest(task) if cache_dir else (None, "")
    return _from_cache(_cache_file(digest, task.device or device, cache_dir), task) if digest else None


def analyze_task(task: Task, device: str, cache_dir: str | None) -> dict[str, Any]:
    """Runs in a worker: checks the file is still inside the scanned folder,
    hashes it, uses the cache or analyses (on ``task.device``, else ``device``).
    Never raises for a bad module: the error goes into the result."""
    device = task.device or device
    base = {**_identity(task), "device": device}
    digest, why = _digest(task)
    if digest is None:
        return {**base, "error": why}
    cache = _cache_file(digest, device, cache_dir)
    out = _from_cache(cache, task)
    if out is not None:
        return out
    t0 = time.perf_counter()
    try:
        # one module's objects live for the whole analysis: no collections on the
        # way; then its cycles are broken so that it is freed at once, and the
        # collection after the block finds little (less time and a lower peak)
        with collector_paused(collect_after=True):
            module = load(task.path)  # text, .hlo.pb, .mlir; gzip'd with a bound
            out = {**analyze_module(module, label=task.label, device=device), **base, "sha256": digest}
            module.release()
    except Exception as e:  # noqa: BLE001 - reported per file, the scan goes on
        return {**base, "sha256": digest, "error": _describe(e)}
    out["seconds"] = time.perf_counter() - t0
    if cache is not None:
        try:
            write_output(cache, json.dumps(out))
        except (HloError, OSError):
            pass  # a cache that cannot be written costs time on the next run, nothing else
    out["cached"] = False
    return out


def _worker_died(task: Task, how: str) -> dict[str, Any]:
    return {**_identity(task),
            "error": f"the worker process died while analysing this file ({how}); a crash or abort in native code "
                     f"(XLA decoding a proto or StableHLO), or the system killed it; the other files were analysed"}


# -- workers that never outlive the scan ----------------------------------------------

def _start_method() -> str:
    """``fork`` while this process runs a single thread: the workers start at once,
    with the analysis already imported. Else ``forkserver`` (whose server imports
    this module once): a child forked from a threaded process (jax's threads, the
    progress bar's) can deadlock. Threads counted by the kernel, native ones too."""
    try:
        threads = len(os.listdir("/proc/self/task"))
    except OSError:  # not Linux
        return "forkserver"
    return "fork" if threads == 1 else "forkserver"


def _new_pool(jobs: int) -> ProcessPoolExecutor:
    """A pool of worker processes that never outlive the scan (``_worker_init``)."""
    context = multiprocessing.get_context(_start_method())
    if context.get_start_method() == "forkserver":
        context.set_forkserver_preload(["__main__", __name__])  # __main__: the default, for a script's task function
    try:
        cwd = os.getcwd()
    except OSError:  # the scan's folder was deleted: absolute paths still work
        cwd = None
    return ProcessPoolExecutor(max_workers=jobs, mp_context=context, initializer=_worker_init,
                               initargs=(os.getpid(), cwd))


def _worker_init(scan_pid: int, cwd: str | None) -> None:
    """Pool initializer. The worker works in the scan's folder (the fork server
    keeps the one it started in; a scan's paths may be relative). Ctrl-C is the
    scan's to handle (it stops the workers); and a worker dies with the scan even
    when the scan is killed with SIGKILL: Linux's parent-death signal (the
    parent is the scan, or the fork server, which ends with the scan), and a
    thread that watches the parent and the scan."""
    if cwd is not None:
        os.chdir(cwd)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    parent = os.getppid()
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            pass  # the watcher below still ends us
    if os.getppid() != parent or not process_alive(scan_pid):  # the scan died before the signal was armed
        os._exit(1)

    def watch() -> None:
        while True:
            time.sleep(0.5)
            if os.getppid() != parent or not process_alive(scan_pid):
                os._exit(1)

    threading.Thread(target=watch, name="die-with-scan", daemon=True).start()


def process_alive(pid: int) -> bool:
    """Whether process ``pid`` of this machine still runs (one we may not signal does)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _tracked(fn: Callable[..., dict[str, Any]], index: int, track_dir: str, task: Task, *args) -> dict[str, Any]:
    """Runs ``fn(task, *args)`` in a worker, leaving a note of which task it is
    on (``track_dir/<pid>``), so that when the worker dies the scan knows which
    file was being analysed."""
    note = os.path.join(track_dir, str(os.getpid()))
    with open(note, "w") as f:
        f.write(str(index))
    try:
        return fn(task, *args)
    finally:
        try:
            os.unlink(note)
        except OSError:
            pass


def _stop(pool: ProcessPoolExecutor) -> None:
    """Cancels what has not started and ends the workers now (SIGTERM, then SIGKILL)."""
    procs = list((getattr(pool, "_processes", None) or {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    for p in procs:
        if p.is_alive():
            p.terminate()
    for p in procs:
        p.join(2)
        if p.is_alive():
            p.kill()
            p.join(1)


def _run_batch(fn: Callable, tasks: list[tuple[int, Task]], args: tuple, jobs: int, on_done: Callable,
               track_dir: str, on_started: Callable[[], None] = lambda: None) -> tuple[list[int], list[int]]:
    """Runs ``tasks`` on a fresh pool. Returns ``(done, in_flight_when_broken)``:
    the indices finished, and (if a worker died) the indices being analysed at
    that moment; the rest were never finished and can simply run again."""
    done: list[int] = []
    pool = _new_pool(jobs)
    broken = False
    try:
        futures: dict[Future, tuple[int, Task]] = {pool.submit(_tracked, fn, i, track_dir, t, *args): (i, t)
                                                   for i, t in tasks}
        on_started()
        pending = set(futures)
        while pending and not broken:
            finished, pending = wait(pending, timeout=1.0, return_when=FIRST_COMPLETED)
            for f in finished:
                i, t = futures[f]
                try:
                    r = f.result()
                except BrokenProcessPool:
                    broken = True
                    continue
                except Exception as e:  # noqa: BLE001 - e.g. a result that cannot be pickled back
                    r = {**_identity(t), "error": _describe(e)}
                done.append(i)
                on_done(r)
        if broken:  # results that came back before the break are kept, not run again
            for f in pending:
                if f.done() and not f.cancelled() and f.exception() is None:
                    done.append(futures[f][0])
                    on_done(f.result())
    except BaseException:
        _stop(pool)  # Ctrl-C, or anything else: no worker outlives this
        raise
    if not broken:
        pool.shutdown(wait=True)
        return done, []
    _stop(pool)
    in_flight = []
    for note in os.listdir(track_dir):
        try:
            in_flight.append(int(Path(track_dir, note).read_text() or -1))
        except (OSError, ValueError):
            pass
        Path(track_dir, note).unlink(missing_ok=True)
    return done, [i for i in in_flight if i >= 0 and i not in done]


def _run_pool(tasks: list[Task], device: str, cache_dir: str | None, jobs: int, on_done: Callable,
              fn: Callable[..., dict[str, Any]] = analyze_task, on_started: Callable[[], None] = lambda: None) -> None:
    """Every task on a process pool; when a worker dies (BrokenProcessPool) the
    finished results are kept, the files it was on are tried again alone (one
    that kills its worker again is an error entry), and the rest run on a new
    pool. ``fn`` is the task function (tests give one that aborts); ``on_started``
    is called once the first pool's workers are up."""
    todo = list(enumerate(tasks))
    args = (device, cache_dir)
    with tempfile.TemporaryDirectory(prefix="hlo-scan-") as track_dir:
        while todo:
            done, suspects = _run_batch(fn, todo, args, max(1, min(jobs, len(todo))), on_done, track_dir, on_started)
            finished = set(done)
            if not suspects and len(finished) == len(todo):
                return
            if not suspects:  # broke with no note left: try each remaining file alone
                suspects = [i for i, _ in todo if i not in finished]
            for i in suspects:
                alone, _ = _run_batch(fn, [(i, tasks[i])], args, 1, on_done, track_dir)
                if not alone:
                    on_done(_worker_died(tasks[i], "again when it was analysed alone"))
                finished.add(i)
            todo = [(i, t) for i, t in todo if i not in finished]


def _run_ray(tasks: list[Task], device: str, cache_dir: str | None, address: str | None, jobs: int,
             on_done: Callable) -> None:
    """Runs the tasks as Ray tasks (no retries: a task whose worker dies is an
    error entry). A local cluster started here listens on 127.0.0.1 only, gets
    ``jobs`` CPUs and is shut down after."""
    try:
        import ray
    except ImportError as e:
        raise RuntimeError("--ray needs the `ray` package: pip install 'hlo-pass-lab[ray]'") from e
    started = not ray.is_initialized()
    if started:
        if address:
            ray.init(address=address, ignore_reinit_error=True, log_to_driver=False)
        else:
            _init_local_ray(ray, jobs)
    remote = ray.remote(max_retries=0)(analyze_task)
    refs = {remote.remote(t, device, cache_dir): t for t in tasks}
    pending = list(refs)
    try:
        while pending:
            ready, pending = ray.wait(pending, num_returns=1)
            for ref in ready:
                try:
                    on_done(ray.get(ref))
                except ray.exceptions.RayError as e:
                    on_done(_worker_died(refs[ref], type(e).__name__))
    except BaseException:
        for ref in pending:
            try:
                ray.cancel(ref, force=True)
            except Exception:  # noqa: BLE001 - already finished or gone
                pass
        raise
    finally:
        if started:
            ray.shutdown()


def _init_local_ray(ray, jobs: int) -> None:
    """``ray.init`` for a cluster of this machine only. Ray turns an explicit
    127.0.0.1 node address into the machine's reachable one; with clusters off
    (Ray's setting for single machines) the node address is loopback and every
    Ray service binds to 127.0.0.1."""
    from ray._private import ray_constants

    saved = ray_constants.ENABLE_RAY_CLUSTER
    ray_constants.ENABLE_RAY_CLUSTER = False
    try:
        ray.init(num_cpus=jobs, include_dashboard=False, ignore_reinit_error=True, log_to_driver=False)
    finally:
        ray_constants.ENABLE_RAY_CLUSTER = saved


# -- the scan ---------------------------------------------------------------------------

def _new_run_id() -> str:
    return time.strftime("%Y%m%dT%H%M%S") + f"-{os.getpid()}-{secrets.token_hex(3)}"


def _mark(out: Path, run_id: str, status: str, source: str, note: str = "") -> None:
    """Replaces the report files with a marker saying this run is not finished
    (or failed): whatever an earlier scan left there must not pass for this one."""
    data = {"format": REPORT_FORMAT, "status": status, "run_id": run_id, "pid": os.getpid(),
            "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "source": source, "note": note}
    what = {"running": "is running", "interrupted": "was interrupted", "failed": "failed"}.get(status, status)
    text = f"This scan {what}; there is no report from it" + (f": {note}" if note else ".")
    write_output(out / "report.json", json.dumps(data, indent=1))
    write_output(out / "report.md", f"# Fusion analysis: {md_escape(source)}\n\n**{md_escape(text)}** "
                                    f"(run `{run_id}`, pid {os.getpid()})\n")
    write_output(out / "report.html", f"<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
                                      f"<title>Fusion analysis: {html.escape(source)}</title></head><body>"
                                      f"<h1>Fusion analysis: {html.escape(source)}</h1><p><b>{html.escape(text)}</b> "
                                      f"(run {run_id}, pid {os.getpid()})</p></body></html>\n")


def scan(source: str | Path | None, out_dir: str | Path, *, device: str | None = None, jobs: int | None = None,
         use_ray: bool = False, ray_address: str | None = None, stages: Iterable[str] | None = None,
         progress: bool = True, cache: bool = True, min_share: float = DEFAULT_MIN_SHARE,
         _task_fn: Callable[..., dict[str, Any]] = analyze_task) -> dict[str, Any]:
    """Scans ``source`` and writes the report into ``out_dir``; returns report.json's data.

    ``device`` None: each file's device model follows its stage
    (``assign_devices``); a name or JSON spec: that one for every file.
    ``min_share``: the report lists modules whose predicted time is at least
    this share of the slowest one's, and counts the rest (0: all).

    Raises ``NoModulesError`` when there is no module file to scan (the report
    files then say so), FileNotFoundError for a missing ``source``."""
    if device:
        devices.load(device)  # fail early on an unknown device (and measure the host once, here)
    out = make_dirs(out_dir)
    label = str(source or "bundled corpus")
    run_id = _new_run_id()
    _mark(out, run_id, "running", label)
    try:
        found = find(source, stages=stages)
        if not found.tasks:
            skipped = f"; {len(found.skipped)} skipped (see report.json)" if found.skipped else ""
            raise NoModulesError(f"no module files in {label} (HLO text .hlo/.txt, .hlo.pb, .mlir, optionally "
                                 f".gz; an XLA dump's side files do not count){skipped}")
        found.tasks = assign_devices(found.tasks, device)
        for name in sorted({t.device for t in found.tasks}):
            devices.load(name)  # the host is measured once, here, not in every worker
    except Exception as e:
        _mark(out, run_id, "failed", label, str(e).splitlines()[0] if str(e) else type(e).__name__)
        raise
    tasks = sorted(found.tasks, key=lambda t: -t.size)  # biggest first: better packing
    cache_dir = str(out / ".cache") if cache else None
    jobs = max(1, jobs or min(len(tasks), os.cpu_count() or 1))
    results: list[dict[str, Any]] = []
    t0 = time.perf_counter()

    bar = None
    if progress:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        bar = Progress(TextColumn("[bold]scan[/]"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                       TextColumn("{task.description}"), transient=False,
                       console=Console(stderr=True))  # stdout is for the result (--json)
        tid = bar.add_task("", total=len(tasks))

    def start_bar() -> None:
        """Once the workers are up: the bar's refresh is a thread, and while this
        process has one thread its workers are forked (``_start_method``)."""
        if bar is not None and not bar.live.is_started:
            bar.start()

    def on_done(r: dict[str, Any]) -> None:
        results.append(r)
        if bar is not None:
            bar.update(tid, advance=1, description=("error " if "error" in r else "") + r["label"][:60])

    try:
        todo = []  # what the cache does not hold: a scan the cache holds whole starts no worker
        for t in tasks:
            r = cached_result(t, device, cache_dir)
            if r is None:
                todo.append(t)
            else:
                on_done(r)
        if todo and use_ray:
            start_bar()
            _run_ray(todo, device, cache_dir, ray_address, jobs, on_done)
        elif todo:
            _run_pool(todo, device, cache_dir, jobs, on_done, _task_fn, on_started=start_bar)
        start_bar()  # a scan the cache held whole shows its bar too
    except BaseException as e:
        if bar is not None:
            bar.stop()
        status = "interrupted" if isinstance(e, KeyboardInterrupt) else "failed"
        _mark(out, run_id, status, label, f"{len(results)} of {len(tasks)} files analysed"
              + (f"; their results are cached in {out / '.cache'} for the next run" if cache else ""))
        raise
    if bar is not None:
        bar.stop()
    report = build_report(results, device=device, source=label, seconds=time.perf_counter() - t0, jobs=jobs,
                          engine="ray" if use_ray else "process-pool", found=found, run_id=run_id, min_share=min_share)
    write_output(out / "report.json", json.dumps(report, indent=1))
    write_output(out / "report.md", markdown(report))
    write_output(out / "report.html", html_page(report))
    return report


def build_report(results: list[dict[str, Any]], *, device: str | None, source: str, seconds: float, jobs: int,
                 engine: str, found: Found | None = None, run_id: str = "",
                 min_share: float = DEFAULT_MIN_SHARE) -> dict[str, Any]:
    """Merges per-module results: corpus-wide opportunity groups (most predicted
    time saved first) and pattern totals; modules slowest first.

    ``modules_scanned`` counts files analysed (a dump module has a file per
    stage); ``modules_found`` / ``modules_analysed`` count modules as
    ``hlo corpus list`` does (a dump's module ids, the corpus's entries; in a
    plain folder every file is a module)."""
    ok = sorted((r for r in results if "error" not in r), key=lambda r: (-r["time_s"], r["label"]))
    errors = sorted(({"file": r["path"], "label": r["label"], "error": r["error"]} for r in results if "error" in r),
                    key=lambda e: e["label"])
    groups: dict[tuple[str, str], dict[str, Any]] = {}
    patterns: dict[str, dict[str, Any]] = {}
    for r in ok:
        for g in r["opportunities"]["groups"]:
            a = groups.setdefault((g["kind"], g["signature"]), {"signature": g["signature"], "kind": g["kind"],
                                                                 "pattern": g["pattern"], "count": 0, "legal": 0,
                                                                 "bytes_saved": 0.0, "time_saved_s": 0.0,
                                                                 "modules": 0, "examples": []})
            a["pattern"] = a["pattern"] or g["pattern"]
            for k in ("count", "legal", "bytes_saved", "time_saved_s"):
                a[k] += g[k]
            a["modules"] += 1
            if len(a["examples"]) < 3:
                a["examples"].extend(f"{r['label']}:{x}" for x in g["examples"][:3 - len(a["examples"])])
        for name, p in r["opportunities"]["patterns"].items():
            a = patterns.setdefault(name, {"count": 0, "bytes_saved": 0.0, "time_saved_s": 0.0, "modules": 0})
            a["count"] += p["count"]
            a["bytes_saved"] += p["bytes_saved"]
            a["time_saved_s"] += p["time_saved_s"]
            a["modules"] += 1
    top = sorted(groups.values(), key=lambda g: (-g["time_saved_s"], -g["bytes_saved"], g["signature"]))
    tasks = found.tasks if found is not None else []
    used: dict[str, dict[str, int]] = {}  # device -> why -> files
    for r in ok:  # errors were analysed on no device
        name = r.get("device") or device or "h100"
        why = r.get("device_why") or ("--device" if device else "")
        used.setdefault(name, {})
        used[name][why] = used[name].get(why, 0) + 1
    return {
        "format": REPORT_FORMAT,
        "status": "complete",
        "run_id": run_id,
        "source": source,
        "kind": found.kind if found is not None else "",
        "device": ", ".join(sorted(used)) or (device or ""),
        "device_requested": device or "auto",
        "devices": [{**device_summary(name), "files": sum(whys.values()),
                     "why": [{"reason": w, "files": n} for w, n in sorted(whys.items(), key=lambda kv: (-kv[1], kv[0]))]}
                    for name, whys in sorted(used.items(), key=lambda kv: -sum(kv[1].values()))],
        "min_share": min_share,
        "engine": engine,
        "jobs": jobs,
        "seconds": seconds,
        "files": len(tasks) or len(results),
        "modules_found": len({t.module or t.label for t in tasks}) or len({r.get("module_key", r["label"]) for r in results}),
        "modules_analysed": len({r.get("module_key", r["label"]) for r in ok}),
        "modules_scanned": len(ok),
        "cached": sum(1 for r in ok if r.get("cached")),
        "errors": errors,
        "skipped": list(found.skipped) if found is not None else [],
        "patterns": patterns,
        "top_opportunities": top[:100],
        "modules": ok,
    }
