"""A long seeded fuzz campaign over the parser and the verifier (issue 23).

    python bench/fuzz_campaign.py [--cases 10000] [--seed 1] [--jobs 2] [--timeout 30] [--mem-mb 3072]
                                  [--max-seed-kb 400] [--strategy NAME ...] [--save-failures DIR]

Mutants of the bundled corpus modules (corpus/modules, every stage up to
--max-seed-kb) and of XLA's conformance modules (../shared/conformance, or
$HLO_SHARED_DIR), made by every strategy in tests/fuzz.py, each parsed,
verified and printed in a child process under a time and a memory limit.
Prints the counts by class and by strategy; the last line is
``fuzz_crashes=N``, where N counts crashes (an exception other than a located
HloParseError / VerificationError), errors located outside the input, hangs
and dead children.  N must be 0.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import corpus  # noqa: E402
from tests.fuzz import FAILURES, STRATEGIES, Campaign  # noqa: E402
from tests.conftest import accepted_modules  # noqa: E402


def _seeds(max_kb: int) -> list[tuple[str, str]]:
    out = [(p.name, p.read_text()) for p in accepted_modules()]
    for entry in corpus.load():
        for stage in entry.files:
            text = entry.text(stage)
            if len(text) <= max_kb * 1024:
                out.append((f"{entry.name}:{stage}", text))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", type=int, default=10000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--jobs", type=int, default=2, help="child processes at once")
    ap.add_argument("--timeout", type=float, default=30.0, help="seconds one mutant may take (a hang past it)")
    ap.add_argument("--mem-mb", type=int, default=3072, help="address-space limit of each child")
    ap.add_argument("--max-seed-kb", type=int, default=400, help="largest corpus stage used as a seed")
    ap.add_argument("--strategy", action="append", choices=sorted(STRATEGIES), help="only these (repeatable)")
    ap.add_argument("--save-failures", type=Path, help="write each failing mutant here")
    args = ap.parse_args(argv)

    seeds = _seeds(args.max_seed_kb)
    if not seeds:
        print("no seed modules (corpus/modules and ../shared/conformance are both missing)", file=sys.stderr)
        return 2
    print(f"{len(seeds)} seed modules, {len(args.strategy or STRATEGIES)} strategies, {args.cases} mutants, "
          f"seed {args.seed}, {args.jobs} children, {args.timeout:g} s and {args.mem_mb} MB each", flush=True)
    campaign = Campaign(seeds, seed=args.seed, timeout=args.timeout, mem_mb=args.mem_mb)
    done = [0]
    t0 = time.perf_counter()

    def progress(result) -> None:
        done[0] += 1
        if result.cls in FAILURES:
            print(f"  FAIL {result.cls}: {result.strategy} on {result.seed}: {result.detail}", flush=True)
        if done[0] % 500 == 0:
            print(f"  {done[0]} mutants, {time.perf_counter() - t0:.0f} s", flush=True)

    counts = campaign.run(args.cases, jobs=args.jobs, strategies=args.strategy, progress=progress)
    elapsed = time.perf_counter() - t0
    by_strategy: dict[str, Counter] = {}
    for r in campaign.results:
        by_strategy.setdefault(r.strategy, Counter())[r.cls] += 1
    classes = ["ok", "parse_error", "verify_error", *FAILURES]
    print(f"\n{'strategy':24s}" + "".join(f"{c:>13s}" for c in classes))
    for name in sorted(by_strategy):
        print(f"{name:24s}" + "".join(f"{by_strategy[name][c]:13d}" for c in classes))
    print(f"{'total':24s}" + "".join(f"{counts[c]:13d}" for c in classes))
    slowest = max(campaign.results, key=lambda r: r.seconds)
    print(f"\n{len(campaign.results)} mutants in {elapsed:.0f} s; slowest {slowest.seconds:.1f} s ({slowest.strategy} on {slowest.seed})")
    failures = campaign.failures()
    if args.save_failures and failures:
        args.save_failures.mkdir(parents=True, exist_ok=True)
        for i, r in enumerate(failures):
            (args.save_failures / f"{i:04d}_{r.strategy}.hlo").write_text(r.text, encoding="utf-8", errors="surrogatepass")
        print(f"failing mutants written to {args.save_failures}")
    print(f"fuzz_crashes={len(failures)}")
    return 0 if not failures else 1


if __name__ == "__main__":
    sys.exit(main())
