"""Python fusion pipelines vs stock XLA:CPU on the runnable corpus modules.

For each module: stock XLA on the original, against XLA "as-written" (its fusion
passes off) with our pipeline deciding every fusion (``--route hooked``, the
default: our passes run at XLA's pre-scheduler hook; ``--route text``: our passes
on the pre-optimization module, compiled as written). Prints one row per module
(kernels, XLA's bytes accessed, median ms, ratio with p10-p90, outputs equal,
fusions kept) and ``geomean_speedup_vs_stock=...`` last. Timings are A/B
interleaved (ABBA) medians; the machine is shared, so expect a few % of noise.

    JAX_PLATFORMS=cpu .venv/bin/python bench/fusion_vs_stock.py [--passes P1,P2] [--only GLOB] [--reps N]
"""

from __future__ import annotations

import argparse
import fnmatch
import gzip
import json
import math
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import hlo_tools  # noqa: E402
from hlo_tools import HloOpcode  # noqa: E402
from hlo_tools.xla_bench import benchmark  # noqa: E402
from hlo_tools.xla import XlaCompileError  # noqa: E402
from hlo_tools.xla_compile import compile  # noqa: E402
from passes import PassManager  # noqa: E402
from passes.fusion.pipeline import BEST, TEXT_PREFIX, FusionHook, passes_of  # noqa: E402

#: Not kernels: no code runs for them.
FREE = {HloOpcode.PARAMETER, HloOpcode.CONSTANT, HloOpcode.BITCAST, HloOpcode.TUPLE, HloOpcode.GET_TUPLE_ELEMENT}


def runnable_modules(pattern: str | None) -> list[tuple[str, str]]:
    """(name, before_optimizations text) of the runnable, unsharded corpus modules."""
    import corpus

    try:
        entries = [(e.name, e.meta, e.text) for e in corpus.load()]
    except FileNotFoundError:  # manifest not written yet: read the per-module records
        entries = []
        for d in sorted((ROOT / "corpus" / "modules").iterdir()):
            meta = json.loads((d / "entry.json").read_text())
            entries.append((meta["name"], meta, lambda st, d=d: gzip.decompress((d / f"{st}.hlo.txt.gz").read_bytes()).decode()))
    out = []
    for name, meta, text in entries:
        if not meta.get("runnable") or meta.get("sharded") or (pattern and not fnmatch.fnmatch(name, pattern)):
            continue
        out.append((name, text("before_optimizations")))
    return out


def kernels(result) -> int:
    """Instructions of XLA's optimized entry that run code (fusions, dots, copies...)."""
    return sum(1 for i in result.optimized_module.entry if i.opcode not in FREE)


def fusions(result) -> int:
    return sum(1 for i in result.optimized_module.entry if i.opcode is HloOpcode.FUSION)


def ours(text: str, spec: str, route: str):
    """Compiles our pipeline's module; returns (CompileResult, fusions we wrote)."""
    if route == "hooked":
        hook = FusionHook(passes_of(spec))
        res = compile(text, "cpu", "as-written", hook=(hook, "pre-scheduler"))
        return res, hook.fusions_out
    module = hlo_tools.parse(text)
    PassManager(passes_of(TEXT_PREFIX + "," + spec)).run(module)
    written = sum(1 for i in module.entry if i.opcode is HloOpcode.FUSION)
    return compile(module, "cpu", "as-written"), written


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--passes", default=BEST)
    ap.add_argument("--route", choices=("hooked", "text"), default="hooked")
    ap.add_argument("--only", default=None, help="fnmatch pattern of module names")
    ap.add_argument("--reps", type=int, default=60)
    args = ap.parse_args(argv)

    rows = []
    header = ("module", "kernels s/o", "MB s/o", "ms stock", "ms ours", "speedup (p10-p90)", "outputs", "kept")
    print(f"pipeline: {args.passes} (route {args.route}); XLA:CPU, {args.reps} ABBA reps per module")
    print("  ".join(header))
    ratios = []
    t0 = time.time()
    for name, text in runnable_modules(args.only):
        stock = compile(text, "cpu", "stock")
        try:
            mine, written = ours(text, args.passes, args.route)
            b = benchmark(stock, mine, reps=args.reps, warmup=5)
        except XlaCompileError as e:  # a failure is a row, never a silent skip
            rows.append((name, "-", "-", "-", "-", "-", "ERROR", str(e)[:120]))
            print("  ".join(rows[-1]), flush=True)
            continue
        kept = "yes" if fusions(mine) == written else f"no ({written} written, {fusions(mine)} compiled)"
        ratios.append((b.speedup, name))
        row = (
            name,
            f"{kernels(stock)}/{kernels(mine)}",
            f"{stock.cost.get('bytes accessed', 0) / 1e6:.2f}/{mine.cost.get('bytes accessed', 0) / 1e6:.2f}",
            f"{b.a.median_us / 1e3:.3f}",
            f"{b.b.median_us / 1e3:.3f}",
            f"{b.speedup:.3f} ({b.speedup_p10:.2f}-{b.speedup_p90:.2f})",
            b.verdict,
            kept,
        )
        rows.append(row)
        print("  ".join(row), flush=True)
    if not ratios:
        print("no runnable modules found")
        return 1
    geo = math.exp(sum(math.log(r) for r, _ in ratios) / len(ratios))
    worst = min(ratios)
    errors = sum(1 for r in rows if r[6] == "ERROR")
    print(f"{len(rows)} modules in {time.time() - t0:.0f} s; slowest vs stock: {worst[1]} {worst[0]:.3f}; "
          f"all outputs equal: {all(r[6] in ('exact', 'close') for r in rows)}; all fusions kept: {all(r[7] == 'yes' for r in rows)}; errors: {errors}")
    print(f"geomean_speedup_vs_stock={geo:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
