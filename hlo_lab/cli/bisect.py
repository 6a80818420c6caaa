"""``hlo bisect``: the command line of ``hlo_lab.debug.bisect``."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from xla_bridge.hook_stage import HookStage

from .args import PipelineError, add_load, non_negative, seed, user_pipeline
from .inputs import load_verified


def register(sub) -> None:
    p = sub.add_parser("bisect", help="the first pass, then the first decision in it, that makes a module fail "
                                      "(outputs differ from the reference, or XLA aborts)",
                       description="Bisects our pipeline (--passes) or XLA's (--xla): prefixes of the pipeline are "
                                   "compiled and run against the reference; then the culprit pass's decisions, "
                                   "with compiler fuel.  Prints first_bad_pass=NAME and first_bad_decision=N.")
    p.add_argument("file")
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--passes", help="our pipeline, e.g. dce,cse,producer-consumer-fusion")
    what.add_argument("--xla", action="store_true", help="bisect XLA's own pipeline (its stock compile)")
    add_load(p)
    p.add_argument("--backend", default="cpu", choices=["cpu", "gpu"])
    p.add_argument("--pipeline", choices=["stock", "as-written", "replace"],
                   help="how our passes' result is compiled (default: as-written when a fusion pass is in "
                        "--passes, so XLA keeps its fusions; else stock)")
    p.add_argument("--hook", choices=[s.value for s in HookStage],
                   help="run our passes inside XLA's pipeline at this stage instead (e.g. pre-scheduler)")
    p.add_argument("--reference", choices=["stock", "as-written"],
                   help="what the outputs are checked against (default: stock for --passes, as-written for --xla)")
    p.add_argument("--seed", type=seed, default=0)
    p.add_argument("--rtol", type=non_negative)
    p.add_argument("--atol", type=non_negative)
    p.add_argument("--xla-flag", action="append", default=[], metavar="--xla_name=value")
    p.add_argument("--same-failure", action="store_true",
                   help="a candidate fails only when it fails as the whole pipeline does (same kind; for XLA's "
                        "errors the same message, shapes and names aside), not in any way")
    p.add_argument("--pass-only", action="store_true", help="stop at the pass; do not bisect its decisions")
    p.add_argument("-o", "--output", metavar="DIR",
                   help="write bisect.json, and before.hlo / after.hlo around the culprit decision, here")
    p.add_argument("--json", action="store_true")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress lines")
    p.set_defaults(func=_cmd_bisect)


def _cmd_bisect(args) -> int:
    from hlo_tools.fileio import check_writable, write_output  # lazy, as below: hlo starts on every command

    from ..debug.bisect import bisect_passes, bisect_xla  # lazy: all of the above
    from ..debug.rewrite import default_pipeline  # lazy: as above

    if args.output:
        check_writable(args.output, directory=True)
    try:
        passes = [] if args.xla else user_pipeline(args.load, args.passes)
    except PipelineError as e:
        print(f"hlo bisect: {e}", file=sys.stderr)
        return e.status
    module = load_verified(args.file)
    flags = args.xla_flag or None
    show = None if args.quiet or args.json else _show_probe
    if args.xla:
        res = bisect_xla(module, backend=args.backend, reference=args.reference or "as-written", seed=args.seed,
                         rtol=args.rtol, atol=args.atol, flags=flags, decisions=not args.pass_only, progress=show)
    else:
        if show is not None and args.pipeline is None and args.hook is None:
            how = default_pipeline(passes)
            why = "a fusion pass is in --passes: XLA keeps our fusions" if how == "as-written" else "no fusion pass"
            print(f"candidates compiled {how} ({why}); reference: {args.reference or 'stock'}", file=sys.stderr)
        res = bisect_passes(module, passes, backend=args.backend, pipeline=args.pipeline, hook=args.hook,
                            reference=args.reference or "stock", seed=args.seed, rtol=args.rtol, atol=args.atol,
                            flags=flags, decisions=not args.pass_only, same_failure=args.same_failure,
                            progress=show)
    if args.output:
        out = Path(args.output)
        write_output(out / "bisect.json", json.dumps(res.as_dict(), indent=1) + "\n")
        if res.before is not None:
            write_output(out / "before.hlo", res.before.to_text())
            write_output(out / "after.hlo", res.after.to_text())
    if args.json:
        print(json.dumps(res.as_dict(), indent=1))
    else:
        _print(res)
    return 0 if res.first_bad_pass is not None else 1


def _show_probe(p) -> None:
    verdict = f"FAILS ({p.kind}: {p.message[:100]})" if p.failed else "ok"
    print(f"  {p.what}: {verdict} [{p.seconds:.1f} s]", file=sys.stderr)


def _print(res) -> None:
    print(f"{res.module}: {res.route} pipeline ({', '.join(res.passes) if len(res.passes) <= 8 else f'{len(res.passes)} passes'}), "
          f"candidates compiled {res.pipeline}, reference {res.reference}; {len(res.probes)} probes in {res.seconds:.1f} s")
    if res.failure is None:
        print("the full pipeline does not fail: outputs match the reference; nothing to bisect")
        return
    print(f"failure: {res.failure.kind}: {res.failure.message}")
    if res.first_bad_pass is None:
        if res.route != "ours":
            print("no single XLA pass whose disabling removes the failure")
        elif res.base != res.reference:  # XLA's fusion off alone moved the outputs (bf16 rounding)
            print(f"no single pass found: the module fails with no pass run, compiled {res.pipeline} against "
                  f"{res.reference}: XLA's pipelines alone differ; --reference {res.base} bisects the passes "
                  "against that baseline")
        else:
            print("no single pass found: the module fails with no pass run")
        return
    print(f"first_bad_pass={res.first_bad_pass}")
    if len(res.culprits) > 1:
        print(f"culprits={','.join(res.culprits)}")
    if res.first_bad_decision is not None:
        total = f" of {res.decisions}" if res.decisions else ""
        print(f"first_bad_decision={res.first_bad_decision}{total}: {res.decision}")
        if res.decision_as_written:
            print("  as written: " + "; ".join(res.decision_as_written))
    elif res.note:
        print(f"decisions not bisected: {res.note}")
