"""``hlo xla add|list`` (XLA versions side by side) and ``hlo regress`` (what two
versions decide on the same modules, region by region): thin commands over
``xla_bridge.versions`` and ``hlo_lab.regress``."""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys

from hlo_tools.fileio import check_writable, write_output
from xla_bridge import versions
from xla_bridge.compiler import parse_flags
from xla_bridge.sides import Side

from .. import progress
from .inputs import note_skipped
from .args import at_least_one, gpu_target, non_negative


def _cmd_xla(args) -> int:
    if args.xla_cmd == "add":
        say = (lambda _s: None) if args.json else print
        v = versions.add(args.version, say=say)
        if args.json:
            print(json.dumps(v.as_dict(), indent=1))
        return 0
    found = versions.installed()
    if args.json:
        print(json.dumps([v.as_dict() for v in found], indent=1))
        return 0
    for i, v in enumerate(found):
        where = "this environment" if v.python is None else v.path
        print(f"{v.version:12} {'GPU deviceless' if v.gpu else 'CPU only      '}  {where}")
    print(f"(environments in {versions.versions_dir()}; add one with `hlo xla add VERSION`)")
    return 0


def _sides(args) -> tuple[Side, Side]:
    names = [v.strip() for v in args.versions.split(",")]
    if len(names) != 2 or not all(names):
        raise versions.VersionError(f"--versions takes two versions, A,B (e.g. 0.11.2,0.12.0.1), not {args.versions!r}")
    for f in (args.xla_flag_a or []) + (args.xla_flag_b or []):
        parse_flags([f])
    sides = []
    for name, flags in zip(names, (args.xla_flag_a or [], args.xla_flag_b or [])):
        v = versions.lookup(name)  # VersionError (exit 2) for one not set up, before any work
        sides.append(Side("current" if v.python is None else v.version, tuple(flags)))
    return sides[0], sides[1]


def _cmd_regress(args) -> int:
    from ..regress import regress, sources  # lazy: the corpus, analysis and report modules (~100 ms)

    a, b = _sides(args)
    for out in (args.output, args.html):
        if out:
            check_writable(out)
    if args.corpus not in (None, "bundled") and not os.path.exists(os.path.join(args.corpus, "manifest.json")):
        note_skipped("regress", args.corpus)
    srcs = sources(args.corpus, args.only)
    if not srcs:
        print(f"hlo regress: no module matches {args.only!r}", file=sys.stderr)
        return 2
    target = None if args.backend == "cpu" else args.target
    command = "hlo regress " + " ".join(shlex.quote(x) for x in sys.argv[2:]) if args.command is None else args.command
    with progress.status("regress", progress.wanted(args)) as say:
        rep = regress(srcs, a, b, target=target, measure=not args.no_measure, reps=args.reps, warmup=args.warmup,
                      threshold=args.threshold / 100, db=args.db, store=not args.no_record, say=say,
                      command=command, cpu=args.backend != "gpu")
    md = rep.markdown(args.regions)
    if args.output:
        write_output(args.output, md)
    if args.html:
        write_output(args.html, rep.html(args.regions))
    if args.json:
        print(json.dumps(rep.as_dict(), indent=1))
    elif not args.output:
        sys.stdout.write(md)
    else:
        print(f"{len(rep.modules)} modules, {len(rep.moved())} moved more than {args.threshold:g}%: {args.output}")
    return 0


def register(subparsers) -> None:
    x = subparsers.add_parser("xla", help="XLA versions side by side: `add VERSION` sets one up (cached), `list`")
    xs = x.add_subparsers(dest="xla_cmd", required=True)
    xa = xs.add_parser("add", help="set up jax/jaxlib VERSION in its own environment (once; cached after)")
    xa.add_argument("version")
    xa.add_argument("--json", action="store_true")
    xl = xs.add_parser("list", help="the versions set up here (this environment's own first)")
    xl.add_argument("--json", action="store_true")
    x.set_defaults(func=_cmd_xla)

    r = subparsers.add_parser("regress", help="compile every module with two XLA versions; rank modules by change and "
                                              "name the fusion regions that changed (docs/regress.md)")
    r.add_argument("corpus", nargs="?", default=None,
                   help="the bundled corpus (default), a corpus folder, an XLA dump folder or one module file")
    r.add_argument("--versions", required=True, metavar="A,B", help="two versions set up with `hlo xla add` "
                   "(or this environment's own), e.g. 0.11.2,0.12.0.1")
    r.add_argument("--xla-flag-a", action="append", metavar="--xla_name=value", help="an extra XLA option for side A")
    r.add_argument("--xla-flag-b", action="append", metavar="--xla_name=value",
                   help="an extra XLA option for side B (e.g. --xla_disable_hlo_passes=fusion)")
    r.add_argument("--backend", default="both", choices=["cpu", "gpu", "both"],
                   help="cpu: XLA:CPU (compiled, run, timed); gpu: XLA:GPU for --target, compiled without a GPU; both (default)")
    r.add_argument("--target", type=gpu_target, default="h100", help="the GPU of the deviceless XLA:GPU compile (default h100)")
    r.add_argument("--only", metavar="PATTERN", help="only modules whose name matches (fnmatch), e.g. '*tiny*'")
    r.add_argument("--no-measure", action="store_true", help="compile and predict only; do not run or time")
    r.add_argument("--reps", type=at_least_one, default=50)
    r.add_argument("--warmup", type=int, default=3)
    r.add_argument("--threshold", type=non_negative, default=5.0, metavar="PERCENT",
                   help="explain every module whose predicted or measured time moved more than this (default 5)")
    r.add_argument("--regions", type=at_least_one, default=6, help="changed regions shown per module and backend")
    r.add_argument("-o", "--output", help="write the Markdown report here")
    r.add_argument("--html", help="write the HTML report here")
    r.add_argument("--json", action="store_true")
    r.add_argument("--db", help="results database (default ~/.cache/hlo-pass-lab/results.db)")
    r.add_argument("--no-record", action="store_true", help="do not store the measurements")
    r.add_argument("--command", help=argparse.SUPPRESS)
    r.add_argument("-q", "--quiet", action="store_true", help="no progress line")
    r.set_defaults(func=_cmd_regress)
