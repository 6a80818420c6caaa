"""``parse(text)`` and ``load(path)``: HLO text to a Module.

The fast scanner handles the lines XLA prints; lines it does not understand go
to the lark grammar, and so does a module whose layout the scanner does not
follow.  Both produce the same records, built into IR by one builder.
"""

from __future__ import annotations

import os
from pathlib import Path

from . import formats, grammar
from .errors import HloParseError
from .ir import Module
from .builder import Builder
from .records import Locator, ModuleRecord
from .collector import collector_paused
from .scanner import COMPILED, Unsupported, blank_multiline_comments, scan_module


def _fallback(text: str, loc: Locator):
    """Parses a line the scanner does not understand with the grammar; a line the
    grammar cannot read alone sends the whole module to the grammar."""

    def fallback(start: int, end: int):
        try:
            return grammar.parse_instruction_record(text, start, end, loc)
        except HloParseError:
            raise Unsupported(start, whole_module=True) from None

    return fallback


def parse_records(text: str, source: str = "<string>", *, use_scanner: bool = True, compiled: bool = True) -> ModuleRecord:
    """The parser's records for ``text`` (``use_scanner=False``: grammar only;
    ``compiled=False``: the scanner's pure-Python path even where the core is built)."""
    loc = Locator(text, source)
    if not use_scanner:
        return grammar.parse_module_records(text, loc)

    core = COMPILED if compiled else None
    scanned = blank_multiline_comments(text, core=core)
    try:
        return scan_module(scanned, _fallback(scanned, loc), core=core)
    except Unsupported:
        return grammar.parse_module_records(text, loc)


def parse(text: str, source: str = "<string>", *, use_scanner: bool = True, compiled: bool = True) -> Module:
    """Parses HLO text into a Module; raises HloParseError naming source, line and column.
    ``compiled=False`` takes the pure-Python path where the compiled core is built
    (``scanner.PARSER_PATH``); both give the same module."""
    if not isinstance(text, str):
        raise TypeError(f"parse() takes HLO text (str), got {type(text).__name__}; use load() for a path")
    loc = Locator(text, source)
    core = COMPILED if compiled else None
    with collector_paused():  # many small objects, no garbage: full collections would walk them all
        if use_scanner:
            builder = Builder(loc, core=core)
            scanned = blank_multiline_comments(text, core=core)  # same offsets, so loc still names lines and columns
            try:
                rec = scan_module(scanned, _fallback(scanned, loc), sink=builder.add, core=core,
                                  whole_computations=builder.whole_computations if core is not None else None)
                return builder.finish(rec)
            except Unsupported:
                pass  # not laid out as XLA prints: the grammar reads it whole
        rec = grammar.parse_module_records(text, loc)
        return Builder(loc, core=core).build(rec)


def read_hlo_text(path: str | os.PathLike, *, max_bytes: int | None = None) -> str:
    """HLO text of a module file: HLO text, optionally gzip'd.

    Every problem with the file is an HloParseError naming it (a missing file,
    corrupt or truncated gzip, a gzip that decompresses past ``max_bytes``
    (default 1 GiB or ``HLO_MAX_DECOMPRESSED_BYTES``), binary that is not a module).
    A serialized HloModuleProto or StableHLO needs XLA to become text: that is
    ``xla_bridge.read_text`` / ``xla_bridge.load``, which accept every form.
    """
    p = Path(path)
    data = formats.read_module_bytes(p, max_bytes=max_bytes)
    kind = formats.module_format(p, data)
    if kind != "hlo":
        what = "a serialized HloModuleProto" if kind == "proto" else "a StableHLO module"
        raise HloParseError(f"{what}: XLA converts it to HLO text; read it with xla_bridge.load (the hlo command does)",
                            str(p), 1, 1)
    return decode_text(data, str(p))


def decode_text(data: bytes, source: str) -> str:
    """``data`` as UTF-8 HLO text; an HloParseError at the first byte that is not."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        col = e.start - (data.rfind(b"\n", 0, e.start) + 1) + 1
        raise HloParseError("file is not UTF-8 text, nor a binary HloModuleProto or MLIR bytecode", source, line, col) from None


def load(path: str | os.PathLike) -> Module:
    """Loads a module from an HLO text file (an XLA dump's
    ``module_0001.jit_step.before_optimizations.txt``), optionally gzip'd; see
    ``read_hlo_text``.  ``xla_bridge.load`` also reads ``.hlo.pb`` and ``.mlir``."""
    return parse(read_hlo_text(path), source=str(path))
