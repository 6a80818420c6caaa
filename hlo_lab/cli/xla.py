"""``hlo compile | run | compare | bench | history``: thin commands over
``compiler``, ``runner``, ``xla_bridge.Measurement`` and ``results``."""

from __future__ import annotations

import json
import sys

import numpy as np

from hlo_tools.errors import HloError, HloParseError
from hlo_tools.fileio import check_writable, write_output
from hlo_tools.parser import parse
from xla_bridge.display import clean_cost, within_noise
from hlo_analysis.units import finite, fmt_seconds, fmt_us
from xla_bridge.errors import XlaCompileError
from xla_bridge.hook_stage import HookStage
from xla_bridge.measure import FUSION_MODES, STOCK, Measurement, XlaPipeline
from xla_bridge.compiler import PIPELINES, compile, manual_partitions
from xla_bridge.worker import host_devices
from xla_bridge.results import history, record, trend
from xla_bridge.runner import compare, run_module

from ..console import stdout_console
from .. import progress
from .args import add_load, at_least_one, seed
from .inputs import load_verified


def _load(path: str):
    return load_verified(path)


def _flags(args) -> list[str]:
    return list(getattr(args, "xla_flag", None) or [])


def _cmd_compile(args) -> int:
    if args.dump_optimized:
        check_writable(args.dump_optimized)  # before compiling: a bad path fails at once
    if args.dump_dir:
        check_writable(args.dump_dir, directory=True)
    try:
        module = _load(args.file)
        parts = 1 if args.target else manual_partitions(module.to_text())
        if parts > 1:  # a shard_map module compiles over its devices only: the XLA worker gets that many host devices
            host_devices(parts)
        with progress.status(f"compiling {args.file}", progress.wanted(args)):
            res = compile(module, args.backend, args.pipeline, flags=_flags(args), target=args.target,
                          dump_dir=args.dump_dir, contained=True, partitions=parts)
    except HloParseError as e:
        print(e.format(), file=sys.stderr)
        return 2
    except (XlaCompileError, HloError, ValueError) as e:
        print(f"hlo compile: {e}", file=sys.stderr)
        return 2
    if args.dump_optimized:
        write_output(args.dump_optimized, res.optimized_text)
    kinds: dict[str, int] = {}
    for _, kind in res.fusions():
        kinds[kind] = kinds.get(kind, 0) + 1
    cost = clean_cost(res.cost)
    info = {"module": res.module_name, "backend": res.backend, "device": res.device, "pipeline": res.pipeline,
            "compile_seconds": round(res.compile_seconds, 4), "instructions": res.optimized_module.instruction_count,
            "fusions": kinds, "cost": cost, "memory": res.memory}
    if args.json:
        print(json.dumps(finite(info), indent=2))
    else:
        how = "XLA's optimized module handed over as written" if res.handed_over else res.pipeline
        print(f"{res.module_name}: XLA:{res.backend} ({res.device}) {how} in {res.compile_seconds:.3f} s; "
              f"{info['instructions']} instructions, fusions {kinds or 'none'}")
        totals = {k: v for k, v in cost.items() if not isinstance(v, dict)}
        if totals:
            print("cost: " + ", ".join(f"{k} {fmt_seconds(v) if k.endswith('seconds') else f'{v:,.0f}'}"
                                       for k, v in totals.items()))
        if res.memory:
            print("memory: " + ", ".join(f"{k.removesuffix('_in_bytes')} {v:,}" for k, v in res.memory.items() if v))
    return 0


