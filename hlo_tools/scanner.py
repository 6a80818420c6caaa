"""The fast path of the parser: a line scanner for HLO as XLA prints it.

XLA prints one instruction per line, and most of the bytes are attribute values
(metadata, backend_config) that no pass reads; this scanner finds the fields of a
line with a few regular expressions and keeps attribute values as raw text.  Any
line it does not fully understand is handed to the lark grammar (``grammar.py``),
which is the specification; anything structurally unusual (a statement spread
over lines) makes the whole module go through the grammar.
"""

from __future__ import annotations

import re

from .records import CompRecord, InstrRecord, ModuleRecord


class Unsupported(Exception):
    """The text is valid-looking but not in the shape this scanner handles."""

    def __init__(self, pos: int, whole_module: bool = False):
        super().__init__(pos)
        self.pos = pos
        self.whole_module = whole_module


_INSTR_HEAD = re.compile(r"[ \t]*(ROOT[ \t]+)?%?([A-Za-z_][\w.\-]*)[ \t]*=[ \t]*")
_ARRAY_SHAPE = re.compile(r"[a-z][a-z0-9]*\[[^\]\n]*\](?:\{[^}\n]*\})?")
_OPCODE = re.compile(r"[ \t]+([a-z][a-z0-9\-]*)\(")
_PAREN = re.compile(r"[()]")
_ATTR_TOKEN = re.compile(r'"(?:[^"\\\n]|\\.)*"|[^"{}()\[\],\n]+|[{}()\[\],]|(")')
_ATTR_KEY = re.compile(r"[ \t]*([A-Za-z_][\w\-]*)[ \t]*=[ \t]*")
_COMP_HEAD = re.compile(r"[ \t]*(ENTRY[ \t]+)?%?([A-Za-z_][\w.\-]*)[ \t]*(\(.*\)[ \t]*->[ \t]*(.*?))?[ \t]*\{[ \t]*$")
_COMP_END = re.compile(r"[ \t]*\}[ \t]*(,.*)?$")
_MODULE_HEAD = re.compile(r"[ \t]*HloModule[ \t]+%?([A-Za-z_][\w.\-]*)[ \t]*:?[ \t]*")
_SECTIONS = frozenset({"FileNames", "FunctionNames", "FileLocations", "StackFrames"})
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')


def _matching_paren(text: str, open_pos: int, limit: int) -> int:
    """Offset of the ')' closing the '(' at open_pos, or -1 within [open_pos, limit)."""
    depth = 0
    for m in _PAREN.finditer(text, open_pos, limit):
        if m.group() == "(":
            depth += 1
        else:
            depth -= 1
            if depth == 0:
                return m.start()
    return -1


def split_attributes(text: str, pos: int, end: int) -> list[tuple[str, str, int]] | None:
    """Parses ``, key=value, key=value`` in text[pos:end]; None if not that form."""
    attrs = []
    while True:
        while pos < end and text[pos] in " \t\r":
            pos += 1
        if pos >= end:
            return attrs
        if text[pos] != ",":
            return None
        m = _ATTR_KEY.match(text, pos + 1, end)
        if not m:
            return None
        key = m.group(1)
        key_pos = m.start(1)
        vstart = m.end()
        depth = 0
        vend = end
        for t in _ATTR_TOKEN.finditer(text, vstart, end):
            if t.group(1):  # an unterminated string
                return None
            c = t.group()[0]
            if c in "{([":
                depth += 1
            elif c in "})]":
                depth -= 1
                if depth < 0:
                    return None
            elif c == "," and depth == 0:
                vend = t.start()
                break
        if depth != 0:
            return None
        value = text[vstart:vend].rstrip()
        if not value:
            return None
        attrs.append((key, value, key_pos))
        pos = vend


