"""Python fusion pipelines vs stock XLA:CPU on the runnable corpus modules.

For each module: stock XLA on the original, against XLA "as-written" (its fusion
passes off) with our pipeline deciding every fusion (``--route hooked``, the
default: our passes run at XLA's pre-scheduler hook; ``--route text``: our passes
on the pre-optimization module, compiled as written). Prints one row per module
(kernels, XLA's bytes accessed, median ms, ratio with p10-p90, outputs equal,
fusions kept) and ``geomean_speedup_vs_stock=...``. Timings are A/B interleaved
(ABBA) medians; the machine is shared, so expect a few % of noise.

``--gpu [h100]`` adds the XLA:GPU study, compiled here without a GPU, on every
unsharded corpus module, full-size ones included (``--sizes``): stock XLA:GPU
against ``--gpu-passes`` (default ``GPU_BEST``) in each of ``--modes`` (replace,
on-top, as-written; docs/xla_gpu_modes.md). Per module and mode: kernels, bytes
and flops from our cost model on both sides, time predicted by our roofline and
by XLA's own GPU model (its estimates for the kernels it priced), whether XLA:GPU
kept our fusions; per mode the geomeans; the best mode's
``predicted_geomean_speedup_vs_stock_<target>=...`` last. ``--gpu-only`` skips
the measured CPU table.

    JAX_PLATFORMS=cpu .venv/bin/python bench/fusion_vs_stock.py [--passes P1,P2] [--only GLOB] [--reps N] [--gpu h100 [--gpu-only] [--modes on-top] [--sizes full]]
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import math
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import corpus  # noqa: E402
import hlo_tools  # noqa: E402
from hlo_tools.parser import read_hlo_text  # noqa: E402
from hlo_lab.study import cpu_study, fusions, gpu_study_modes, kernels  # noqa: E402
from passes import PassManager  # noqa: E402
from passes.registry import BEST, GPU_BEST, TEXT_PREFIX, parse_pipeline  # noqa: E402
from xla_bridge import jax_internals  # noqa: E402
from xla_bridge.errors import XlaCompileError  # noqa: E402
from xla_bridge.measure import AS_WRITTEN, FUSION_MODES, STOCK, Measurement  # noqa: E402

def corpus_modules(pattern: str | None, *, runnable: bool = True, sizes: str = "all") -> list[tuple[str, str]]:
    """(name, before_optimizations text) of the unsharded corpus modules: the
    runnable ones only, or (``runnable=False``) those of ``sizes`` (tiny, full, all)."""
    try:
        entries = [(e.name, e.meta, e.text) for e in corpus.load()]
    except FileNotFoundError:  # manifest not written yet: read the per-module records
        entries = []
        for d in sorted((ROOT / "corpus" / "modules").iterdir()):
            meta = json.loads((d / "entry.json").read_text())
            entries.append((meta["name"], meta, lambda st, d=d: read_hlo_text(d / f"{st}.hlo.txt.gz")))
    out = []
    for name, meta, text in entries:
        if meta.get("sharded") or (pattern and not fnmatch.fnmatch(name, pattern)):
            continue
        if (runnable and not meta.get("runnable")) or (sizes != "all" and meta.get("size") != sizes):
            continue
        out.append((name, text("before_optimizations")))
    return out


def ours_text_route(text: str, spec: str):
    """Our passes on the pre-optimization module, compiled as written (XLA:CPU
    aborts on some fusions this way: see docs/fusion_passes.md)."""
    module = hlo_tools.parse(text)
    PassManager(parse_pipeline(TEXT_PREFIX + "," + spec)).run(module)
    return Measurement("cpu").compile(module, AS_WRITTEN), fusions(module)


def cpu_table(args) -> int:
    """The measured XLA:CPU table; returns how many modules it measured."""
    rows, ratios, t0 = [], [], time.time()
    print(f"pipeline: {args.passes} (route {args.route}, {args.measure_mode} mode); XLA:{args.backend.upper()}, "
          f"{args.reps} ABBA reps per module")
    print("  ".join(("module", "kernels s/o", "MB s/o", "ms stock", "ms ours", "speedup (p10-p90)", "outputs", "kept")))
    for name, text in corpus_modules(args.only, runnable=not args.measure_full, sizes="all"):
        try:
            if args.route == "hooked":
                r = cpu_study(name, text, args.passes, reps=args.reps, backend=args.backend, mode=args.measure_mode,
                              input_sets=args.input_sets)
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
        return 0
    geo = math.exp(sum(math.log(r) for r, _ in ratios) / len(ratios))
    worst = min(ratios)
    errors = sum(1 for r in rows if r[6] == "ERROR")
    beats = [n for r, n in sorted(ratios, reverse=True) if r > 1.0]
    print(f"\n{len(rows)} modules in {time.time() - t0:.0f} s; slowest vs stock: {worst[1]} {worst[0]:.3f}; "
          f"faster than stock: {len(beats)}; all outputs equal: {all(r[6] in ('exact', 'close') for r in rows)}; "
          f"all fusions kept: {all(r[7] == 'yes' for r in rows)}; errors: {errors}")
    print(f"geomean_speedup_vs_stock={geo:.3f}")
    return len(ratios)


def _geomean(xs: list[float]) -> float:
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def gpu_table(args) -> int:
    """The XLA:GPU study, compiled without a GPU; its last line is the best mode's
    predicted geomean.  Returns 0, or 1 when no module could be studied."""
    if not jax_internals.cuda_plugin_available():
        print("\nGPU study skipped: no XLA:GPU compiler here (the CUDA plugin is not installed)")
        return 0
    modes = [m for m in args.modes.split(",") if m]
    t0 = time.time()
    print(f"\nXLA:GPU {args.gpu} compiled without a GPU: stock vs {args.gpu_passes} (rewrites of the module as "
          f"given, such as cache-update-in-place, first; the rest at the post-scheduler hook), "
          f"modes {', '.join(modes)}. Bytes and flops: our cost model on both sides; time: our roofline "
          "and XLA-where-priced (XLA's own estimate for each kernel it priced, ours for the rest: XLA prices "
          "before our passes run, so the fusions we wrote are priced by ours)")
    print("  ".join(("module", "mode", "kernels s/o", "MB s/o", "GFLOP s/o", "pred us s/o", "XLA-where-priced us s/o",
                     "priced s/o", "pred speedup", "XLA-where-priced speedup", "kept")), flush=True)
    by_mode: dict[str, list] = {m: [] for m in modes}
    errors = 0
    for name, text in corpus_modules(args.only, runnable=False, sizes=args.sizes):
        try:
            rows = gpu_study_modes(name, text, args.gpu_passes, args.gpu, modes=modes)
        except XlaCompileError as e:  # a failure is a row, never a silent skip
            errors += 1
            print(f"{name}  ERROR  {str(e)[:160]}", flush=True)
            continue
        for g in rows:
            by_mode[g.mode].append(g)
            s, o = g.stock, g.ours
            print("  ".join((name, g.mode, f"{s.kernels}/{o.kernels}", f"{s.bytes / 1e6:.2f}/{o.bytes / 1e6:.2f}",
                             f"{s.flops / 1e9:.3f}/{o.flops / 1e9:.3f}", f"{s.predicted_us:.1f}/{o.predicted_us:.1f}",
                             f"{s.xla_where_priced_us:.1f}/{o.xla_where_priced_us:.1f}",
                             f"{s.xla_priced}/{s.kernels} {o.xla_priced}/{o.kernels}",
                             f"{g.predicted_speedup:.3f}", f"{g.xla_where_priced_speedup:.3f}",
                             "yes" if g.kept else f"no ({g.fusions_written} written)")), flush=True)
    summary = {}
    for mode, rows in by_mode.items():
        if not rows:
            continue
        worst = min(rows, key=lambda g: g.predicted_speedup)
        summary[mode] = _geomean([g.predicted_speedup for g in rows])
        print(f"{mode}: {len(rows)} modules; predicted geomean {summary[mode]:.3f} (worst {worst.module} "
              f"{worst.predicted_speedup:.3f}); XLA-where-priced geomean {_geomean([g.xla_where_priced_speedup for g in rows]):.3f}; "
              f"at least stock's on every module: {all(g.predicted_speedup >= 1.0 for g in rows)}; "
              f"bytes never above stock: {all(g.ours.bytes <= g.stock.bytes for g in rows)}; "
              f"all fusions kept: {all(g.kept for g in rows)}")
    print(f"{sum(len(r) for r in by_mode.values())} studies in {time.time() - t0:.0f} s; errors: {errors}")
    if not summary:
        print("no module could be studied")
        return 1
    best = max(summary, key=summary.get)
    print(f"best mode: {best}")
    print(f"predicted_geomean_speedup_vs_stock_{args.gpu}={summary[best]:.3f}")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--passes", default=BEST)
    ap.add_argument("--route", choices=("hooked", "text"), default="hooked")
    ap.add_argument("--backend", choices=("cpu", "gpu"), default="cpu",
                    help="where the measured table runs (gpu: a real GPU; hooked route only)")
    ap.add_argument("--only", default=None, help="fnmatch pattern of module names")
    ap.add_argument("--reps", type=int, default=60)
    ap.add_argument("--measure-mode", choices=list(FUSION_MODES), default="as-written",
                    help="how the measured table runs the passes inside XLA (default as-written)")
    ap.add_argument("--measure-full", action="store_true",
                    help="measure full-size modules too (a GPU with the memory for their random weights)")
    ap.add_argument("--input-sets", type=int, default=3, help="input sets of the measured table")
    ap.add_argument("--gpu", metavar="TARGET", nargs="?", const="h100", default=None,
                    help="add the XLA:GPU study for TARGET (default h100), compiled without a GPU")
    ap.add_argument("--gpu-only", action="store_true", help="the XLA:GPU study alone (no measured CPU table)")
    ap.add_argument("--gpu-passes", default=GPU_BEST, help="the pipeline of the GPU study (default GPU_BEST)")
    ap.add_argument("--modes", default=",".join(FUSION_MODES), help="fusion modes of the GPU study, comma-separated")
    ap.add_argument("--sizes", choices=("tiny", "full", "all"), default="all", help="corpus module sizes of the GPU study")
    args = ap.parse_args(argv)
    if args.backend == "gpu" and args.route != "hooked":
        ap.error("--backend gpu measures the hooked route only")
    if args.gpu_only and not args.gpu:
        args.gpu = "h100"
    if unknown := [m for m in args.modes.split(",") if m and m not in FUSION_MODES]:
        ap.error(f"unknown mode(s) {', '.join(unknown)}: use {', '.join(FUSION_MODES)}")
    measured = 0 if args.gpu_only else cpu_table(args)
    status = gpu_table(args) if args.gpu else 0
    return status or (0 if measured or args.gpu_only else 1)


if __name__ == "__main__":
    sys.exit(main())
