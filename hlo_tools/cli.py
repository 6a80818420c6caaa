"""The ``hlo`` command line: a thin layer over functions a notebook can call."""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
from pathlib import Path

from .errors import HloError, HloParseError, VerificationError
from .fileio import write_output
from .parser import load
from .stats import module_stats
from .verifier import verify


def write_atomic(path: str | os.PathLike, text: str) -> None:
    """Kept for callers of the old name: ``fileio.write_output``."""
    write_output(path, text)


def _cmd_check(args) -> int:
    status = 0
    for f in args.files:
        try:
            module = load(f)
            verify(module)
        except HloParseError as e:
            print(e.format(), file=sys.stderr)
            status = 1
            continue
        except VerificationError as e:
            print(f"{f}: {e}", file=sys.stderr)
            status = 1
            continue
        if not args.quiet:
            print(f"{f}: ok ({module.instruction_count} instructions, {len(module.computations)} computations)")
    return status


def _cmd_fmt(args) -> int:
    try:
        text = load(args.file).to_text()
    except HloParseError as e:
        print(e.format(), file=sys.stderr)
        return 1
    if args.output:
        write_atomic(args.output, text)
    else:
        sys.stdout.write(text)
    return 0


def _cmd_stats(args) -> int:
    try:
        stats = module_stats(load(args.file))
    except HloParseError as e:
        print(e.format(), file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(stats.as_dict(), indent=2))
        return 0
    from rich.console import Console
    from rich.table import Table

    console = Console()
    console.print(f"[bold]{stats.name}[/]: {stats.instructions} instructions in {stats.computations} computations "
                  f"({stats.entry_instructions} in the entry, {stats.fusions} fusions)")
    console.print(f"parameters {stats.parameter_bytes:,} bytes, outputs {stats.output_bytes:,} bytes")
    table = Table("opcode", "count")
    for op, n in stats.opcodes.items():
        table.add_row(op, str(n))
    console.print(table)
    return 0


def _cmd_demo(args) -> int:
    from .demo import run_demo

    return run_demo(args.report)


def _cmd_corpus(args) -> int:
    import corpus  # lazy: hlo_tools does not depend on the corpus package

    if args.corpus_cmd == "list":
        sys.stdout.write(corpus.list_table(args.dir))
        return 0
    return corpus.main_generate(args.only, args.out)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="hlo", description="Parse, check, rewrite and measure XLA HLO modules.")
    sub = p.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("check", help="parse and verify HLO files; FILE:LINE:COL on errors")
    c.add_argument("files", nargs="+")
    c.add_argument("-q", "--quiet", action="store_true")
    c.set_defaults(func=_cmd_check)
    f = sub.add_parser("fmt", help="print a module as canonical HLO text")
    f.add_argument("file")
    f.add_argument("-o", "--output", help="write here (atomically) instead of stdout")
    f.set_defaults(func=_cmd_fmt)
    s = sub.add_parser("stats", help="instruction counts, opcode histogram, parameter/output bytes")
    s.add_argument("file")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=_cmd_stats)
    d = sub.add_parser("demo", help="the main job on the bundled corpus: parse, verify, round-trip through XLA, report")
    d.add_argument("--report", default="results/demo_report.md")
    d.set_defaults(func=_cmd_demo)
    k = sub.add_parser("corpus", help="the bundled corpus and XLA dump folders")
    ksub = k.add_subparsers(dest="corpus_cmd", required=True)
    kl = ksub.add_parser("list", help="table of the bundled corpus, or of an --xla_dump_to folder")
    kl.add_argument("dir", nargs="?")
    kg = ksub.add_parser("generate", help="regenerate the corpus (needs the generator environment)")
    kg.add_argument("--only")
    kg.add_argument("--out")
    k.set_defaults(func=_cmd_corpus)
    for name in _EXTENSIONS:
        try:
            mod = importlib.import_module(name)
        except ModuleNotFoundError as e:
            if e.name != name:
                raise
            continue
        mod.register(sub)
    return p


#: Modules that add subcommands: each has ``register(subparsers)`` and sets
#: ``func`` on its parsers.  They import heavy dependencies inside the command.
_EXTENSIONS = ("hlo_tools.cli_xla", "passes.cli", "fusion_analysis.cli", "visualize.cli")


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except HloError as e:
        print(f"hlo: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
