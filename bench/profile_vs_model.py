"""Measured time per instruction against the host roofline, on every runnable
corpus module: each is compiled by stock XLA:CPU and run under XLA's profiler
(``xla_bridge.trace.profile_module``), and its events joined to its optimized
module (``hlo_analysis.profiles.join``).

    JAX_PLATFORMS=cpu .venv/bin/python bench/profile_vs_model.py [--reps 10] [--only llama3]

Per module: the share of measured time that joined to an instruction, measured
and predicted time per run, and Spearman's rho of measured against predicted
per kernel. The last line is ``joined_share=<the lowest module's share>
rho_measured_vs_model=<rho over every kernel of every module>``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import corpus  # noqa: E402
from hlo_analysis import devices, profiles  # noqa: E402
from hlo_analysis.rank_stats import spearman  # noqa: E402
from hlo_analysis.units import fmt_seconds  # noqa: E402
from hlo_tools.parser import parse  # noqa: E402
from xla_bridge.trace import profile_module  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=10, help="traced runs per module")
    ap.add_argument("--only", default=None, help="modules whose name contains this")
    args = ap.parse_args()
    host = devices.host()
    shares, rhos, measured, predicted = [], [], [], []
    print(f"{'module':32} {'joined':>8} {'measured':>10} {'predicted':>10} {'kernels':>7} {'rho':>6} {'s':>5}")
    for e in sorted(corpus.load(), key=lambda e: e.name):
        if not e.runnable or (args.only and args.only not in e.name):
            continue
        t0 = time.perf_counter()
        text, events = profile_module(e.text("before_optimizations"), reps=args.reps, name=e.name)
        j = profiles.join(parse(text), events, host)
        pairs = [(k.measured_s, k.predicted_s) for k in j.kernels if k.predicted_s and k.measured_s > 0]
        measured += [a for a, _ in pairs]
        predicted += [b for _, b in pairs]
        rho = j.rank_correlation()
        shares.append(j.joined_share)
        rhos.append(rho)
        print(f"{e.name:32} {100 * j.joined_share:7.2f}% {fmt_seconds(j.device_s):>10} {fmt_seconds(j.predicted_s):>10} "
              f"{len(pairs):7d} {rho:6.3f} {time.perf_counter() - t0:5.1f}")
    if not shares:
        print("no runnable corpus module matched", file=sys.stderr)
        return 1
    print(f"{len(shares)} modules, {len(measured)} kernels; median per-module rho {statistics.median(rhos):.3f}")
    print(f"joined_share={min(shares):.4f} rho_measured_vs_model={spearman(measured, predicted):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
