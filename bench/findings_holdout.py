"""Rules from ``hlo tune``'s wins on some model families, validated on the families
held out, measured on XLA:CPU against stock in one run (``hlo_lab.findings``).

    JAX_PLATFORMS=cpu .venv/bin/python bench/findings_holdout.py [--held-out gemma2,mixtral] [--budget 12]

Tunes the training families' tiny corpus modules (a search run before with the
same options is read back from the results database), derives the rules, times
each rule and BEST against stock on every held-out module, then every rule that
held, together. Prints the table of findings.md; the last lines are ``rules=``
(rules derived) and ``held_out_geomean=`` (the rules that held, together, against
stock, geomean over the held-out modules; ``best_geomean=`` above it is BEST's).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from hlo_lab import findings as F  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--held-out", default=",".join(F.DEFAULT_HELD_OUT))
    ap.add_argument("--only", default="*-tiny-*")
    ap.add_argument("--budget", type=int, default=12)
    ap.add_argument("--reps", type=int, default=100)
    ap.add_argument("--final-reps", type=int, default=200)
    ap.add_argument("--min-support", type=int, default=2)
    ap.add_argument("--db", help="results database (default: the user's)")
    ap.add_argument("-o", "--output", help="keep findings.json/.md here (default: a temporary folder)")
    ap.add_argument("--upstream", action="store_true", help="also an hlo upstream bundle per rule that held, in -o")
    args = ap.parse_args()
    t0 = time.time()
    train, held = F.split(F.corpus_modules(args.only), args.held_out.split(","))
    result = F.find(train, held, budget=args.budget, reps=args.reps, final_reps=args.final_reps, db=args.db,
                    min_support=args.min_support, progress=lambda m: print(f"  {m}", file=sys.stderr, flush=True))
    out = Path(args.output or tempfile.mkdtemp(prefix="findings_holdout_"))
    path = F.write(result, out)
    if args.upstream:
        bundles = F.bundle_rules(result, path, held, out, progress=lambda m: print(f"  {m}", file=sys.stderr))
        for name, b in bundles.items():
            print(f"upstream bundle {name}: {b.get('folder') or b.get('error')}", file=sys.stderr)
    print((out / "findings.md").read_text())
    c = result.combined
    held_rules = [v.rule.name for v in result.validations if v.held_out]
    print(f"{len(train)} training modules, {len(held)} held-out, {(time.time() - t0) / 60:.1f} minutes; "
          f"rules that held out: {len(held_rules)} of {len(result.derived)} ({', '.join(held_rules) or 'none'})")
    print(f"best_geomean={c['best_geomean']:.3f}" if c["best_geomean"] else "best_geomean=nan")
    print(f"rules={len(result.derived)}")
    print(f"held_out_geomean={c['held_out_geomean']:.3f}" if c["held_out_geomean"] else "held_out_geomean=nan")
    return 0


if __name__ == "__main__":
    sys.exit(main())
