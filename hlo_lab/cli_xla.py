"""``hlo compile | run | compare | bench | history``: thin commands over
``xla_compile``, ``xla_run``, ``xla_bridge.Measurement`` and ``xla_results``."""

from __future__ import annotations

import json
import sys

import numpy as np

from hlo_tools.errors import HloError, HloParseError
from hlo_tools.fileio import check_writable, write_output
from xla_bridge import load
from xla_bridge.errors import XlaCompileError
from xla_bridge.hook_stage import HookStage
from xla_bridge.measure import FUSION_MODES, Measurement, Pipeline
from xla_bridge.xla_compile import PIPELINES, compile
from xla_bridge.xla_results import history, record
from xla_bridge.xla_run import compare, run_module

from .cli_args import add_load


def _load(path: str):
    return load(path)


def _flags(args) -> list[str]:
    return list(getattr(args, "xla_flag", None) or [])


def _cmd_compile(args) -> int:
    if args.dump_optimized:
        check_writable(args.dump_optimized)  # before compiling: a bad path fails at once
    if args.dump_dir:
        check_writable(args.dump_dir, directory=True)
    try:
        res = compile(_load(args.file), args.backend, args.pipeline, flags=_flags(args), target=args.target,
                      dump_dir=args.dump_dir, contained=True)
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
    info = {"module": res.module_name, "backend": res.backend, "device": res.device, "pipeline": res.pipeline,
            "compile_seconds": round(res.compile_seconds, 4), "instructions": res.optimized_module.instruction_count,
            "fusions": kinds, "cost": res.cost, "memory": res.memory}
    if args.json:
        print(json.dumps(info, indent=2))
    else:
        how = "XLA's optimized module handed over as written" if res.handed_over else res.pipeline
        print(f"{res.module_name}: XLA:{res.backend} ({res.device}) {how} in {res.compile_seconds:.3f} s; "
              f"{info['instructions']} instructions, fusions {kinds or 'none'}")
        if res.cost:
            print("cost: " + ", ".join(f"{k} {v:,.0f}" for k, v in sorted(res.cost.items()) if "{" not in k))
        if res.memory:
            print("memory: " + ", ".join(f"{k.removesuffix('_in_bytes')} {v:,}" for k, v in res.memory.items() if v))
    return 0


def _cmd_run(args) -> int:
    try:
        module = _load(args.file)
        outs = run_module(module, backend=args.backend, pipeline=args.pipeline, flags=_flags(args), seed=args.seed,
                          contained=True)
    except HloParseError as e:
        print(e.format(), file=sys.stderr)
        return 2
    except (XlaCompileError, HloError, ValueError) as e:
        print(f"hlo run: {e}", file=sys.stderr)
        return 2
    for i, o in enumerate(outs):
        f = np.asarray(o, dtype=np.float64) if o.dtype.kind != "c" else np.abs(o)
        stats = f"min {f.min():.6g} max {f.max():.6g} mean {f.mean():.6g}" if f.size else "empty"
        print(f"output {i}: {o.dtype.name}{list(o.shape)} {stats}")
    return 0


def _cmd_compare(args) -> int:
    try:
        cmp = compare(_load(args.a), _load(args.b), backend=args.backend, pipeline_a=args.pipeline_a,
                      pipeline_b=args.pipeline_b, flags=_flags(args), seed=args.seed, contained=True)
    except HloParseError as e:
        print(e.format(), file=sys.stderr)
        return 2
    except (XlaCompileError, HloError, ValueError) as e:
        print(f"hlo compare: {e}", file=sys.stderr)
        return 2
    print(cmp)
    return 0 if cmp.ok else 1


def _pipeline(spec: str) -> list:
    """The passes named in ``spec``; an unknown name is a ValueError naming the
    known ones, raised before anything is compiled."""
    from passes.fusion.pipeline import passes_of  # lazy: every pass module and the analyses they use, ~90 ms on each hlo start (measured)

    try:
        return passes_of(spec)
    except KeyError as e:
        raise ValueError(e.args[0]) from None  # it lists the known names


def _apply_passes(module, pipeline: list):
    from passes import PassManager  # lazy: every pass module and the analyses they use, ~90 ms on each hlo start (measured)

    rewritten = module.clone()
    PassManager(pipeline).run(rewritten)
    return rewritten


