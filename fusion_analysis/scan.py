"""Corpus-wide analysis: every module of a folder, in parallel, resumable.

``scan(source, out_dir)`` finds the modules (the bundled corpus, a corpus root
with ``manifest.json``, an ``--xla_dump_to`` folder, or any folder of ``.hlo`` /
``.txt`` / ``.gz`` files), analyses each in a process pool (or on Ray), caches
each result under ``out_dir/.cache`` by the SHA-256 of the module text, and
writes ``report.json``, ``report.md`` and ``report.html``. A file that does not
parse is listed in the report's ``errors`` with its parse error; the rest is
scanned.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable

#: Bump when the analysis changes what it computes: old cache entries are ignored.
ANALYSIS_VERSION = 1
HLO_SUFFIXES = (".hlo", ".hlo.txt", ".txt", ".hlo.gz", ".txt.gz", ".gz")
SCATTER_POINTS_PER_MODULE = 150
GROUPS_PER_MODULE = 40


@dataclass(frozen=True)
class Task:
    """One module file to analyse; ``label`` names it in the report."""

    label: str
    path: str
    stage: str = ""
    size: int = 0


def read_text(path: str | Path) -> str:
    data = Path(path).read_bytes()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    return data.decode()


def discover(source: str | Path | None = None, *, stages: Iterable[str] | None = None) -> list[Task]:
    """The module files under ``source`` (None: the bundled corpus)."""
    import corpus

    wanted = set(stages) if stages else None
    root = None if source is None else Path(source)
    if root is None or (root / "manifest.json").is_file():
        tasks = []
        for e in corpus.load(root=root):
            for stage in e.stages:
                if wanted is None or stage in wanted:
                    p = e.path(stage)
                    tasks.append(Task(f"{e.name}/{stage}", str(p), stage, p.stat().st_size))
        return tasks
    if not root.exists():
        raise FileNotFoundError(f"no such folder or file: {root}")
    if root.is_file():
        return [Task(root.name, str(root), "", root.stat().st_size)]
    dump_files = list(root.glob("module_*.txt"))
    if dump_files:
        tasks = []
        for m in corpus.from_dump_dir(root):
            for stage, p in sorted(m.stages.items()):
                if "optimizations" not in stage or stage == "after_optimizations":
                    continue
                if wanted is None or stage in wanted:
                    tasks.append(Task(f"{m.name}/{stage}", str(p), stage, Path(p).stat().st_size))
        if tasks:
            return tasks
    tasks = []
    for p in sorted(root.rglob("*")):
        if p.is_file() and p.name.endswith(HLO_SUFFIXES) and not any(part.startswith(".") for part in p.relative_to(root).parts):
            tasks.append(Task(str(p.relative_to(root)), str(p), "", p.stat().st_size))
    return tasks


def _round(x: float) -> float:
    return float(f"{x:.6g}")


def analyze_text(text: str, *, label: str, device: str, source: str = "<string>") -> dict[str, Any]:
    """Everything the report needs about one module, as plain JSON data."""
    from hlo_tools import parse

    from . import cost, devices, opportunities, roofline

    t0 = time.perf_counter()
    module = parse(text, source=source)
    dev = devices.load(device)
    mc = cost.analyze(module)
    rf = roofline.roofline(module, dev, mc)
    opps = opportunities.find(module, dev, mc)
    groups = opportunities.group(opps)
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
        "bounds": rf.bound_counts(),
        "categories": {c: {"kernels": s.kernels, "time_s": s.time_s, "headroom_s": s.headroom_s,
                           "bytes_accessed": s.bytes_accessed, "flops": s.flops}
                       for c, s in rf.by_category().items()},
        "top_kernels": [{"name": k.name, "category": k.category, "bound": k.bound, "time_s": k.time_s,
                         "flops": k.flops, "bytes_accessed": k.bytes_accessed} for k in kernels[:10]],
        "points": [[_round(k.intensity if k.bytes_accessed else 0.0), _round((k.flops + k.transcendentals) / k.time_s),
                    k.category, k.bound] for k in kernels[:SCATTER_POINTS_PER_MODULE] if k.time_s > 0],
        "opportunities": {
            "count": len(opps),
            "legal": sum(1 for o in opps if o.legal),
            "bytes_saved_legal": sum(o.bytes_saved for o in opps if o.legal),
            "time_saved_s_legal": sum(max(o.time_saved_s, 0.0) for o in opps if o.legal),
            "patterns": patterns,
            "groups": [{"signature": g.signature, "kind": g.kind, "pattern": g.pattern, "count": g.count,
                        "legal": g.legal_count, "bytes_saved": g.bytes_saved, "time_saved_s": g.time_saved_s,
                        "examples": list(g.examples)} for g in groups[:GROUPS_PER_MODULE]],
        },
        "seconds": time.perf_counter() - t0,
    }


def analyze_task(task: Task, device: str, cache_dir: str | None) -> dict[str, Any]:
    """Runs in a worker: reads, hashes, uses the cache or analyses. Never raises
    for a bad module: the error goes into the result."""
    base = {"label": task.label, "path": task.path, "stage": task.stage}
    try:
        text = read_text(task.path)
    except (OSError, UnicodeDecodeError, EOFError, gzip.BadGzipFile) as e:
        return {**base, "error": f"{type(e).__name__}: {e}"}
    digest = hashlib.sha256(text.encode()).hexdigest()
    key = hashlib.sha256(f"{digest}:{device}:{ANALYSIS_VERSION}".encode()).hexdigest()[:32]
    cache = Path(cache_dir) / f"{key}.json" if cache_dir else None
    if cache is not None and cache.is_file():
        try:
            out = json.loads(cache.read_text())
            out.update(base, cached=True)
            return out
        except json.JSONDecodeError:
            pass
    try:
        out = {**analyze_text(text, label=task.label, device=device, source=task.path), **base, "sha256": digest}
    except Exception as e:  # noqa: BLE001 - reported per file, the scan goes on
        from hlo_tools.errors import HloParseError

        msg = e.format() if isinstance(e, HloParseError) and hasattr(e, "format") else f"{type(e).__name__}: {e}"
        return {**base, "sha256": digest, "error": msg}
    if cache is not None:
        cache.parent.mkdir(parents=True, exist_ok=True)
        tmp = cache.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(out))
        os.replace(tmp, cache)
    out["cached"] = False
    return out


def _run_pool(tasks: list[Task], device: str, cache_dir: str | None, jobs: int, on_done: Callable) -> None:
    if jobs <= 1:
        for t in tasks:
            on_done(analyze_task(t, device, cache_dir))
        return
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        futures = [pool.submit(analyze_task, t, device, cache_dir) for t in tasks]
        for f in as_completed(futures):
            on_done(f.result())


def _run_ray(tasks: list[Task], device: str, cache_dir: str | None, address: str | None, jobs: int,
             on_done: Callable) -> None:
    """Runs the tasks as Ray tasks; a local cluster started here gets ``jobs`` CPUs and is shut down after."""
    try:
        import ray
    except ImportError as e:
        raise RuntimeError("--ray needs the `ray` package: pip install 'hlo-pass-lab[ray]'") from e
    started = not ray.is_initialized()
    if started:
        local = {} if address else {"num_cpus": jobs, "include_dashboard": False}
        ray.init(address=address, ignore_reinit_error=True, log_to_driver=False, **local)
    try:
        remote = ray.remote(analyze_task)
        pending = [remote.remote(t, device, cache_dir) for t in tasks]
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            for ref in done:
                on_done(ray.get(ref))
    finally:
        if started:
            ray.shutdown()


def scan(source: str | Path | None, out_dir: str | Path, *, device: str = "h100", jobs: int | None = None,
         use_ray: bool = False, ray_address: str | None = None, stages: Iterable[str] | None = None,
         progress: bool = True, cache: bool = True) -> dict[str, Any]:
    """Scans ``source`` and writes the report into ``out_dir``; returns report.json's data."""
    from . import devices
    from .report import write_reports

    devices.load(device)  # fail early on an unknown device (and measure the host once, here)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tasks = sorted(discover(source, stages=stages), key=lambda t: -t.size)  # biggest first: better packing
    cache_dir = str(out / ".cache") if cache else None
    jobs = jobs or min(len(tasks) or 1, os.cpu_count() or 1)
    results: list[dict[str, Any]] = []
    t0 = time.perf_counter()

    bar = None
    if progress:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        bar = Progress(TextColumn("[bold]scan[/]"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                       TextColumn("{task.description}"), transient=False)
        bar.start()
        tid = bar.add_task("", total=len(tasks))

    def on_done(r: dict[str, Any]) -> None:
        results.append(r)
        if bar is not None:
            bar.update(tid, advance=1, description=("error " if "error" in r else "") + r["label"][:60])

    try:
        if use_ray:
            _run_ray(tasks, device, cache_dir, ray_address, jobs, on_done)
        else:
            _run_pool(tasks, device, cache_dir, jobs, on_done)
    finally:
        if bar is not None:
            bar.stop()
    report = build_report(results, device=device, source=str(source or "bundled corpus"),
                          seconds=time.perf_counter() - t0, jobs=jobs, engine="ray" if use_ray else "process-pool")
    write_reports(report, out)
    return report


def build_report(results: list[dict[str, Any]], *, device: str, source: str, seconds: float, jobs: int,
                 engine: str) -> dict[str, Any]:
    """Merges per-module results: corpus-wide opportunity groups and pattern totals."""
    ok = sorted((r for r in results if "error" not in r), key=lambda r: r["label"])
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
    top = sorted(groups.values(), key=lambda g: -g["bytes_saved"])
    return {
        "format": "fusion_analysis.scan/1",
        "source": source,
        "device": device,
        "engine": engine,
        "jobs": jobs,
        "seconds": seconds,
        "modules_scanned": len(ok),
        "cached": sum(1 for r in ok if r.get("cached")),
        "errors": errors,
        "patterns": patterns,
        "top_opportunities": top[:100],
        "modules": ok,
    }
