"""Wall time of a whole-corpus scan (every stage of every bundled module), cold
(no cache) and warm (all from the content-hash cache).

    JAX_PLATFORMS=cpu .venv/bin/python bench/scan_speed.py [--jobs 2] [--device h100]

Goal (issue 6): the cold scan finishes in under 2 minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from hlo_lab import scan  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--device", default="h100")
    ap.add_argument("--out", default=None, help="report folder (default: a temporary one)")
    args = ap.parse_args()
    out = Path(args.out or tempfile.mkdtemp(prefix="scan_speed_"))
    t0 = time.perf_counter()
    r = scan.scan(None, out, device=args.device, jobs=args.jobs, progress=False, cache=True)
    cold = time.perf_counter() - t0
    per = sorted(r["modules"], key=lambda m: -m["seconds"])
    cpu_s = sum(m["seconds"] for m in r["modules"])
    t0 = time.perf_counter()
    r2 = scan.scan(None, out, device=args.device, jobs=args.jobs, progress=False, cache=True)
    warm = time.perf_counter() - t0
    print(f"modules {r['modules_analysed']} ({r['modules_scanned']} files)  errors {len(r['errors'])}  "
          f"jobs {args.jobs}  (os.cpu_count {os.cpu_count()})")
    print(f"cold scan {cold:.1f} s (analysis {cpu_s:.1f} s summed over workers); goal < 120 s: "
          f"{'met' if cold < 120 else 'NOT met'}")
    print(f"warm scan {warm:.1f} s ({r2['cached']} of {r2['modules_scanned']} from cache)")
    print("slowest:", ", ".join(f"{m['label']} {m['seconds']:.1f}s" for m in per[:5]))
    print(f"report: {out}/report.html")
    return 0


if __name__ == "__main__":
    sys.exit(main())
