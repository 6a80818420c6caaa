"""Rewrites per second of the same portable patterns (``passes.portable``) on the
same modules: our driver on our HLO IR against MLIR's walk driver on StableHLO
(``xla_bridge.mlir_rewrite``), in one run.

    JAX_PLATFORMS=cpu .venv/bin/python bench/stablehlo_rewrite_speed.py [--size tiny|full] [--reps 5]

Each module is the corpus module's ``before_optimizations`` stage and its StableHLO
(XLA's translation). Timed: the driver alone (a fresh copy of the module per
repetition, made outside the timer; best of ``--reps``). Both levels must make the
same number of rewrites, or the bench stops. The last line is
``rewrite_speed_ratio_hlo_vs_mlir=<ours' rewrites/s / MLIR's>``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import corpus  # noqa: E402
from hlo_tools import parse  # noqa: E402
from passes.portable import BroadcastOfReshape, ConvertAfterTranspose, FoldReshapePair, apply_patterns  # noqa: E402
from xla_bridge.mlir_rewrite import StableHloModule, apply_patterns as mlir_apply_patterns  # noqa: E402
from xla_bridge.stablehlo import from_module  # noqa: E402

PATTERNS = (BroadcastOfReshape(), FoldReshapePair(), ConvertAfterTranspose())


def _best(make, run, reps: int) -> tuple[float, int]:
    best, count = float("inf"), -1
    for _ in range(reps):
        module = make()
        t0 = time.perf_counter()
        count = run(module)
        best = min(best, time.perf_counter() - t0)
    return best, count


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", default="tiny")
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()
    total = {"hlo": 0.0, "mlir": 0.0}
    rewrites = 0
    print(f"{'module':30} {'ops':>6} {'rewrites':>8} {'ours ms':>8} {'MLIR ms':>8}")
    for e in sorted(corpus.load(), key=lambda e: e.name):
        if e.size != args.size or e.sharded:
            continue
        hlo = parse(e.text("before_optimizations"))
        text = from_module(hlo, debug_info=False)
        t_hlo, n_hlo = _best(hlo.clone, lambda m: apply_patterns(m, PATTERNS), args.reps)
        t_mlir, n_mlir = _best(lambda: StableHloModule(text), lambda m: mlir_apply_patterns(m, PATTERNS), args.reps)
        if n_hlo != n_mlir:
            print(f"{e.name}: {n_hlo} rewrites on HLO, {n_mlir} on StableHLO", file=sys.stderr)
            return 1
        total["hlo"] += t_hlo
        total["mlir"] += t_mlir
        rewrites += n_hlo
        print(f"{e.name:30} {hlo.instruction_count:6d} {n_hlo:8d} {1e3 * t_hlo:8.2f} {1e3 * t_mlir:8.2f}")
    ours, mlir = rewrites / total["hlo"], rewrites / total["mlir"]
    print(f"{rewrites} rewrites: ours {ours:,.0f}/s on HLO, MLIR's walk driver {mlir:,.0f}/s on StableHLO "
          f"(each walk visits every op; the time is per module, divided by the rewrites it made)")
    print(f"rewrite_speed_ratio_hlo_vs_mlir={ours / mlir:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
