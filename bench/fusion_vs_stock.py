"""Python fusion pipelines vs stock XLA:CPU on the runnable corpus modules.

For each module: stock XLA on the original, against XLA "as-written" (its fusion
passes off) with our pipeline deciding every fusion (``--route hooked``, the
default: our passes run at XLA's pre-scheduler hook; ``--route text``: our passes
on the pre-optimization module, compiled as written). Prints one row per module
(kernels, XLA's bytes accessed, median ms, ratio with p10-p90, outputs equal,
fusions kept) and ``geomean_speedup_vs_stock=...`` last. ``--gpu [h100]`` adds the
XLA:GPU columns compiled here without a GPU (kernels, bytes, roofline-predicted
time; see hlo_lab/study.py). Timings are A/B
interleaved (ABBA) medians; the machine is shared, so expect a few % of noise.

    JAX_PLATFORMS=cpu .venv/bin/python bench/fusion_vs_stock.py [--passes P1,P2] [--only GLOB] [--reps N] [--gpu h100]
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

import corpus  # noqa: E402
import hlo_tools  # noqa: E402
from hlo_lab.study import cpu_study, fusions, gpu_pipeline, gpu_study, kernels  # noqa: E402
from passes import PassManager  # noqa: E402
from passes.fusion.pipeline import BEST, TEXT_PREFIX, passes_of  # noqa: E402
from xla_bridge import xla  # noqa: E402
from xla_bridge.errors import XlaCompileError  # noqa: E402
from xla_bridge.measure import AS_WRITTEN, STOCK, Measurement  # noqa: E402

def runnable_modules(pattern: str | None) -> list[tuple[str, str]]:
    """(name, before_optimizations text) of the runnable, unsharded corpus modules."""
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


def ours_text_route(text: str, spec: str):
    """Our passes on the pre-optimization module, compiled as written (XLA:CPU
    aborts on some fusions this way: see docs/fusion_passes.md)."""
    module = hlo_tools.parse(text)
    PassManager(passes_of(TEXT_PREFIX + "," + spec)).run(module)
    return Measurement("cpu").compile(module, AS_WRITTEN), fusions(module)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--passes", default=BEST)
    ap.add_argument("--route", choices=("hooked", "text"), default="hooked")
    ap.add_argument("--backend", choices=("cpu", "gpu"), default="cpu",
                    help="where the measured table runs (gpu: a real GPU; hooked route only)")
    ap.add_argument("--only", default=None, help="fnmatch pattern of module names")
    ap.add_argument("--reps", type=int, default=60)
    ap.add_argument("--gpu", metavar="TARGET", nargs="?", const="h100", default=None,
                    help="add XLA:GPU columns for TARGET (default h100), compiled without a GPU")
    args = ap.parse_args(argv)

    rows, ratios, t0 = [], [], time.time()
    if args.backend == "gpu" and args.route != "hooked":
        ap.error("--backend gpu measures the hooked route only")
    print(f"pipeline: {args.passes} (route {args.route}); XLA:{args.backend.upper()}, {args.reps} ABBA reps per module")
    print("  ".join(("module", "kernels s/o", "MB s/o", "ms stock", "ms ours", "speedup (p10-p90)", "outputs", "kept")))
    modules = runnable_modules(args.only)
    for name, text in modules:
        try:
            if args.route == "hooked":
                r = cpu_study(name, text, args.passes, reps=args.reps, backend=args.backend)
                kept = "yes" if r.kept else f"no ({r.fusions_written} written, {r.fusions_compiled} compiled)"
                row = (name, f"{r.kernels_stock}/{r.kernels_ours}", f"{r.bytes_stock / 1e6:.2f}/{r.bytes_ours / 1e6:.2f}",
                       f"{r.ms_stock:.3f}", f"{r.ms_ours:.3f}", f"{r.speedup:.3f} ({r.speedup_p10:.2f}-{r.speedup_p90:.2f})",
                       r.outputs, kept)
                speedup = r.speedup
            else:
                stock = Measurement("cpu").compile(text, STOCK)
                mine, written = ours_text_route(text, args.passes)
                b = Measurement("cpu").benchmark(stock, mine, reps=args.reps, warmup=5)
                got = fusions(mine.optimized_module)
                row = (name, f"{kernels(stock.optimized_module)}/{kernels(mine.optimized_module)}",
                       f"{stock.cost.get('bytes accessed', 0) / 1e6:.2f}/{mine.cost.get('bytes accessed', 0) / 1e6:.2f}",
                       f"{b.a.median_us / 1e3:.3f}", f"{b.b.median_us / 1e3:.3f}",
                       f"{b.speedup:.3f} ({b.speedup_p10:.2f}-{b.speedup_p90:.2f})", b.verdict,
                       "yes" if got == written else f"no ({written} written, {got} compiled)")
                speedup = b.speedup
        except XlaCompileError as e:  # a failure is a row, never a silent skip
            rows.append((name, "-", "-", "-", "-", "-", "ERROR", str(e)[:120]))
            print("  ".join(rows[-1]), flush=True)
            continue
        ratios.append((speedup, name))
        rows.append(row)
        print("  ".join(row), flush=True)
    if not ratios:
        print("no runnable modules found")
        return 1
    gpu_rows = []
    if args.gpu:
        if not xla.cuda_plugin_available():
            print("\nGPU columns skipped: no XLA:GPU compiler here (the CUDA plugin is not installed)")
        else:
            print(f"\nXLA:GPU {args.gpu} compiled without a GPU: stock vs as-written with {gpu_pipeline(args.passes)} at the "
                  "post-scheduler hook; XLA's bytes accessed, time predicted by our roofline")
            print("  ".join(("module", "kernels s/o", "MB s/o", "pred us stock", "pred us ours", "pred speedup", "kept")))
            for name, text in modules:
                g = gpu_study(name, text, args.passes, args.gpu)
                gpu_rows.append(g)
                print("  ".join((name, f"{g.kernels_stock}/{g.kernels_ours}",
                                 f"{g.bytes_stock / 1e6:.2f}/{g.bytes_ours / 1e6:.2f}", f"{g.predicted_us_stock:.1f}",
                                 f"{g.predicted_us_ours:.1f}", f"{g.predicted_speedup:.3f}",
                                 "yes" if g.kept else f"no ({g.fusions_written} written)")), flush=True)
            pgeo = math.exp(sum(math.log(g.predicted_speedup) for g in gpu_rows) / len(gpu_rows))
            print(f"all GPU fusions kept: {all(g.kept for g in gpu_rows)}")
            print(f"predicted_geomean_speedup_vs_stock_{args.gpu}={pgeo:.3f}")
    geo = math.exp(sum(math.log(r) for r, _ in ratios) / len(ratios))
    worst = min(ratios)
    errors = sum(1 for r in rows if r[6] == "ERROR")
    beats = [n for r, n in sorted(ratios, reverse=True) if r > 1.0]
    print(f"\n{len(rows)} modules in {time.time() - t0:.0f} s; slowest vs stock: {worst[1]} {worst[0]:.3f}; "
          f"faster than stock: {len(beats)}; all outputs equal: {all(r[6] in ('exact', 'close') for r in rows)}; "
          f"all fusions kept: {all(r[7] == 'yes' for r in rows)}; errors: {errors}")
    print(f"geomean_speedup_vs_stock={geo:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