def _cmd_run(args) -> int:
    try:
        module = _load(args.file)
        with progress.status(f"compiling and running {args.file}", progress.wanted(args)):
            outs = run_module(module, backend=args.backend, pipeline=args.pipeline, flags=_flags(args), seed=args.seed,
                              contained=True)
    except HloParseError as e:
        print(e.format(), file=sys.stderr)
        return 2
    except (XlaCompileError, HloError, ValueError) as e:
        print(f"hlo run: {e}", file=sys.stderr)
        return 2
    rows = []
    for i, o in enumerate(outs):
        f = np.asarray(o, dtype=np.float64) if o.dtype.kind != "c" else np.abs(o)
        finite_ = f[np.isfinite(f)]
        stats = {"min": float(finite_.min()), "max": float(finite_.max()), "mean": float(finite_.mean())} if finite_.size else {}
        counts = {"nan": int(np.isnan(f).sum()), "inf": int(np.isinf(f).sum())}
        rows.append({"index": i, "dtype": o.dtype.name, "shape": list(o.shape), **stats, **counts})
        if not args.json:
            text = " ".join(f"{k} {v:.6g}" for k, v in stats.items()) if stats else ("empty" if not f.size else "no finite value")
            text += "".join(f", {n} {'NaN' if k == 'nan' else 'inf'}" for k, n in counts.items() if n)
            print(f"output {i}: {o.dtype.name}{list(o.shape)} {text}")
    if args.json:
        print(json.dumps(finite({"module": module.name, "backend": args.backend, "pipeline": args.pipeline,
                                 "seed": args.seed, "outputs": rows}), indent=2))
    return 0


def _cmd_compare(args) -> int:
    try:
        a, b = _load(args.a), _load(args.b)
        with progress.status(f"comparing {args.a} and {args.b}", progress.wanted(args)):
            cmp = compare(a, b, backend=args.backend, pipeline_a=args.pipeline_a, pipeline_b=args.pipeline_b,
                          flags=_flags(args), seed=args.seed, contained=True)
    except HloParseError as e:
        print(e.format(), file=sys.stderr)
        return 2
    except (XlaCompileError, HloError, ValueError) as e:
        print(f"hlo compare: {e}", file=sys.stderr)
        return 2
    print(json.dumps(cmp.as_dict(), indent=2) if args.json else cmp)
    return 0 if cmp.ok else 1


def _pipeline(spec: str) -> list:
    """The passes named in ``spec``; an unknown name is a ValueError naming the
    known ones, raised before anything is compiled."""
    from passes.registry import parse_pipeline  # lazy: every pass module and the analyses they use, ~90 ms on each hlo start (measured)

    try:
        return parse_pipeline(spec)
    except KeyError as e:
        raise ValueError(e.args[0]) from None  # it lists the known names


def _apply_passes(module, pipeline: list):
    from passes import PassManager  # lazy: every pass module and the analyses they use, ~90 ms on each hlo start (measured)

    rewritten = module.clone()
    PassManager(pipeline).run(rewritten)
    return rewritten


def _cmd_bench(args) -> int:
    """The original under ``--pipeline-a`` (A) against B.  What B is follows what
    the passes are (``hlo_lab.debug.rewrite.rewrite_route``, the rule ``hlo upstream``
    and ``hlo bisect`` measure by): cleanup passes run on the text and both sides
    are compiled stock; a fusion pass runs inside XLA at the hook stage, B as
    written.  ``--hook`` and ``--pipeline-b`` override it.  All of it runs in the
    XLA worker, so the passes go there (by name, as pickled Pass objects) and the
    module they left comes back."""
    if args.target:
        return _bench_deviceless(args)
    if args.mode:
        print("hlo bench: --mode needs --target (the GPU study compiled without a GPU)", file=sys.stderr)
        return 2
    from ..debug.rewrite import baseline_moved  # lazy: imports the passes, as in _bench_b

    baseline, against_baseline = "", None
    try:
        if args.hook and not args.passes:
            raise ValueError("--hook needs --passes (the passes to run inside XLA's pipeline)")
        pipeline = _pipeline(args.passes) if args.passes else []
        original = _load(args.file)
        measurement = Measurement(args.backend, flags=_flags(args), contained=True)
        pipeline_a = XlaPipeline(args.pipeline_a)
        pipeline_b, rewritten, mode, why = _bench_b(args, original, pipeline)
        if not args.json:
            print(f"mode: {mode} ({why})")
        with progress.status(f"bench {original.name}: {args.reps} ABBA pairs", progress.wanted(args)):
            res = measurement.benchmark(original, rewritten, pipeline_a, pipeline_b, reps=args.reps,
                                        warmup=args.warmup)
            vs = _vs_stock(measurement, original, res, pipeline_a) if args.vs_stock else None
            baseline, against_baseline = baseline_moved(measurement, original, rewritten, res, pipeline_a,
                                                        pipeline_b)
        if pipeline_b.pass_ is not None and res.hook_b is not None and res.hook_b.after is not None:
            rewritten = res.hook_b.after
    except HloParseError as e:
        print(e.format(), file=sys.stderr)
        return 2
    except (XlaCompileError, HloError, ValueError) as e:
        print(f"hlo bench: {e}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps({**res.as_dict(), "mode": mode, "mode_why": why, "passes": args.passes or "",
                          "mismatch": res.mismatch, **({"baseline": baseline} if baseline else {}),
                          **({"outputs_vs_baseline": against_baseline} if against_baseline else {}),
                          **({"vs_stock": vs} if vs is not None else {})}, indent=2))
    else:
        print(res.table())
        if res.mismatch:
            print(f"first difference: {res.mismatch}")
        if baseline:
            print(baseline)
        if vs is not None:
            print(vs["summary"])
    if not args.no_record:
        row = record(res, module_text=original.to_text(), rewritten_text=rewritten.to_text(), passes=args.passes or "",
                     db=args.db, extra={"mode": mode})
        if not args.json:
            print(f"recorded as row {row} in {args.db or 'the default results db'}")
    # a moved baseline is XLA's (its fusion off), not the passes': they are judged against it
    return 0 if (against_baseline or res.verdict) in ("exact", "close", "unchecked") else 1


