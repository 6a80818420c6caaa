"""The ``hlo`` command line: a thin layer over functions a notebook can call."""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import sys
from pathlib import Path

from hlo_tools.errors import HloError, HloParseError
from hlo_tools.fileio import check_writable, write_output
from hlo_tools.stats import module_stats
from hlo_tools.verifier import VerificationError, verify
from xla_bridge import load
from xla_bridge.jax_internals import XlaCompileError
from xla_bridge.compiler import parse_flags

from ..console import stdout_console
from .inputs import check_inputs
from . import (analysis, bisect, collectives, divergence, findings, passes, profile, quantize, reduce, regress, tune,
               upstream, visualize, xla)
from .args import PipelineError, user_pipeline


def _cmd_check(args) -> int:
    status = 0
    files: list[str] = []
    results: list[dict] = []  # --json: one object per file
    files, problems = check_inputs(args.files)
    for e in problems:
        print(e.format(), file=sys.stderr)
        results.append({"file": e.source, "ok": False, "error": e.format()})
        status = 1
    for f in files:
        try:
            module = load(f)
            verify(module)
        except HloParseError as e:
            print(e.format(), file=sys.stderr)
            results.append({"file": f, "ok": False, "error": e.format()})
            status = 1
            continue
        except HloError as e:  # VerificationError and the like: one file's problem, the others are still checked
            print(f"{f}: {e}", file=sys.stderr)
            results.append({"file": f, "ok": False, "error": _first_line(str(e))})
            status = 1
            continue
        results.append({"file": f, "ok": True, "module": module.name, "instructions": module.instruction_count,
                        "computations": len(module.computations)})
        if not args.quiet and not args.json:
            print(f"{f}: ok ({module.instruction_count} instructions, {len(module.computations)} computations)")
    if args.json:
        print(json.dumps(results, indent=1))
    return status


def _cmd_fmt(args) -> int:
    if args.output:
        check_writable(args.output)
    try:
        text = load(args.file).to_text()
    except HloParseError as e:
        print(e.format(), file=sys.stderr)
        return 1
    if args.output:
        write_output(args.output, text)
    else:
        sys.stdout.write(text)
    return 0


def _cmd_stats(args) -> int:
    try:
        module = load(args.file)
        verify(module)  # sizes of an invalid module would be figures of nothing (2^126 bytes)
        stats = module_stats(module)
    except HloParseError as e:
        print(e.format(), file=sys.stderr)
        return 1
    except VerificationError as e:
        print(f"{args.file}: {e}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(stats.as_dict(), indent=2))
        return 0
    from rich.table import Table

    console = stdout_console()
    console.print(f"[bold]{stats.name}[/]: {stats.instructions} instructions in {stats.computations} computations "
                  f"({stats.entry_instructions} in the entry, {stats.fusions} fusions)")
    console.print(f"parameters {stats.parameter_bytes:,} bytes, outputs {stats.output_bytes:,} bytes")
    table = Table("opcode", "count")
    for op, n in stats.opcodes.items():
        table.add_row(op, str(n))
    console.print(table)
    return 0


def _cmd_demo(args) -> int:
    from ..demo import run_demo  # lazy: it imports every layer, +80 ms (a fifth) on every hlo start (measured)

    # The demo takes minutes: an output it could not write must fail now, not at the end.
    check_writable(args.report)
    out = Path(args.report).resolve().parent
    for folder in ("scan", "pages"):
        check_writable(out / folder, directory=True)
    return run_demo(args.report)


def _cmd_corpus(args) -> int:
    import corpus  # lazy: the corpus package, ~20 ms on each hlo start (measured)

    if args.corpus_cmd == "list":
        if args.json:
            print(json.dumps(corpus.list_json(args.dir), indent=1))
        else:
            sys.stdout.write(corpus.list_table(args.dir))
        return 0
    if args.out:
        check_writable(args.out, directory=True)
    try:
        return corpus.main_generate(args.only, args.out)
    except RuntimeError as e:  # the generator's environment is missing
        print(f"hlo corpus generate: {e}", file=sys.stderr)
        return 2


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="hlo", description="Parse, check, rewrite and measure XLA HLO modules.")
    sub = p.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("check", help="parse and verify module files (or every module file of a folder); FILE:LINE:COL on errors")
    c.add_argument("files", nargs="+", metavar="FILE|DIR")
    c.add_argument("-q", "--quiet", action="store_true")
    c.add_argument("--json", action="store_true", help="one object per file: ok, instructions, or the error")
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
    kl.add_argument("--json", action="store_true", help="one object per module")
    kg = ksub.add_parser("generate", help="regenerate the corpus (needs the generator environment)")
    kg.add_argument("--only")
    kg.add_argument("--out")
    k.set_defaults(func=_cmd_corpus)
    for mod in _EXTENSIONS:
        mod.register(sub)
    return p


#: Modules that add subcommands: each has ``register(subparsers)`` and sets
#: ``func`` on its parsers.
_EXTENSIONS = (xla, passes, analysis, visualize, tune, bisect, divergence, reduce, upstream, collectives, regress,
               profile, quantize, findings)


