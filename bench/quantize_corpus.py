"""fp8 (or int8) on the corpus: every chosen dot rewritten (``passes.quantize``), each
side compiled by XLA:GPU for a deviceless H100, and what XLA made of the dots and
what the cost model predicts (``hlo_lab.quantize``).

    JAX_PLATFORMS=cpu .venv/bin/python bench/quantize_corpus.py [--size full] [--dtype fp8] [--error]
        [--granularity channel] [--scales parameter] [--weights parameter] [--gradients e5m2]

Per module: dots rewritten, those that are GEMMs at stock, the share of their flops
that run in an 8-bit GEMM, the predicted GEMM-only and whole-module speedups (the
quantize ops included in the latter), and with ``--error`` the share of output
elements within 1e-2 on XLA:CPU (the whole module where it fits in memory, else
its distinct dots extracted: ``hlo_lab.quantize``). The last line is ``fp8_lowered_share=<over all
modules' GEMM flops> predicted_speedup_geomean=<GEMM-only, geometric mean>``.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import corpus  # noqa: E402
from hlo_lab.quantize import quantize  # noqa: E402
from hlo_tools.parser import parse  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", default="full", help="corpus module size: full or tiny")
    ap.add_argument("--dtype", default="fp8")
    ap.add_argument("--target", default="h100")
    ap.add_argument("--only", default=None, help="modules whose name contains this")
    ap.add_argument("--error", action="store_true", help="also run both sides on XLA:CPU")
    ap.add_argument("--granularity", default="")
    ap.add_argument("--scales", default="amax")
    ap.add_argument("--weights", default="module")
    ap.add_argument("--gradients", default="e4m3")
    args = ap.parse_args()
    eight = total = 0.0
    speedups = []
    print(f"{'module':34} {'dots':>5} {'gemms':>5} {'8-bit':>7} {'GEMM x':>7} {'module x':>8} {'in tol':>7} {'s':>5}")
    for e in sorted(corpus.load(), key=lambda e: e.name):
        if e.size != args.size or e.sharded or (args.only and args.only not in e.name):
            continue
        t0 = time.perf_counter()
        _, r = quantize(parse(e.text("before_optimizations")), form=args.dtype, target=args.target,
                        granularity=args.granularity, scales=args.scales, weights=args.weights, gradients=args.gradients,
                        error="auto" if args.error else "none")
        flops = sum(d["flops"] for d in r.gemm_dots)
        eight += r.lowered_share * flops
        total += flops
        s = r.speed
        if s.get("gemm_speedup"):
            speedups.append(s["gemm_speedup"])
        tol = f"{100 * r.error['within_tolerance']:6.2f}%" if r.error else "      -"
        print(f"{e.name:34} {len(r.dots):5d} {len(r.gemm_dots):5d} {100 * r.lowered_share:6.1f}% "
              f"{s.get('gemm_speedup', 0):7.2f} {s.get('module_speedup', 0):8.2f} {tol} {time.perf_counter() - t0:5.0f}")
        for d in r.fallbacks:
            print(f"   falls back: {d['dot']} -> {d['gemm'] or 'no GEMM found'} {'/'.join(d['types'])}")
    if not total:
        print("no module matched", file=sys.stderr)
        return 1
    geo = math.exp(sum(math.log(x) for x in speedups) / len(speedups)) if speedups else 0.0
    print(f"{args.dtype}_lowered_share={eight / total:.4f} predicted_speedup_geomean={geo:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
