"""Layout passes vs stock XLA:CPU on the corpus (not a test: it prints a table).

Per module:
* before_optimizations + ``transpose-folding``: layout-only bytes (read + write of
  transposes/copies that only permute data) before/after; the rewrite verifies and
  XLA's parser takes it.  Runnable modules: stock XLA on the rewrite vs stock on the
  original (outputs, runtime ratio; > 1 means the rewrite is faster).
* ``layout-normalization`` at the pre-scheduler hook (after XLA's layout
  assignment, where what we write is kept): layout-only bytes in the module XLA
  hands the hook, before/after, and the runtime ratio of XLA running it vs stock.

Full-size modules are analysed and parsed only (compiling them takes minutes
here); ``--full`` compiles them too (nothing runs: they are not runnable).

    JAX_PLATFORMS=cpu .venv/bin/python bench/layout_vs_stock.py [--reps 30] [--full]
"""

from __future__ import annotations

import argparse
import os
import sys

os.environ.setdefault("JAX_PLATFORMS", "cpu")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import corpus  # noqa: E402
from hlo_tools import parse, verify  # noqa: E402
from xla_bridge import jax_internals  # noqa: E402
from xla_bridge.hook_stage import HookStage  # noqa: E402
from xla_bridge.measure import STOCK, Measurement  # noqa: E402
from passes.layout import LayoutNormalization, TransposeFolding, layout_analysis  # noqa: E402


def kb(b: int) -> str:
    return f"{b / 1024:,.1f}"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--full", action="store_true")
    ap.add_argument("--only", default="*")
    args = ap.parse_args()
    header = ["module", "B/O layout KiB", "after fold KiB", "fold verdict", "fold stock/rewrite",
              "pre-sched layout KiB", "after norm KiB", "norm verdict", "stock/hooked"]
    rows = []
    for e in corpus.load(args.only):
        text = e.text("before_optimizations")
        m = parse(text)
        b0 = layout_analysis(m).bytes_moved
        TransposeFolding().run(m)
        verify(m)
        jax_internals.proto_from_text(m.to_text())
        b1 = layout_analysis(m).bytes_moved
        row = [e.name, kb(b0), kb(b1), "-", "-", "-", "-", "-", "-"]
        if e.size == "tiny" or args.full:
            orig = parse(text)
            measurement = Measurement("cpu")
            stock = measurement.compile(orig)
            folded = measurement.compile(m)
            seen = {}

            def normalize(module, seen=seen):
                seen["before"] = layout_analysis(module).bytes_moved
                changed = LayoutNormalization().run(module)
                verify(module)
                seen["after"] = layout_analysis(module).bytes_moved
                return changed

            hooked = measurement.compile(orig, STOCK.hooked(normalize, HookStage.PRE_SCHEDULER))
            row[5], row[6] = kb(seen["before"]), kb(seen["after"])
            if e.runnable:
                r1 = measurement.benchmark(stock, folded, reps=args.reps, warmup=3)
                r2 = measurement.benchmark(stock, hooked, reps=args.reps, warmup=3)
                row[3], row[4] = r1.verdict, f"{r1.speedup:.3f} [{r1.speedup_p10:.2f}..{r1.speedup_p90:.2f}]"
                row[7], row[8] = r2.verdict, f"{r2.speedup:.3f} [{r2.speedup_p10:.2f}..{r2.speedup_p90:.2f}]"
        rows.append(row)
        print("  ".join(row), flush=True, file=sys.stderr)
    rows = [header] + rows
    w = [max(len(r[i]) for r in rows) for i in range(len(header))]
    print("\n".join("  ".join(c.rjust(w[i]) if i else c.ljust(w[i]) for i, c in enumerate(r)) for r in rows))


if __name__ == "__main__":
    main()