#: Commands whose failures exit 2 ("cannot compile/run"), so that compare's exit 1
#: keeps meaning "the outputs differ".
_CANNOT_RUN_EXIT = {"compile": 2, "run": 2, "compare": 2, "bench": 2, "tune": 2,
                    "bisect": 2, "divergence": 2, "reduce": 2, "upstream": 2, "xla": 2, "regress": 2,
                    "profile": 2, "quantize": 2, "findings": 2}


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else ""


def main(argv: list[str] | None = None) -> int:
    """Runs one command.  The one place that turns what goes wrong with the
    user's input into one line on stderr and an exit code (1: bad input or
    output path; 2: cannot compile or run), never a Python traceback: parse
    errors with file:line:column, unwritable outputs, OSErrors on the user's
    paths, a file that is not a database, a closed stdout pipe (``| head``)."""
    args = build_parser().parse_args(argv)
    name = args.cmd + (f" {args.corpus_cmd}" if args.cmd == "corpus" else f" {args.xla_cmd}" if args.cmd == "xla" else "")
    failed = _CANNOT_RUN_EXIT.get(args.cmd, 1)
    try:
        _check_pipeline(args)
        usage = _bad_xla_flag(args)
        if usage:
            print(f"hlo {name}: {usage}", file=sys.stderr)
            return 2  # a usage error, as argparse reports one
        bad_db = _not_a_database(args)
        if bad_db:
            print(f"hlo {name}: {bad_db}", file=sys.stderr)
            return failed
        status = args.func(args)
        sys.stdout.flush()  # a closed pipe shows up here, inside the handler below
        return status
    except PipelineError as e:  # a bad --load file (1) or --passes name (2)
        print(f"hlo {name}: {e}", file=sys.stderr)
        return e.status
    except BrokenPipeError:
        _stdout_to_devnull()
        return 141  # what a process killed by SIGPIPE reports; the reader has gone, there is nothing to say
    except HloParseError as e:
        print(e.format(), file=sys.stderr)
        return failed
    except XlaCompileError as e:
        print(f"hlo {name}: {_first_line(str(e))}", file=sys.stderr)
        return 2
    except HloError as e:  # OutputError, VerificationError, IrError ...
        print(f"hlo {name}: {_first_line(str(e))}", file=sys.stderr)
        return failed
    except sqlite3.DatabaseError as e:
        db = getattr(args, "db", None)
        print(f"hlo {name}: {db + ': ' if db else ''}{e} (give --db a results database, or a new path)", file=sys.stderr)
        return failed
    except OSError as e:
        where = f"{e.filename}: " if e.filename else ""
        print(f"hlo {name}: {where}{e.strerror or e}", file=sys.stderr)
        return failed
    except KeyboardInterrupt:
        return 130


#: Commands whose ``--passes`` names Python passes from the registry.
_TAKES_PASSES = ("opt", "bench")


def _check_pipeline(args: argparse.Namespace) -> None:
    """Registers ``--load``'s passes and checks every name in ``--passes`` before
    any file is read or compiled; raises ``PipelineError`` (with its exit status)."""
    spec = getattr(args, "passes", None)
    if args.cmd in _TAKES_PASSES and isinstance(spec, str) and spec.strip():
        user_pipeline(getattr(args, "load", ()), spec)  # --load's passes registered first, for the command too


def _bad_xla_flag(args: argparse.Namespace) -> str | None:
    """What is wrong with an ``--xla-flag``, checked before any compile; None if nothing."""
    flags = getattr(args, "xla_flag", None)
    if not flags:
        return None
    try:
        parse_flags(flags)
    except ValueError as e:
        return str(e)
    return None


_SQLITE_MAGIC = b"SQLite format 3\0"


def _not_a_database(args: argparse.Namespace) -> str | None:
    """What is wrong with ``--db``, before anything is run or recorded: an
    existing path must be an SQLite file.  ``bench`` may start a database in an
    empty file; ``history`` only reads, and must never turn a file into a database."""
    db = getattr(args, "db", None)
    if not db or args.cmd not in ("history", "bench", "tune", "regress") or not os.path.exists(db):
        return None  # a new database (bench), or no results yet (history)
    if os.path.isdir(db):
        return f"--db {db}: is a folder, not a results database"
    try:
        with open(db, "rb") as f:
            head = f.read(len(_SQLITE_MAGIC))
    except OSError as e:
        return f"--db {db}: {e.strerror or e}"
    if head == _SQLITE_MAGIC or (not head and args.cmd in ("bench", "tune", "regress")):
        return None
    return f"--db {db}: {'an empty file' if not head else 'not an SQLite file'}, not a results database"


def _stdout_to_devnull() -> None:
    """After EPIPE, point stdout at /dev/null so the interpreter's final flush
    does not raise again (Python's documented recipe)."""
    try:
        fd = os.open(os.devnull, os.O_WRONLY)
        os.dup2(fd, sys.stdout.fileno())
        os.close(fd)
    except (OSError, ValueError, AttributeError):  # stdout is not a real file (pytest's capture)
        pass

