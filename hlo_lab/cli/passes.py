"""``hlo opt FILE --passes dce,cse -o OUT``: run a pass pipeline from the command line."""

from __future__ import annotations

import dataclasses
import json
import sys

from hlo_tools import HloParseError, VerificationError, load, verify
from hlo_tools.errors import HloError
from hlo_tools.formats import is_stablehlo_file
from hlo_tools.fileio import check_writable, write_output

from .args import add_load


def _cmd_opt(args) -> int:
    from passes import PassError, PassManager, available_passes  # lazy: every pass module and the analyses they use, ~90 ms on each hlo start (measured)
    from passes.base import runs_on  # lazy: as above
    from passes.registry import NAMED_PIPELINES, parse_pipeline  # lazy: as above

    if args.list:
        if args.json:
            print(json.dumps({"passes": list(available_passes()), "pipelines": list(NAMED_PIPELINES)}, indent=1))
            return 0
        print("\n".join(available_passes()))
        print("pipelines: " + ", ".join(NAMED_PIPELINES))
        return 0
    if not args.file:
        print("hlo opt: give a FILE (or --list)", file=sys.stderr)
        return 2
    try:
        pipeline = parse_pipeline(args.passes)
    except KeyError as e:
        print(f"hlo opt: {e.args[0]}", file=sys.stderr)
        return 2
    # Outputs are checked before any pass runs: a bad path fails at once, with one line.
    if args.output:
        check_writable(args.output)
    if args.dump_dir:
        check_writable(args.dump_dir, directory=True)
    # a StableHLO file stays StableHLO when every pass can run there (passes.portable)
    stablehlo = is_stablehlo_file(args.file) and all(runs_on(p, "stablehlo") for p in pipeline)
    try:
        if stablehlo:
            from xla_bridge.mlir_rewrite import StableHloModule  # lazy: jax

            module = StableHloModule.load(args.file)
            module.verify()
        else:
            if is_stablehlo_file(args.file):  # converted by XLA, passes run on our IR
                from xla_bridge import load as bridge_load  # lazy: jax

                module = bridge_load(args.file)
            else:
                module = load(args.file)
            verify(module)  # passes assume a valid module: the verifier's located message, not a crash inside one
    except HloParseError as e:
        print(e.format(), file=sys.stderr)
        return 1
    except VerificationError as e:
        print(f"{args.file}: {e}", file=sys.stderr)
        return 1
    except HloError as e:  # no MLIR rewrite API in this jaxlib
        print(f"hlo opt: {e}", file=sys.stderr)
        return 2
    manager = PassManager(pipeline, fixed_point=args.fixed_point, dump_dir=args.dump_dir)
    try:
        report = manager.run_with_report(module)
    except PassError as e:
        print(f"hlo opt: {e}", file=sys.stderr)
        return 1
    text = module.to_text()
    if not stablehlo and args.output and is_stablehlo_file(args.output):  # OUT.mlir asked of an HLO-level run
        from xla_bridge.stablehlo import from_module  # lazy: jax

        text = from_module(module, debug_info=False)
    if args.json:  # the module goes to -o, or into the JSON when there is none
        if args.output:
            write_output(args.output, text)
        print(json.dumps({"module": module.name, "level": "stablehlo" if stablehlo else "hlo",
                          "passes": args.passes, "changed": report.changed,
                          "iterations": report.iterations, "instructions": module.instruction_count,
                          "records": [dataclasses.asdict(r) for r in report.records], "output": args.output,
                          **({} if args.output else {"text": text})}, indent=1))
        return 0
    print(report.table(), file=sys.stderr if not args.output else sys.stdout)
    if args.output:
        write_output(args.output, text)
    else:
        sys.stdout.write(text)
    return 0


def register(subparsers) -> None:
    p = subparsers.add_parser("opt", help="run passes over a module and print (or write) the result")
    p.add_argument("file", nargs="?")
    p.add_argument("--passes", default="dce,cse,simplify", help="comma-separated pass names (see --list)")
    p.add_argument("-o", "--output", help="write the module here (atomically); the pass table goes to stdout")
    p.add_argument("--dump-dir", help="write NN.passname.hlo after each pass")
    p.add_argument("--fixed-point", action="store_true", help="repeat the pipeline until nothing changes")
    p.add_argument("--list", action="store_true", help="list the registered passes")
    p.add_argument("--json", action="store_true", help="what each pass did as JSON; the module goes to -o, or "
                                                        "into the JSON's \"text\" without one")
    add_load(p)
    p.set_defaults(func=_cmd_opt)
