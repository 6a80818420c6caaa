"""What several ``hlo`` subcommands parse the same way: argparse types for counts,
seconds and tolerances, and ``--load`` + ``--passes`` (a user's passes)."""

from __future__ import annotations

import argparse
from typing import Callable, Sequence


def at_least_one(text: str) -> int:
    """An argparse type: a whole number >= 1."""
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {n}")
    return n


def _number(what: str, ok: Callable[[float], bool], rule: str) -> Callable[[str], float]:
    """An argparse type for a float that ``ok`` accepts; ``rule`` says which do."""

    def parse(text: str) -> float:
        try:
            x = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {what}") from None
        if not ok(x):
            raise argparse.ArgumentTypeError(f"must be {rule}, not {text}")
        return x

    return parse


#: An argparse type: a number of seconds > 0.
positive_seconds = _number("a number of seconds", lambda x: x > 0, "more than 0")
#: An argparse type: a number >= 0 (a tolerance).
non_negative = _number("a number", lambda x: x >= 0, "0 or more")


def add_load(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--load", action="append", default=[], metavar="FILE.py",
                        help="a Python file defining passes of your own, for --passes (repeatable)")


class PipelineError(Exception):
    """What is wrong with ``--load`` / ``--passes``, and the exit status it earns
    (1: a bad file, 2: a usage error such as an unknown pass name)."""

    def __init__(self, message: str, status: int):
        super().__init__(message)
        self.status = status


def user_pipeline(load: Sequence[str], spec: str) -> list:
    """The passes ``spec`` names, after the files in ``load`` registered theirs."""
    from passes.fusion.pipeline import passes_of  # lazy: every pass module, ~90 ms on each hlo start (measured)
    from passes.registry import load_passes  # lazy: the same pass modules

    for f in load:
        try:
            load_passes(f)
        except ImportError as e:
            raise PipelineError(f"--load {e}", 1) from None
    try:
        passes = passes_of(spec)
    except KeyError as e:
        raise PipelineError(str(e.args[0]), 2) from None
    if not passes:
        raise PipelineError("--passes names no pass", 2)
    return passes
