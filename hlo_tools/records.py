"""Plain records that both parsers (fast scanner, lark grammar) produce.

Positions are absolute offsets into the text, turned into line/column only when
an error is reported (``Locator``)."""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass, field
from typing import NamedTuple

from .errors import HloParseError
from .text import split_raw_attributes


class InstrRecord(NamedTuple):
    pos: int  # offset of the instruction name
    is_root: bool
    name: str
    shape_text: str
    shape_pos: int
    opcode: str
    opcode_pos: int
    operand_text: str
    operand_pos: int
    attrs: list[tuple[str, str, int]]  # (key, raw value, offset of key)

    def key(self) -> tuple:
        """Everything but positions: what the differential test compares."""
        attrs = list(split_raw_attributes(self.attrs).items()) if isinstance(self.attrs, str) else [(k, v) for k, v, _ in self.attrs]
        return (self.is_root, self.name, self.shape_text, self.opcode, self.operand_text.strip(), attrs)


@dataclass
class CompRecord:
    name: str
    pos: int
    is_entry: bool
    signature: str | None  # "(p: f32[]) -> f32[]" as written, checked by the builder
    signature_pos: int
    instrs: list[InstrRecord] = field(default_factory=list)
    attrs: list[tuple[str, str, int]] = field(default_factory=list)


@dataclass
class ModuleRecord:
    name: str | None  # None: no HloModule header
    attrs: list[tuple[str, str, int]] = field(default_factory=list)
    stack_frames: list[tuple[str, list[str]]] = field(default_factory=list)
    computations: list[CompRecord] = field(default_factory=list)


class Locator:
    """Turns text offsets into (line, column, line text) for error messages."""

    def __init__(self, text: str, source: str):
        self.text = text
        self.source = source
        self._starts: list[int] | None = None

    def where(self, offset: int) -> tuple[int, int, str]:
        if self._starts is None:
            self._starts = [0] + [m.end() for m in re.finditer("\n", self.text)]
        offset = max(0, min(offset, len(self.text)))
        i = bisect.bisect_right(self._starts, offset) - 1
        start = self._starts[i]
        end = self.text.find("\n", start)
        line_text = self.text[start : end if end >= 0 else len(self.text)]
        return i + 1, offset - start + 1, line_text

    def error(self, message: str, offset: int, expected=()) -> HloParseError:
        line, col, text = self.where(offset)
        return HloParseError(message, self.source, line, col, text, tuple(expected))