def _bench_b(args, original, pipeline: list) -> tuple[XlaPipeline, object, str, str]:
    """B's pipeline and module, the mode in a few words, and why that mode."""
    from passes import PassManager  # lazy: every pass module and the analyses they use, ~90 ms on each hlo start (measured)
    from ..debug.rewrite import default_pipeline, rewrite_route  # lazy: imports the passes, as above

    if args.hook:
        base = args.pipeline_b or default_pipeline(pipeline)  # the rule bisect, reduce and upstream follow
        return (XlaPipeline(base).hooked(PassManager(pipeline), HookStage(args.hook)), original,
                f"stock vs {args.passes} inside XLA at {args.hook}, B {base}", "--hook")
    if args.against:
        base = args.pipeline_b or "as-written"
        return (XlaPipeline(base), _load(args.against), f"stock vs {args.against}, B {base}",
                "--pipeline-b" if args.pipeline_b else "an already rewritten module is timed as written; "
                "--pipeline-b stock to let XLA optimize it too")
    if not pipeline:
        base = args.pipeline_b or "as-written"
        return (XlaPipeline(base), original, f"{args.pipeline_a} vs {base} on the same module",
                "no --passes: XLA's pipelines compared" if not args.pipeline_b else "--pipeline-b")
    if args.pipeline_b:
        return (XlaPipeline(args.pipeline_b), _apply_passes(original, pipeline),
                f"stock vs {args.passes} on the module, B {args.pipeline_b}", "--pipeline-b")
    pipeline_b, on_text, route = rewrite_route(pipeline, args.backend)
    if on_text:
        rewritten = original.clone()
        changed = PassManager(pipeline).run(rewritten)
        return (pipeline_b, rewritten, f"stock vs stock on the module after {args.passes}",
                "no fusion pass: cleanup passes are measured with XLA's whole pipeline on both sides"
                + ("" if changed else "; the passes changed nothing"))
    return (pipeline_b, original, f"stock vs {route}",
            "a fusion pass: it decides the fusions inside XLA, whose own fusion is off on B")


