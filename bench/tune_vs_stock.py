"""``hlo tune`` on every runnable corpus module, XLA:CPU, one budget for all.

Per module: the tuned module's measured speedup over stock XLA (median of paired
ABBA ratios, with p10-p90), next to BEST's (the search's start point) and random
search's best at the same budget, all three measured again at the end with
``--final-reps``; the outputs of the tuned module against stock's; the search's
cost (candidates, compiles, seconds); and Kendall's tau between the cost model's
ranking of the candidates and their measured speedups.  Last lines: the geomeans
and ``geomean_tuned_vs_stock=...``.

Every candidate is a row in the results database (``--db``; default the user's),
so a killed run, started again with the same options, replays what it measured
without compiling it and goes on.

    JAX_PLATFORMS=cpu .venv/bin/python bench/tune_vs_stock.py [--budget 60] [--only 'llama3-*'] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from fusion_vs_stock import _geomean, corpus_modules  # noqa: E402  (the one list of runnable modules)

from hlo_lab.tune.search import Tuner  # noqa: E402
from hlo_tools.errors import HloError  # noqa: E402
from hlo_tools.fileio import write_output  # noqa: E402


def _f(x, spec: str = ".3f") -> str:
    return format(x, spec) if isinstance(x, (int, float)) and x is not None and not math.isnan(x) else "-"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--budget", type=int, default=60, help="candidates per search (tuned and random alike)")
    ap.add_argument("--only", help="glob over corpus module names")
    ap.add_argument("--strategy", default="hill", choices=["hill", "anneal"])
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--reps", type=int, default=100)
    ap.add_argument("--final-reps", type=int, default=400)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--db", help="results database (default the user's)")
    ap.add_argument("--json", metavar="OUT", help="also write every module's tune result here")
    args = ap.parse_args(argv)

    modules = corpus_modules(args.only)
    if not modules:
        print("no runnable corpus module matches", file=sys.stderr)
        return 1
    rows, results, errors = [], [], []
    t0 = time.perf_counter()
    for k, (name, text) in enumerate(modules, 1):
        print(f"[{k}/{len(modules)}] {name} ...", file=sys.stderr, flush=True)
        try:
            r = Tuner(name, text, budget=args.budget, strategy=args.strategy, seed=args.seed, workers=args.workers,
                      db=args.db, reps=args.reps, final_reps=args.final_reps).run().as_dict()
        except (HloError, OSError) as e:  # XLA refused or aborted on stock itself: a row, and the others go on
            print(f"    error: {e}", file=sys.stderr, flush=True)
            errors.append((name, str(e).splitlines()[0] if str(e).strip() else type(e).__name__))
            continue
        results.append(r)
        rows.append(r)
        print(f"    tuned {_f(r['speedup'])} [{_f(r['speedup_p10'])}-{_f(r['speedup_p90'])}]  BEST "
              f"{_f(r['best_pass_speedup'])}  random {_f(r['random_best_speedup'])}  outputs {r['outputs']}  "
              f"{r['compiles']}+{r['random_compiles']} compiles, {r['seconds']} s", file=sys.stderr, flush=True)

    head = ("module", "stock ms", "tuned", "p10-p90", "BEST", "random", "outputs", "cand.", "compiles", "search s",
            "tau", "winner")
    table = [head]
    for r in rows:
        d = r["best_decisions"] or {}
        table.append((r["module"], _f(r["stock_ms"]), _f(r["speedup"]), f"{_f(r['speedup_p10'])}-{_f(r['speedup_p90'])}",
                      _f(r["best_pass_speedup"]), _f(r["random_best_speedup"]), str(r["outputs"]),
                      str(r["candidates"]), f"{r['compiles']}+{r['random_compiles']}", _f(r["search_seconds"], ".0f"),
                      _f(r["kendall_tau_model_vs_measured"], ".2f"),
                      f"{d.get('pipeline', '-')}, {len(d.get('edges', ()))} edges"))
    widths = [max(len(row[i]) for row in table) for i in range(len(head))]
    for row in table:
        print("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths))))
    for name, message in errors:
        print(f"{name}: error: {message}")
    tuned = _geomean([r["speedup"] for r in rows if r["speedup"]])
    best = _geomean([r["best_pass_speedup"] for r in rows if r["best_pass_speedup"]])
    rnd = _geomean([r["random_best_speedup"] for r in rows if r["random_best_speedup"]])
    taus = sorted(r["kendall_tau_model_vs_measured"] for r in rows if r["kendall_tau_model_vs_measured"] is not None)
    equal = sum(r["outputs"] in ("exact", "close") for r in rows)
    print(f"modules={len(rows)} errors={len(errors)} budget={args.budget} strategy={args.strategy} outputs_equal={equal}/{len(rows)} "
          f"minutes={(time.perf_counter() - t0) / 60:.1f}")
    print(f"median_kendall_tau_model_vs_measured={_f(taus[len(taus) // 2] if taus else float('nan'), '.2f')}")
    print(f"geomean_best_vs_stock={_f(best)}")
    print(f"geomean_random_vs_stock={_f(rnd)}")
    print(f"geomean_tuned_vs_stock={_f(tuned)}")
    if args.json:
        write_output(args.json, json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
