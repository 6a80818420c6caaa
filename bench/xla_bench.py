"""Runtime vs stock: harness overhead, then stock vs as-written on a module, twice
(repeatability: each run's median inside the other's p10..p90).  Prints ratios;
asserts nothing.

    .venv/bin/python bench/xla_bench.py [--backend cpu|gpu] [--module NAME|FILE] [--reps N]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import corpus  # noqa: E402
from hlo_tools import load, parse  # noqa: E402
from xla_bridge.bench import benchmark, harness_overhead  # noqa: E402
from xla_bridge.examples import FUSION_KLOOP, UNFUSED  # noqa: E402


def pick_module(name: str | None):
    if name and Path(name).exists():
        return load(name), None
    try:
        entries = [e for e in corpus.load(name or "llama3-tiny-decode-f32")]
        if entries:
            return entries[0].module("before_optimizations"), entries[0].name
    except FileNotFoundError:  # no corpus manifest
        pass
    return parse(UNFUSED), "examples.UNFUSED"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--backend", default="cpu")
    ap.add_argument("--module")
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=5)
    args = ap.parse_args()

    o = harness_overhead(reps=2000, backend=args.backend)
    print(f"harness: trivial module measured at {o['trivial_median_us']:.1f} us median "
          f"(p10 {o['trivial_p10_us']:.1f}, p90 {o['trivial_p90_us']:.1f}); clock pair {o['clock_pair_us'] * 1e3:.0f} ns")

    print("\nhand-written: unfused (stock) vs fusion_kloop (as-written)")
    print(benchmark(parse(UNFUSED), parse(FUSION_KLOOP), backend=args.backend, reps=args.reps, warmup=args.warmup).table())

    module, label = pick_module(args.module)
    print(f"\n{label or module.name}: stock vs as-written (same module), two runs")
    runs = [benchmark(module, module, backend=args.backend, reps=args.reps, warmup=args.warmup) for _ in range(2)]
    for r in runs:
        print(r.table())
    (r1, r2) = runs
    for side in ("a", "b"):
        t1, t2 = getattr(r1, side), getattr(r2, side)
        ok = t2.p10_us <= t1.median_us <= t2.p90_us and t1.p10_us <= t2.median_us <= t1.p90_us
        print(f"repeatable {side.upper()}: medians {t1.median_us:.1f} / {t2.median_us:.1f} us -> "
              f"{'within' if ok else 'OUTSIDE'} each other's p10..p90")
    return 0


if __name__ == "__main__":
    sys.exit(main())