def _vs_stock(measurement: Measurement, original, res, pipeline_a: XlaPipeline) -> dict:
    """Does stock XLA already do this?  XLA's optimized stock module against XLA's
    module of ours (B), diffed as ``hlo diff`` does: what ours has that stock's lacks.
    Both are the modules just timed; stock is compiled again only when A was not stock."""
    from visualize.diff import diff_modules  # lazy: the diff and its matching, only for --vs-stock

    text_a, text_b = res.optimized
    stock = (parse(text_a, source="<A optimized by XLA>") if pipeline_a.base == STOCK.base
             else measurement.compile(original, STOCK).optimized_module)
    ours = parse(text_b, source="<B optimized by XLA>")
    d = diff_modules(stock, ours)
    deltas = {op: a - b for op, b, a in d.opcode_counts if a != b}
    same = not deltas and stock.instruction_count == ours.instruction_count
    counts = d.counts()
    if same:
        summary = (f"vs stock: XLA's stock result and ours have the same {ours.instruction_count} instructions, "
                   f"opcode for opcode: stock XLA already does what the passes do")
    else:
        shown = ", ".join(f"{op} {n:+d}" for op, n in list(deltas.items())[:8]) or "no opcode count changes"
        summary = (f"vs stock: ours {ours.instruction_count} instructions, stock's {stock.instruction_count}; "
                   f"outside fusion bodies ours has {shown} ({counts['changed']} changed, {counts['removed']} removed, "
                   f"{counts['added']} added; hlo diff for the whole)")
    return {"stock_instructions": stock.instruction_count, "ours_instructions": ours.instruction_count,
            "opcode_deltas": deltas, "diff_counts": counts, "already_in_stock": same, "summary": summary}


def _bench_deviceless(args) -> int:
    """``hlo bench --target``: no GPU runs here, so stock XLA:GPU and the passes in
    ``--mode`` are compiled for the target and compared by model
    (``hlo_lab.study.gpu_study``): kernels, bytes and flops from our cost model,
    time from our roofline and from XLA's own GPU model."""
    from ..study import gpu_study  # lazy: the passes and analyses, ~90 ms on each hlo start (measured)

    if not args.passes:  # unknown names were refused before the command ran (cli._check_pipeline)
        print("hlo bench: --target needs --passes (e.g. --passes gpu-best)", file=sys.stderr)
        return 2
    from hlo_analysis import devices  # lazy: as above

    try:
        devices.load(args.target)  # the roofline's device: an unknown name fails before any compile
    except (OSError, ValueError) as e:
        print(f"hlo bench: --target: {e}", file=sys.stderr)
        return 2
    module = _load(args.file)  # a parse or XLA error is reported by the command line's handler
    row = gpu_study(module.name, module.to_text(), args.passes, args.target, mode=args.mode or "on-top")
    side = ("kernels", "bytes", "flops", "predicted_us", "xla_where_priced_us", "xla_priced")
    out = {"module": row.module, "target": row.target, "mode": row.mode, "passes": args.passes, "measured": False,
           "stock": {k: getattr(row.stock, k) for k in side}, "ours": {k: getattr(row.ours, k) for k in side},
           "predicted_speedup": row.predicted_speedup, "xla_where_priced_speedup": row.xla_where_priced_speedup,
           "fusions_written": row.fusions_written, "fusions_kept": row.kept}
    if args.json:
        print(json.dumps(out, indent=2))
        return 0 if row.kept else 1
    print(f"{row.module}: XLA:GPU {row.target} compiled here without a GPU (nothing ran): stock vs {args.passes} "
          f"({row.mode} mode). Bytes and flops: our cost model on both sides; time: our roofline, and XLA's own "
          f"estimates for the kernels it priced, ours for the rest (XLA prices before our passes run: "
          f"the fusions we wrote are ours)")
    print(f"{'':22}{'stock':>14}{'ours':>14}")
    for label, key, fmt in (("kernels", "kernels", "{:.0f}"), ("MB", "bytes", "{:.3f}"), ("GFLOP", "flops", "{:.4f}"),
                            ("predicted us", "predicted_us", "{:.1f}"), ("XLA-where-priced us", "xla_where_priced_us", "{:.1f}"),
                            ("kernels XLA priced", "xla_priced", "{:.0f}")):
        scale = 1e-6 if key == "bytes" else 1e-9 if key == "flops" else 1
        a, b = getattr(row.stock, key) * scale, getattr(row.ours, key) * scale
        print(f"{label:22}{fmt.format(a):>14}{fmt.format(b):>14}")
    print(f"predicted speedup {row.predicted_speedup:.3f} (XLA's estimates where it priced: "
          f"{row.xla_where_priced_speedup:.3f}); "
          f"fusions kept by XLA:GPU: {'yes' if row.kept else 'no'}")
    return 0 if row.kept else 1


