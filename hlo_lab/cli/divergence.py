"""``hlo divergence A B``: the command line of ``hlo_lab.debug.divergence``."""

from __future__ import annotations

import json

from .. import progress
from .args import at_least_one, non_negative, seed
from .inputs import load_verified


def _cmd(args) -> int:

    from ..debug.divergence import first_divergence  # lazy: the bridge and numpy, ~50 ms on each hlo start

    a, b = load_verified(args.a), load_verified(args.b)
    with progress.line("reading values (batches)", progress.wanted(args), counts=True) as update:
        d = first_divergence(a, b, pipeline_a=args.pipeline_a, pipeline_b=args.pipeline_b, seed=args.seed,
                             rtol=args.rtol, atol=args.atol, progress=lambda done, total: update(done=done, total=total),
                             **({"batch": args.batch} if args.batch else {}))
    if args.json:
        print(json.dumps(d.as_dict(), indent=1))
    elif args.quiet:
        print(d.summary_line() if d.found else
              ("outputs differ, no intermediate divergence" if d.outputs_differ else "no divergence"))
    else:
        print(d.report())
    return d.exit_code


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "divergence", help="run A and B on the same inputs; find the first instruction whose value differs "
                           "(exit 1: found, 0: all agree, 2: cannot compile/run)")
    p.add_argument("a", help="the reference module")
    p.add_argument("b", help="the module to check against it")
    p.add_argument("--pipeline-a", default="stock", choices=["stock", "as-written"])
    p.add_argument("--pipeline-b", default="stock", choices=["stock", "as-written"])
    p.add_argument("--seed", type=seed, default=0, help="inputs: xla_bridge.make_inputs(A, seed)")
    p.add_argument("--rtol", type=non_negative, help="relative tolerance (default: per dtype, xla_run.TOLERANCES)")
    p.add_argument("--atol", type=non_negative, help="absolute tolerance, scaled by max(1, max|A|) (default: per dtype)")
    p.add_argument("--batch", type=at_least_one,
                   help="values read per compile of A and B (default: divergence.DEFAULT_BATCH, 500)")
    p.add_argument("--json", action="store_true")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar; print only the first_divergence line")
    p.set_defaults(func=_cmd)
