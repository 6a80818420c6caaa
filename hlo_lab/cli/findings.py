"""``hlo findings CORPUS -o DIR``: rules from what ``hlo tune`` wins on some model
families, each a pass, validated on the families held out (``hlo_lab.findings``)."""

from __future__ import annotations

import json
import sys

from .. import progress
from .args import at_least_one, gpu_target, positive_seconds, seed


def register(sub) -> None:
    p = sub.add_parser("findings", help="rules from hlo tune's wins on some model families, each a pass, validated on "
                                        "held-out families (measured on XLA:CPU), bundled with hlo upstream",
                       description="Tunes the training families' modules (hlo tune; a search run before is read back "
                                   "from the results database), turns the levers their winners share into rules "
                                   "(a pattern condition and a knob, a pipeline shape, or a class of edges fused or "
                                   "kept apart: producer and consumer opcode and pattern), validates each on the "
                                   "held-out families against BEST and stock, and writes findings.json/.md (the rules' pass "
                                   "file: --passes rule:DIR/findings.json#NAME) and an hlo upstream bundle per rule "
                                   "that held out.")
    p.add_argument("corpus", metavar="CORPUS", help="'corpus' (the bundled runnable modules; --only narrows them) or "
                                                    "a folder of HLO text modules (family: the file name up to its "
                                                    "first '-')")
    p.add_argument("-o", "--output", required=True, metavar="DIR")
    p.add_argument("--backend", default="cpu", choices=["cpu"], help="where rules are measured (XLA:CPU)")
    p.add_argument("--target", type=gpu_target, help="no GPU here: find rules for XLA:GPU on this GPU (h100, h200...), compiled without "
                                    "one and predicted by our roofline and XLA's GPU model; outputs checked on XLA:CPU")
    p.add_argument("--only", default="*-tiny-*", help="bundled modules to use (glob, default *-tiny-*: the runnable ones)")
    p.add_argument("--validate-on", metavar="GLOB", help="bundled held-out modules to validate on (default: --only's; "
                                                         "with --target, '*' adds the full-size ones)")
    p.add_argument("--held-out", default="gemma2,mixtral",
                   help="model families kept out of the derivation and used to validate (default gemma2,mixtral)")
    p.add_argument("--held-out-dir", metavar="DIR", help="validate on the HLO modules in DIR instead")
    p.add_argument("--budget", type=at_least_one, default=12, help="hlo tune candidates per training module (default 12)")
    p.add_argument("--reps", type=at_least_one, default=100, help="timed repetitions per tune candidate (default 100)")
    p.add_argument("--final-reps", type=at_least_one, default=200,
                   help="repetitions of each final and held-out timing (default 200)")
    p.add_argument("--min-support", type=at_least_one, default=2,
                   help="winners that must share a lever for it to become a rule (default 2)")
    p.add_argument("--seed", type=seed, default=0)
    p.add_argument("--db", help="results database (default ~/.cache/hlo-pass-lab/results.db)")
    p.add_argument("--no-upstream", action="store_true", help="no hlo upstream bundles")
    p.add_argument("--upstream-seconds", type=positive_seconds, default=60.0,
                   help="time for each bundle's reduction (default 60)")
    p.add_argument("--json", action="store_true")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress line")
    p.set_defaults(func=_cmd_findings)


def _cmd_findings(args) -> int:
    from hlo_tools.fileio import check_writable, write_output  # lazy: hlo starts on every command

    from passes.fusion.rules import base_name  # lazy: as below

    from .. import findings as F  # lazy: the tuner, the passes and the bridge

    check_writable(args.output, directory=True)
    held_families = [f.strip() for f in args.held_out.split(",") if f.strip()]
    if args.corpus == "corpus":
        train, _ = F.split(F.corpus_modules(args.only), held_families)
        _, held = F.split(F.corpus_modules(args.validate_on or args.only, runnable_only=not args.target), held_families)
    else:
        train, held = F.split(F.folder_modules(args.corpus), held_families)
    modules = train + held
    if args.held_out_dir:  # validated on the user's modules; no family of theirs (or --held-out's) is derived from
        held = F.folder_modules(args.held_out_dir)
        train = [m for m in train if m.family not in {h.family for h in held}]
    if not train or not held:
        print(f"hlo findings: {len(train)} training and {len(held)} held-out modules: both are needed "
              f"(families here: {', '.join(sorted({m.family for m in modules}))})", file=sys.stderr)
        return 1
    with progress.line("findings", progress.wanted(args)) as update:
        say = lambda msg: update(msg)  # noqa: E731
        result = F.find(train, held, budget=args.budget, reps=args.reps, final_reps=args.final_reps,
                        db=args.db, min_support=args.min_support, seed=args.seed, target=args.target, progress=say)
        path = F.write(result, args.output)
        if args.target and not args.no_upstream:
            print("hlo findings: no hlo upstream bundles for a GPU target: hlo upstream measures on XLA:CPU",
                  file=sys.stderr)
        elif not args.no_upstream:
            bundles = F.bundle_rules(result, path, held, args.output, seconds=args.upstream_seconds, progress=say)
            data = json.loads(path.read_text())
            data["upstream"] = bundles
            write_output(path, json.dumps(data, indent=1) + "\n")
    data = json.loads(path.read_text())
    if args.json:
        print(json.dumps(data, indent=1))
        return 0
    c = data["combined"]
    print(f"{len(data['rules'])} rule(s) from {len(train)} modules ({', '.join(data['settings']['train_families'])}); "
          f"validated on {len(held)} held-out modules ({', '.join(data['settings']['held_out_families'])})")
    for r in data["rules"]:
        g = r["geomean_gain_over_best"]
        figure = (f"held-out gain over {base_name(args.target)} {g:.3f}x" if g is not None else
                  "every held-out timing failed" if r["trials"] else "applies to no held-out module")
        print(f"  {'holds' if r['held_out'] else 'fails'}  {r['rule']['name']}: {r['statement']} ({figure})")
        if r["hurts"]:
            print(f"         hurts: {', '.join(r['hurts'])}")
    best, held_g = c["best_geomean"], c["held_out_geomean"]
    if held_g and best:
        print(f"held-out geomean vs stock{' (predicted)' if args.target else ''}: {held_g:.3f}x with the rules that "
              f"held, {best:.3f}x {base_name(args.target)} alone")
    print(f"-> {args.output}/findings.md, {path}")
    return 0