def _cmd_history(args) -> int:
    if args.trend and not args.module:
        print("hlo history: --trend needs --module M (a module's trend over XLA versions)", file=sys.stderr)
        return 2
    rows = history(args.db, limit=args.limit, module=args.module)
    if args.json and args.trend:
        print(json.dumps(trend(args.module, args.db), indent=2))
        return 0
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    if not rows:
        print("no results yet")
        return 0
    if args.module:
        _print_trend(args.module, args.db)
        if args.trend:
            return 0
    from rich.table import Table

    con = stdout_console()
    wide = con.width >= 140  # at 80 columns: the columns that matter, none wrapped into one letter a line
    cols = ["id", "module", "passes", "B pipeline", "A", "B", "speedup", "outputs"]
    if wide:
        cols[1:1] = ["created"]
        cols[4:4] = ["backend"]
        cols += ["p10-p90", "git"]
    t = Table(box=None, header_style="bold underline", padding=(0, 1, 0, 0), pad_edge=False)
    for c in cols:
        if c in ("module", "passes"):
            t.add_column(c, overflow="ellipsis", no_wrap=True, min_width=len(c), max_width=None if wide else 16)
        else:
            t.add_column(c, no_wrap=True, min_width=len(c),
                         justify="right" if c in ("id", "A", "B", "speedup", "p10-p90") else "left")
    noisy = False
    for r in rows:
        p10, p90, sp = r.get("speedup_p10"), r.get("speedup_p90"), r.get("speedup")
        noise = within_noise(p10, p90)
        noisy |= noise
        cell = {"id": str(r["id"]), "created": (r.get("created") or "").replace("T", " ")[:16],
                "module": r.get("module") or "", "passes": r.get("passes") or "-", "backend": r.get("backend") or "",
                "B pipeline": r.get("pipeline_b") or "-", "A": fmt_us(r.get("a_median_us")), "B": fmt_us(r.get("b_median_us")),
                "speedup": "-" if sp is None else f"{sp:.3f}x" + ("~" if noise else ""),
                "outputs": r.get("verdict") or "", "git": (r.get("git_commit") or "")[:8],
                "p10-p90": "-" if p10 is None or p90 is None else f"{p10:.2f}-{p90:.2f}"}
        t.add_row(*[cell[c] for c in cols])
    con.print(t)
    con.print("A, B: median run times (A: the module as given, B: the rewrite under B pipeline); speedup A/B"
              + ("; ~ within noise: its p10-p90 range spans 1.0" if noisy else ""))
    return 0


def _print_trend(module: str, db) -> None:
    """``module`` over XLA versions: the latest row of each side, oldest version first."""
    rows = trend(module, db)
    print(f"{module} over XLA versions (latest run of each; `hlo regress` and `hlo bench` rows):")
    print(f"  {'side':34} {'jaxlib':10} {'measured':>10} {'p10-p90':>21} {'predicted':>10} {'vs first':>9} runs")
    first = next((r.get("a_median_us") for r in rows if r.get("a_median_us")), None)
    for r in rows:
        med = r.get("a_median_us")
        rel = f"{med / first - 1:+.1%}" if med and first else "-"
        spread = f"{fmt_us(r.get('a_p10_us'))}-{fmt_us(r.get('a_p90_us'))}" if r.get("a_p10_us") else "-"
        print(f"  {(r.get('side') or r.get('jaxlib') or '?')[:34]:34} {r.get('jaxlib') or '?':10} {fmt_us(med):>10} "
              f"{spread:>21} {fmt_us(r.get('predicted_us')) if r.get('predicted_us') else '-':>10} {rel:>9} "
              f"{r['runs']}")
    print()


def _common(p, *, pipeline: bool = True) -> None:
    p.add_argument("--backend", default="cpu", choices=["cpu", "gpu"])
    if pipeline:
        p.add_argument("--pipeline", default="stock", choices=list(PIPELINES))
    p.add_argument("--xla-flag", action="append", metavar="--xla_name=value",
                   help="an XLA debug option (repeatable), e.g. --xla-flag=--xla_cpu_use_thunk_runtime=false")