def _cmd_bench(args) -> int:
    """The original under ``--pipeline-a`` (A) against B: the rewrite under
    ``--pipeline-b``, or with ``--hook`` the original under ``--pipeline-b`` with
    the passes run at that stage of XLA's pipeline (how fusion pipelines are
    measured: they then see XLA's layout-assigned, unfused module).  All of it
    runs in the XLA worker, so the passes go there (by name, as pickled Pass
    objects) and the module they left comes back."""
    if args.target:
        return _bench_deviceless(args)
    if args.mode:
        print("hlo bench: --mode needs --target (the GPU study compiled without a GPU)", file=sys.stderr)
        return 2
    try:
        if args.hook and not args.passes:
            raise ValueError("--hook needs --passes (the passes to run inside XLA's pipeline)")
        pipeline = _pipeline(args.passes) if args.passes else []
        original = _load(args.file)
        measurement = Measurement(args.backend, flags=_flags(args), contained=True)
        pipeline_a, pipeline_b = Pipeline(args.pipeline_a), Pipeline(args.pipeline_b)
        if args.hook:
            from passes import PassManager  # lazy: every pass module and the analyses they use, ~90 ms on each hlo start (measured)

            pipeline_b = pipeline_b.hooked(PassManager(pipeline), HookStage(args.hook))
            rewritten = original
        elif args.against:
            rewritten = _load(args.against)
        elif args.passes:
            rewritten = _apply_passes(original, pipeline)
        else:
            rewritten = original
        res = measurement.benchmark(original, rewritten, pipeline_a, pipeline_b, reps=args.reps, warmup=args.warmup)
        if args.hook and res.hook_b.after is not None:
            rewritten = res.hook_b.after
    except HloParseError as e:
        print(e.format(), file=sys.stderr)
        return 2
    except (XlaCompileError, HloError, ValueError) as e:
        print(f"hlo bench: {e}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps({"a_median_us": res.a.median_us, "b_median_us": res.b.median_us if res.b else None,
                          "speedup": res.speedup, "speedup_p10": res.speedup_p10, "speedup_p90": res.speedup_p90,
                          "outputs": res.verdict, "backend": res.backend, "device": res.device,
                          "pipeline_a": res.pipeline_a, "pipeline_b": res.pipeline_b, "reps": res.reps}, indent=2))
    else:
        print(res.table())
    if not args.no_record:
        row = record(res, module_text=original.to_text(), rewritten_text=rewritten.to_text(), passes=args.passes or "",
                     db=args.db)
        print(f"recorded as row {row} in {args.db or 'the default results db'}")
    return 0 if res.verdict in ("exact", "close", "unchecked") else 1


def _bench_deviceless(args) -> int:
    """``hlo bench --target``: no GPU runs here, so stock XLA:GPU and the passes in
    ``--mode`` are compiled for the target and compared by model
    (``hlo_lab.study.gpu_study``): kernels, bytes and flops from our cost model,
    time from our roofline and from XLA's own GPU model."""
    from .study import gpu_study  # lazy: the passes and analyses, ~90 ms on each hlo start (measured)

    if not args.passes:  # unknown names were refused before the command ran (cli._unknown_pass)
        print("hlo bench: --target needs --passes (e.g. --passes gpu-best)", file=sys.stderr)
        return 2
    from fusion_analysis import devices  # lazy: as above

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
    rows = history(args.db, limit=args.limit, module=args.module)
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    if not rows:
        print("no results yet")
        return 0
    cols = ["id", "created", "module", "passes", "backend", "pipeline_b", "a_median_us", "b_median_us", "speedup",
            "verdict", "git_commit"]

    def cell(r, c):
        v = r.get(c)
        return f"{v:.3f}" if isinstance(v, float) else ("" if v is None else str(v))

    table = [cols] + [[cell(r, c) for c in cols] for r in rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(cols))]
    for row in table:
        print("  ".join(v.ljust(w) for v, w in zip(row, widths)))
    return 0


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
    c.add_argument("--json", action="store_true")
    c.set_defaults(func=_cmd_compile)

    r = subparsers.add_parser("run", help="compile and run a module on deterministic inputs; print output stats")
    r.add_argument("file")
    _common(r)
    r.add_argument("--seed", type=int, default=0)
    r.set_defaults(func=_cmd_run)

    k = subparsers.add_parser("compare", help="run A and B on the same inputs; exit 0 if they agree, 1 if not, 2 on errors")
    k.add_argument("a")
    k.add_argument("b")
    _common(k, pipeline=False)
    k.add_argument("--pipeline-a", default="stock", choices=list(PIPELINES))
    k.add_argument("--pipeline-b", default="stock", choices=list(PIPELINES))
    k.add_argument("--seed", type=int, default=0)
    k.set_defaults(func=_cmd_compare)

    b = subparsers.add_parser("bench", help="time the original (stock) against the rewrite (as-written), interleaved")
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
    b.add_argument("--pipeline-b", default="as-written", choices=list(PIPELINES))
    b.add_argument("--target", help="no GPU here: compile XLA:GPU for this GPU (h100, h200...) and compare stock "
                                    "with --passes by model, not by time")
    b.add_argument("--mode", choices=list(FUSION_MODES),
                   help="with --target: how the passes run inside XLA:GPU (default on-top; docs/xla_gpu_modes.md)")
    b.add_argument("--json", action="store_true")
    b.add_argument("--reps", type=int, default=50)
    b.add_argument("--warmup", type=int, default=5)
    b.add_argument("--db", help="results database (default ~/.cache/hlo-pass-lab/results.db)")
    b.add_argument("--no-record", action="store_true", help="do not write the result to the database")
    b.set_defaults(func=_cmd_bench)

    h = subparsers.add_parser("history", help="recent benchmark results from the database")
    h.add_argument("--db")
    h.add_argument("--limit", type=int, default=20)
    h.add_argument("--module")
    h.add_argument("--json", action="store_true")
    h.set_defaults(func=_cmd_history)
