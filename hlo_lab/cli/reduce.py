"""``hlo reduce FILE --until ...``: shrink a module while it still shows a
failure, and write the smallest one found.  Light at import (``hlo`` starts on
every call): the reducer, the passes and the XLA bridge load inside ``_cmd_reduce``."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Callable

from hlo_tools.fileio import check_writable, write_output

from .. import progress
from .args import PipelineError, add_load, at_least_one, non_negative, positive_seconds, regex, seed, user_pipeline
from .inputs import load_verified


def _predicate(args: argparse.Namespace):
    """The predicate the options name (built on the module for ``--until-abort``,
    which must know the message to keep)."""
    from ..debug.reduce import predicates  # lazy: it reaches the XLA bridge and the passes when called

    if args.until is not None:
        return lambda module: predicates.shell(args.until, timeout=args.test_timeout)
    if args.until_abort:
        return lambda module: predicates.aborts_like(module, pipeline=args.pipeline, backend=args.backend,
                                                     match=args.match)
    if args.until_differ:
        return lambda module: predicates.outputs_differ(pipeline_a=args.pipeline_a, pipeline_b=args.pipeline_b,
                                                        passes=args.passes, backend=args.backend, seed=args.seed)
    if args.until_slower:
        return lambda module: predicates.still_slower(args.until_slower, backend=args.backend, margin=args.margin,
                                                      reps=args.reps)
    return lambda module: predicates.pass_fires(args.until_fires)


def _reporting(update) -> Callable[[str, int, int], None]:
    """The reducer's ``progress(phase, tests, instructions)`` as one status line
    with the smallest size reached so far."""
    smallest = [0]

    def note(phase: str, tests: int, instructions: int) -> None:
        if instructions >= 0 and (not smallest[0] or instructions < smallest[0]):
            smallest[0] = instructions
        update(f"reduce: {phase}, {tests} tests, smallest {smallest[0]} instructions")

    return note


def _summary(d: dict, predicate: str, out: str | None) -> str:
    lines = [f"{d['module']}: {d['original_instructions']} -> {d['instructions']} instructions "
             f"({d['original_computations']} -> {d['computations']} computations) in {d['tests']} tests "
             f"({d['cached']} answered from the cache, {d['invalid']} invalid candidates), {d['seconds']} s",
             f"kept true: {predicate}"]
    if d["stopped"]:
        lines.append(f"stopped early ({d['stopped']}): the module is the smallest found so far")
    if out:
        lines.append(f"reduced module: {out}")
    return "\n".join(lines)


def _cmd_reduce(args) -> int:

    from ..debug.reduce.predicates import NothingToReduce  # lazy: as above
    from ..debug.reduce.reducer import reduce_module  # lazy: as above

    if args.output:
        check_writable(args.output)  # before any predicate runs
    spec = args.until_fires or args.until_slower or (args.passes if args.until_differ else None)
    if spec or args.load:
        try:
            user_pipeline(args.load, spec or "dce")  # --load files registered, unknown names refused, before any test
        except PipelineError as e:
            print(f"hlo reduce: {e}", file=sys.stderr)
            return e.status
    module = load_verified(args.file)
    try:
        with progress.line("reduce", progress.wanted(args)) as update:
            predicate = _predicate(args)(module)
            result = reduce_module(module, predicate, max_tests=args.max_tests, seconds=args.seconds,
                                   progress=_reporting(update))
    except NothingToReduce as e:
        print(f"hlo reduce: {args.file}: {e}", file=sys.stderr)
        return 1
    d = result.as_dict()
    text = result.module.to_text()
    if args.output:
        write_output(args.output, text)
    description = getattr(predicate, "description", "the predicate")
    if args.json:
        print(json.dumps({**d, "predicate": description, "output": args.output,
                          **({} if args.output else {"hlo": text})}, indent=1))
    elif args.output:
        print(_summary(d, description, args.output))
    else:
        sys.stdout.write(text)
        if not args.quiet:
            print(_summary(d, description, None), file=sys.stderr)
    return 0




def register(subparsers) -> None:
    r = subparsers.add_parser(
        "reduce", help="shrink a module while a failure still shows (delta debugging on instructions and fusion "
                       "bodies; every candidate a valid module)",
        description="Delta debugging: drops entry instructions (a value dropped but still used becomes a parameter), "
                    "then instructions of each fusion body, then inlines fusions, while the predicate holds.")
    r.add_argument("file")
    until = r.add_mutually_exclusive_group(required=True)
    until.add_argument("--until", metavar="CMD", help="a shell command that exits 0 while the candidate still fails; "
                                                       "{} is its file (else appended; also $HLO_REDUCE_FILE)")
    until.add_argument("--until-abort", action="store_true", help="XLA still aborts with the same message")
    until.add_argument("--until-differ", action="store_true",
                       help="outputs under --pipeline-a and --pipeline-b (after --passes) still differ")
    until.add_argument("--until-fires", metavar="PASSES", help="our pass pipeline still changes the module")
    until.add_argument("--until-slower", metavar="PASSES",
                       help="our pass pipeline still makes the module slower than stock XLA (measured, outputs equal; "
                            "fusion passes at the hook, as hlo upstream measures)")
    r.add_argument("--margin", type=non_negative, default=0.1,
                   help="--until-slower: by at least this fraction (default 0.1), with the p90 below 1")
    r.add_argument("--reps", type=at_least_one, default=30, help="--until-slower: interleaved pairs per candidate")
    r.add_argument("--pipeline", default="as-written", choices=["stock", "replace", "as-written"],
                   help="--until-abort: the XLA pipeline that aborts (default as-written)")
    r.add_argument("--match", metavar="REGEX", type=regex, help="--until-abort: any abort whose message REGEX finds, not only the same one")
    r.add_argument("--pipeline-a", default="stock", choices=["stock", "replace", "as-written"])
    r.add_argument("--pipeline-b", default="as-written", choices=["stock", "replace", "as-written"])
    r.add_argument("--passes", help="--until-differ: B is the module after these passes of ours (text route)")
    r.add_argument("--backend", default="cpu", choices=["cpu", "gpu"])
    add_load(r)
    r.add_argument("--seed", type=seed, default=0, help="--until-differ: the inputs' seed")
    r.add_argument("--max-tests", type=at_least_one, help="stop after this many predicate calls (keep the smallest so far)")
    r.add_argument("--seconds", type=positive_seconds, help="stop after this long (keep the smallest so far)")
    r.add_argument("--test-timeout", type=positive_seconds, default=300.0,
                   help="--until: a command running longer than this (default 300 s) counts as not failing")
    r.add_argument("-o", "--output", help="write the reduced module here (atomically); else it goes to stdout")
    r.add_argument("--json", action="store_true", help="the summary as JSON (with the module's text when no -o)")
    r.add_argument("-q", "--quiet", action="store_true", help="no progress, no summary on stderr")
    r.set_defaults(func=_cmd_reduce)