def register(subparsers) -> None:
    c = subparsers.add_parser("compile", help="compile a module with XLA (stock or as-written); print its figures")
    c.add_argument("file")
    _common(c)
    c.add_argument("--target", help="compile XLA:GPU for this GPU without one (h100, h200, a100, b200, or a .txtpb)")
    c.add_argument("--dump-optimized", metavar="OUT", help="write XLA's optimized module here")
    c.add_argument("--dump-dir", help="XLA dumps every pass here (--xla_dump_to)")
    c.add_argument("--json", action="store_true", help="the figures as JSON (XLA's cost keys with readable names)")
    c.add_argument("-q", "--quiet", action="store_true", help="no progress line")
    c.set_defaults(func=_cmd_compile)

    r = subparsers.add_parser("run", help="compile and run a module on deterministic inputs; print output stats")
    r.add_argument("file")
    _common(r)
    r.add_argument("--seed", type=seed, default=0)
    r.add_argument("--json", action="store_true", help="each output's dtype, shape, min, max and mean as JSON")
    r.add_argument("-q", "--quiet", action="store_true", help="no progress line")
    r.set_defaults(func=_cmd_run)

    k = subparsers.add_parser("compare", help="run A and B on the same inputs; exit 0 if they agree, 1 if not, 2 on errors")
    k.add_argument("a")
    k.add_argument("b")
    _common(k, pipeline=False)
    k.add_argument("--pipeline-a", default="stock", choices=list(PIPELINES))
    k.add_argument("--pipeline-b", default="stock", choices=list(PIPELINES))
    k.add_argument("--seed", type=seed, default=0)
    k.add_argument("--json", action="store_true", help="the verdict and each output's errors as JSON")
    k.add_argument("-q", "--quiet", action="store_true", help="no progress line")
    k.set_defaults(func=_cmd_compare)

    b = subparsers.add_parser("bench", help="time the original (stock) against the rewrite, interleaved; the rewrite's "
                                            "pipeline follows the passes (the output says which and why)")
    b.add_argument("file")
    _common(b, pipeline=False)
    b.add_argument("--passes", help="comma-separated Python passes that make the rewrite (`hlo opt --list` lists "
                                    "them; e.g. dce,cse,simplify or producer-consumer-fusion,dce)")
    b.add_argument("--against", metavar="FILE", help="an already rewritten module to time instead")
    add_load(b)
    b.add_argument("--hook", choices=[s.value for s in HookStage],
                   help="run --passes inside XLA's pipeline at this stage instead of on the file "
                        "(fusion pipelines: --hook pre-scheduler)")
    b.add_argument("--pipeline-a", default="stock", choices=list(PIPELINES))
    b.add_argument("--pipeline-b", default=None, choices=list(PIPELINES),
                   help="B's pipeline (default: follows the passes: stock for cleanup passes, as-written with "
                        "--hook for fusion passes; as-written without --passes)")
    b.add_argument("--vs-stock", action="store_true",
                   help="also diff XLA's optimized stock module against ours: does stock XLA already do this?")
    b.add_argument("-q", "--quiet", action="store_true", help="no progress line")
    b.add_argument("--target", help="no GPU here: compile XLA:GPU for this GPU (h100, h200...) and compare stock "
                                    "with --passes by model, not by time")
    b.add_argument("--mode", choices=list(FUSION_MODES),
                   help="with --target: how the passes run inside XLA:GPU (default on-top; docs/xla_gpu_modes.md)")
    b.add_argument("--json", action="store_true")
    b.add_argument("--reps", type=at_least_one, default=50)
    b.add_argument("--warmup", type=int, default=5)
    b.add_argument("--db", help="results database (default ~/.cache/hlo-pass-lab/results.db)")
    b.add_argument("--no-record", action="store_true", help="do not write the result to the database")
    b.set_defaults(func=_cmd_bench)

    h = subparsers.add_parser("history", help="recent benchmark results from the database")
    h.add_argument("--db")
    h.add_argument("--limit", type=at_least_one, default=20)
    h.add_argument("--module", help="one module's rows, after its trend over XLA versions")
    h.add_argument("--trend", action="store_true", help="with --module: only its trend over XLA versions")
    h.add_argument("--json", action="store_true")
    h.set_defaults(func=_cmd_history)
