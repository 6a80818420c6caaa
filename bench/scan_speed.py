"""Wall time of ``hlo scan`` on a folder of 30 modules, against the same scan by
the code of an earlier revision, in one run; and where the time goes.

    JAX_PLATFORMS=cpu .venv/bin/python bench/scan_speed.py [--before REV] [--modules 30] [--jobs 2]
    JAX_PLATFORMS=cpu .venv/bin/python bench/scan_speed.py --corpus   # every stage, cold then warm

The folder holds the ``cpu_after_optimizations`` stage of the first ``--modules``
bundled modules (tiny and full, sharded ones included). Each side runs ``hlo scan
--no-cache`` in a fresh process (``--reps`` times, interleaved: before, after,
before, ...; medians), the earlier revision from a git worktree of it. Then the
current code analyses each module in this process with a timer per phase (read and
parse, cost, roofline, opportunities, collectives). The last line is
``scan_speedup_vs_before=<before's median wall time / the current one's>``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import corpus  # noqa: E402
from hlo_lab import scan  # noqa: E402
from hlo_tools.collector import collector_paused  # noqa: E402

#: The revision before this wave's scan work (issue 32 item 5 measured against it).
BEFORE = "ab93947"


def _folder(dest: Path, n: int) -> list[Path]:
    dest.mkdir(parents=True, exist_ok=True)
    out = []
    for e in sorted(corpus.load(), key=lambda e: e.name)[:n]:
        p = dest / f"{e.name}.cpu_after_optimizations.hlo.gz"
        shutil.copyfile(e.path("cpu_after_optimizations"), p)
        out.append(p)
    return out


def _scan_seconds(code: Path, folder: Path, jobs: int) -> float:
    out = Path(tempfile.mkdtemp(prefix="scan_speed_out_"))
    env = dict(os.environ, PYTHONPATH=str(code), JAX_PLATFORMS="cpu")
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "hlo_lab.cli", "scan", str(folder), "-o", str(out), "--no-cache", "-q",
                        "--jobs", str(jobs)], cwd=code, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - t0
    shutil.rmtree(out, ignore_errors=True)
    if r.returncode != 0:
        raise SystemExit(f"hlo scan ({code}) exited {r.returncode}: {r.stderr[-2000:]}")
    return seconds


def _phases(folder: Path) -> dict[str, float]:
    """Seconds per phase of the current code's analysis, summed over the folder's
    files, each on the device model the scan gives it (the host for XLA:CPU stages)."""
    from hlo_analysis import cost, devices, opportunities, roofline
    from xla_bridge import load

    t = dict.fromkeys(("read and parse", "cost", "roofline", "opportunities", "collectives", "freeing the module"), 0.0)
    for task in scan.assign_devices(scan.discover(folder), None):
        f, dev = task.path, devices.load(task.device)
        with collector_paused(collect_after=True):  # as the scan's worker does
            t0 = time.perf_counter()
            m = load(f)
            t1 = time.perf_counter()
            mc = cost.analyze(m)
            t2 = time.perf_counter()
            roofline.roofline(m, dev, mc)
            t3 = time.perf_counter()
            opportunities.find(m, dev, mc)
            t4 = time.perf_counter()
            scan.communication_summary(m, dev)
            t5 = time.perf_counter()
            m.release()  # as the scan's worker does
            del m, mc
        t6 = time.perf_counter()
        for key, dt in zip(t, (t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4, t6 - t5)):
            t[key] += dt
    return t


def _corpus(jobs: int, device: str) -> None:
    out = Path(tempfile.mkdtemp(prefix="scan_speed_"))
    t0 = time.perf_counter()
    r = scan.scan(None, out, device=device, jobs=jobs, progress=False, cache=True)
    cold = time.perf_counter() - t0
    t0 = time.perf_counter()
    r2 = scan.scan(None, out, device=device, jobs=jobs, progress=False, cache=True)
    warm = time.perf_counter() - t0
    print(f"modules {r['modules_analysed']} ({r['modules_scanned']} files)  errors {len(r['errors'])}  jobs {jobs}")
    print(f"cold scan {cold:.1f} s; warm scan {warm:.1f} s ({r2['cached']} of {r2['modules_scanned']} from cache)")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--before", default=BEFORE, help=f"the revision to compare with (default {BEFORE})")
    ap.add_argument("--modules", type=int, default=30)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--reps", type=int, default=1, help="scans per side, interleaved (medians)")
    ap.add_argument("--corpus", action="store_true", help="the whole bundled corpus, cold then warm, instead")
    ap.add_argument("--device", default="h100")
    args = ap.parse_args()
    if args.corpus:
        _corpus(args.jobs, args.device)
        return 0
    work = Path(tempfile.mkdtemp(prefix="scan_speed_"))
    files = _folder(work / "modules", args.modules)
    tree = work / "before"
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "-f", "-q", str(tree), args.before], check=True)
    try:
        before, after = [], []
        for _ in range(args.reps):
            before.append(_scan_seconds(tree, work / "modules", args.jobs))
            after.append(_scan_seconds(ROOT, work / "modules", args.jobs))
    finally:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)], check=False)
    phases = _phases(work / "modules")
    b, a = statistics.median(before), statistics.median(after)
    print(f"{len(files)} modules ({sum(f.stat().st_size for f in files) / 1e6:.1f} MB gzip'd), --jobs {args.jobs}, "
          f"{args.reps} scan(s) per side")
    print(f"hlo scan --no-cache: before ({args.before}) {b:.1f} s, now {a:.1f} s")
    total = sum(phases.values())
    print("where the time goes now (one process, summed over the modules): "
          + ", ".join(f"{k} {v:.1f} s ({v / total:.0%})" for k, v in phases.items()))
    print(f"scan_speedup_vs_before={b / a:.2f}")
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
