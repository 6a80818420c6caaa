"""What several ``hlo`` subcommands parse the same way: argparse types for counts,
seconds and tolerances, and ``--load`` + ``--passes`` (a user's passes)."""

from __future__ import annotations

import argparse
from typing import Callable, Sequence


#: The largest count an option takes: SQLite and numpy hold at most int64.
MAX_COUNT = 2**62


def _whole(text: str, low: int, high: int) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if n < low:
        raise argparse.ArgumentTypeError(f"must be at least {low}, not {n}")
    if n > high:
        raise argparse.ArgumentTypeError(f"must be at most {high}, not {n}")
    return n


def at_least_one(text: str) -> int:
    """An argparse type: a whole number >= 1 (a count, a limit)."""
    return _whole(text, 1, MAX_COUNT)


def seed(text: str) -> int:
    """An argparse type: an input seed, a whole number from 0 to 2**32-1."""
    return _whole(text, 0, 2**32 - 1)


def regex(text: str) -> str:
    """An argparse type: a Python regular expression that compiles."""
    import re  # lazy: hlo starts on every command

    try:
        re.compile(text)
    except re.error as e:
        raise argparse.ArgumentTypeError(f"{text!r} is not a regular expression: {e}") from None
    return text


def gpu_target(text: str) -> str:
    """An argparse type: a GPU XLA can compile for without one (a name, or a
    GpuTargetConfigProto .txtpb file)."""
    from xla_bridge.targets import target_names  # lazy: the bridge's table, only when the option is given

    names = target_names()
    if text.lower() in names or (text.endswith(".txtpb") and __import__("os").path.isfile(text)):
        return text
    raise argparse.ArgumentTypeError(f"unknown GPU {text!r}: use one of {', '.join(names)} or a .txtpb file")


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
    from passes.registry import parse_pipeline  # lazy: every pass module, ~90 ms on each hlo start (measured)
    from passes.registry import load_passes  # lazy: the same pass modules

    for f in load:
        try:
            load_passes(f)
        except ImportError as e:
            raise PipelineError(f"--load {e}", 1) from None
    try:
        passes = parse_pipeline(spec)
    except KeyError as e:
        raise PipelineError(str(e.args[0]), 2) from None
    if not passes:
        raise PipelineError("--passes names no pass", 2)
    return passes
