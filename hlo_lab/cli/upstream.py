"""``hlo upstream``: the command line of ``hlo_lab.debug.upstream``."""

from __future__ import annotations

import json
import sys

from .args import PipelineError, add_load, at_least_one, positive_seconds, user_pipeline
from .inputs import load_verified


def register(sub) -> None:
    p = sub.add_parser("upstream", help="a bundle a reviewer can read, from a validated rewrite: reduced before/after "
                                        "HLO, an XLA-style FileCheck test, the measured table, the pass's source",
                       description="Measures --passes on FILE against stock XLA (outputs must match), reduces the "
                                   "module the passes see while they still change it, and writes the bundle to -o.")
    p.add_argument("file")
    p.add_argument("--passes", required=True, help="the rewrite, e.g. producer-consumer-fusion,dce")
    add_load(p)
    p.add_argument("-o", "--output", required=True, metavar="DIR", help="the bundle's folder")
    p.add_argument("--backend", default="cpu", choices=["cpu"])
    p.add_argument("--reps", type=at_least_one, default=50, help="interleaved stock/ours pairs (default 50)")
    p.add_argument("--seconds", type=positive_seconds, default=120.0, help="time for the reduction (default 120)")
    p.add_argument("--json", action="store_true")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress lines")
    p.set_defaults(func=_cmd_upstream)


def _cmd_upstream(args) -> int:
    from hlo_tools.fileio import check_writable  # lazy, as below: hlo starts on every command

    from ..debug.upstream import UpstreamError, make_bundle, verdict  # lazy: the reducer, passes and bridge

    check_writable(args.output, directory=True)
    try:
        passes = user_pipeline(args.load, args.passes)
    except PipelineError as e:
        print(f"hlo upstream: {e}", file=sys.stderr)
        return e.status
    module = load_verified(args.file)
    say = None if args.quiet or args.json else (lambda msg: print(msg, file=sys.stderr))
    try:
        bundle = make_bundle(module, passes, args.passes, args.output, backend=args.backend, reps=args.reps,
                             seconds=args.seconds, progress=say)
    except UpstreamError as e:
        print(f"hlo upstream: {e}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(bundle.as_dict(), indent=1))
        return 0
    print(f"{args.output}: {', '.join(bundle.files)}")
    print(f"stock {bundle.stock_us:.1f} us, ours {bundle.ours_us:.1f} us: speedup {bundle.speedup:.3f} "
          f"(p10-p90 {bundle.speedup_p10:.3f}-{bundle.speedup_p90:.3f}), outputs {bundle.outputs}. "
          f"{verdict(bundle.speedup_p10, bundle.speedup_p90)}")
    print(f"reduced {bundle.original_instructions} -> {bundle.reduced_instructions} instructions in "
          f"{bundle.reduce_seconds:.1f} s (outputs {bundle.reduced_outputs}); {bundle.checks} CHECK lines")
    return 0