def scan_instruction(text: str, start: int, end: int) -> InstrRecord | None:
    """Scans one instruction line text[start:end]; None if it is not simple."""
    m = _INSTR_HEAD.match(text, start, end)
    if not m:
        return None
    pos = m.end()
    if pos >= end:
        return None
    if text[pos] == "(":
        close = _matching_paren(text, pos, end)
        if close < 0:
            return None
        shape_end = close + 1
    else:
        sm = _ARRAY_SHAPE.match(text, pos, end)
        if sm:
            shape_end = sm.end()
        elif _OPCODE.match(text, pos - 1, end):  # no shape: XLA infers it
            shape_end = pos - 1
        else:
            return None
    om = _OPCODE.match(text, shape_end, end)
    if not om:
        return None
    open_pos = om.end() - 1
    i = text.find(")", open_pos, end)
    if i < 0:
        return None
    if text.find("(", open_pos + 1, i) >= 0:
        i = _matching_paren(text, open_pos, end)
        if i < 0:
            return None
    attrs = split_attributes(text, i + 1, end) if i + 1 < end else []
    if attrs is None:
        return None
    return InstrRecord(
        m.start(2),
        m.group(1) is not None,
        m.group(2),
        text[pos:shape_end] if shape_end > pos else "",
        pos,
        om.group(1),
        om.start(1),
        text[open_pos + 1 : i],
        open_pos + 1,
        attrs,
    )


def _signature(text: str, m: re.Match) -> tuple[list[tuple[str, str, int]] | None, str | None]:
    if not m.group(3):
        return None, None
    sig_start = m.start(3)
    close = _matching_paren(text, sig_start, m.end(3))
    if close < 0:
        raise Unsupported(sig_start, whole_module=True)
    params = []
    body = text[sig_start + 1 : close]
    if body.strip():
        depth, piece_start = 0, 0
        pieces = []
        for j, c in enumerate(body):
            if c in "([{":
                depth += 1
            elif c in ")]}":
                depth -= 1
            elif c == "," and depth == 0:
                pieces.append((body[piece_start:j], piece_start))
                piece_start = j + 1
        pieces.append((body[piece_start:], piece_start))
        for piece, off in pieces:
            name, sep, shape = piece.partition(":")
            if not sep:
                raise Unsupported(sig_start + 1 + off, whole_module=True)
            params.append((name.strip().lstrip("%"), shape.strip(), sig_start + 1 + off + len(name) + 1))
    arrow = text.find("->", close, m.end(3))
    return params, text[arrow + 2 : m.end(3)].strip()


def scan_module(text: str, fallback_line) -> ModuleRecord:
    """Scans a whole module.  ``fallback_line(start, end)`` parses a line the
    scanner cannot (the lark grammar) and returns its InstrRecord."""
    n = len(text)
    pos = 0
    # header
    while True:
        eol = text.find("\n", pos)
        eol = n if eol < 0 else eol
        if text[pos:eol].strip() or eol >= n:
            break
        pos = eol + 1
    m = _MODULE_HEAD.match(text, pos, eol)
    if not m:
        raise Unsupported(pos, whole_module=True)
    rec = ModuleRecord(m.group(1))
    attrs = split_attributes(text, m.end(), eol)
    if attrs is None:
        raise Unsupported(m.end(), whole_module=True)
    rec.attrs = attrs
    pos = eol + 1
    comp: CompRecord | None = None
    section: list[str] | None = None
    while pos < n:
        eol = text.find("\n", pos)
        if eol < 0:
            eol = n
        line_start = pos
        pos = eol + 1
        if eol > line_start and text[eol - 1] == "\r":
            eol -= 1
        first = line_start
        while first < eol and text[first] in " \t":
            first += 1
        if first == eol:
            section = None
            continue
        if "//" in text[first:eol] and "//" in _STRING.sub("", text[first:eol]):
            raise Unsupported(first, whole_module=True)
        if comp is None:
            line = text[first:eol]
            if section is not None and not line.rstrip().endswith("{"):
                section.append(text[first:eol].rstrip())
                continue
            if line.rstrip() in _SECTIONS and not rec.computations:
                section = []
                rec.stack_frames.append((line.rstrip(), section))
                continue
            section = None
            hm = _COMP_HEAD.match(text, line_start, eol)
            if not hm:
                raise Unsupported(first, whole_module=True)
            params, result = _signature(text, hm)
            comp = CompRecord(hm.group(2), hm.start(2), hm.group(1) is not None, params, result)
            continue
        if text[first] == "}":
            em = _COMP_END.match(text, line_start, eol)
            if not em:
                raise Unsupported(first, whole_module=True)
            if em.group(1):
                cattrs = split_attributes(text, em.start(1), eol)
                if cattrs is None:
                    raise Unsupported(em.start(1), whole_module=True)
                comp.attrs = cattrs
            rec.computations.append(comp)
            comp = None
            continue
        r = scan_instruction(text, line_start, eol)
        if r is None:
            r = fallback_line(line_start, eol)
        comp.instrs.append(r)
    if comp is not None:
        raise Unsupported(n, whole_module=True)
    return rec
