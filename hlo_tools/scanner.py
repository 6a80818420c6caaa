"""The fast path of the parser: a line scanner for HLO as XLA prints it.

XLA prints one instruction per line, and most of the bytes are attribute values
(metadata, backend_config) that no pass reads; this scanner finds the fields of a
line with a few regular expressions and keeps attribute values as raw text.  Any
line it does not fully understand is handed to the lark grammar (``grammar.py``),
which is the specification. A statement or a computation signature spread over
lines is read as one (``_continued``), and a /* comment */ over lines is blanked
first (``blank_multiline_comments``); anything else structurally unusual makes the
whole module go through the grammar.
"""

from __future__ import annotations

import os
import re
import warnings
from types import ModuleType

from .records import CompRecord, InstrRecord, ModuleRecord
from .text import ATTRIBUTE, value_pattern


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
# Strings and comments on one line, leftmost first: a `//` inside a string or a
# /* */ comment is not a comment; a lone `/*` does not close on this line.
_COMMENT_OR_STRING = re.compile(r'"(?:[^"\\\n]|\\.)*"|/\*.*?\*/|//|/\*')
_BLOCK_COMMENT = re.compile(r"/\*.*?\*/")
# A /* that may not close on its line; then strings and comments over the whole text.
_OPEN_COMMENT = re.compile(r"/\*(?:(?!\*/)[^\n])*\n")
_STRING_OR_COMMENT = re.compile(r'"(?:[^"\\\n]|\\.)*"|//[^\n]*|/\*.*?\*/', re.S)
_BRACKET_OR_STRING = re.compile(r'"(?:[^"\\\n]|\\.)*"|[(){}\[\]]')
# `, key=` at the start of each attribute of a raw tail (and, rarely, inside a
# string value): a repeated key sends the tail to the exact split below
_TAIL_KEY = re.compile(r", ([A-Za-z_][\w\-]*)=")


def blank_multiline_comments(text: str, *, core: ModuleType | None = None) -> str:
    """``text`` with every /* comment */ that spans lines turned into spaces, its line
    breaks kept: offsets, lines and columns stay valid, and the scanner reads the
    lines around the comment instead of sending the module to the grammar.
    ``core``: the compiled scanner, which looks for an open comment faster."""
    if core is not None and text.isascii():
        if core.first_open_comment(text) < 0:
            return text
    elif _OPEN_COMMENT.search(text) is None:
        return text
    return blank_comments(text, spanning_lines_only=True)


def blank_comments(text: str, *, spanning_lines_only: bool = False) -> str:
    """``text`` with its comments (strings aside) turned into spaces, line breaks kept."""
    parts: list[str] = []
    last = 0
    for m in _STRING_OR_COMMENT.finditer(text):
        t = m.group()
        if t[0] == "/" and (not spanning_lines_only or "\n" in t):
            parts += [text[last:m.start()], re.sub(r"[^\n]", " ", t)]
            last = m.end()
    return "".join(parts) + text[last:] if parts else text


def _depth(line: str) -> int:
    """Brackets opened minus closed on ``line``, strings aside."""
    depth = 0
    for m in _BRACKET_OR_STRING.finditer(line):
        t = m.group()
        if t in "({[":
            depth += 1
        elif t in ")}]":
            depth -= 1
    return depth


#: How a statement line that goes on at the next line ends (brackets all closed):
#: ``%x =`` then the shape, or ``..., `` then more attributes.
_GOES_ON = ("=", ",")


def _continued(lines: list[str], i: int, first: str, *, head: bool = False) -> tuple[str, int, bool] | None:
    """``first`` (lines[i - 1], comments blanked) joined with the lines after it until
    its brackets close (``head``: until a computation's ``{`` opens with nothing else
    open): the text as one line (line breaks as spaces, so offsets hold) and the
    index of the next line; None if they never do."""
    parts = [first]
    depth = _depth(first)
    target = 1 if head else 0
    last = first.rstrip()  # the last line with something on it
    inside = False
    while depth != target or (head and not last.endswith("{")) or (not head and last.endswith(_GOES_ON)):
        if i >= len(lines) or depth < 0:
            return None
        line = lines[i]
        if "/" in line:
            line = uncomment_line(line)
            if line is None:
                return None
        inside = inside or depth != 0
        parts.append(line)
        depth += _depth(line)
        last = line.rstrip() or last
        i += 1
    return " ".join(parts), i, inside


def _repeats_a_key(tail: str) -> bool:
    keys = _TAIL_KEY.findall(tail)
    return len(keys) > 1 and len(set(keys)) != len(keys)


# XLA's lexer reads ASCII only outside strings and comments ('é', '²', a
# no-break space are errors there); the grammar reports such a character.
_NON_ASCII_OUTSIDE = re.compile(r'"(?:[^"\\]|\\.)*"|/\*.*?\*/|//[^\n]*|([^\x00-\x7f])', re.S)


def first_non_ascii(text: str) -> int | None:
    """Offset of the first non-ASCII character outside strings and comments."""
    if text.isascii():
        return None
    for m in _NON_ASCII_OUTSIDE.finditer(text):
        if m.group(1):
            return m.start(1)
    return None


def uncomment_line(line: str) -> str | None:
    """``line`` with its ``// comment`` blanked to spaces (offsets stay valid);
    "" when only comments are on it; None when a ``/*`` does not close on it.
    Block comments inside a line stay: shapes and the grammar read them."""
    out = line
    for m in _COMMENT_OR_STRING.finditer(line):
        t = m.group()
        if t == "//":
            out = line[: m.start()] + " " * (len(line) - m.start())
            break
        if t == "/*":
            return None
    if not _BLOCK_COMMENT.sub("", out).strip():
        return ""
    return out


def matching_paren(text: str, open_pos: int, limit: int) -> int:
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


_PARAM_SPLIT = re.compile(r",\s*(?=%?[A-Za-z_][\w.\-]*\s*:)")


#: Attributes the builder must resolve at parse time (names of computations or
#: instructions); a raw tail without them can stay raw.
RESOLVED_KEYS = ("to_apply", "calls", "condition", "body", "select", "scatter", "branch_computations",
                 "true_computation", "false_computation", "called_computations", "control-predecessors")
NEEDS_RESOLUTION = re.compile(r",[ \t]*(?:" + "|".join(map(re.escape, RESOLVED_KEYS)) + r")[ \t]*=")


_CORE_VERSION = 2  # hlo_tools/_scan.pyx's VERSION that this file is written against


def _compiled_core() -> ModuleType | None:
    """``hlo_tools._scan``, the compiled form of this scanner's line loop and of the
    builder's fast path, when the package's build made it (a C compiler was there)
    and ``HLO_PARSER`` is not ``python``; None: the pure-Python path."""
    if os.environ.get("HLO_PARSER", "").lower() == "python":
        return None
    try:
        from . import _scan  # built from _scan.pyx by setup.py; optional by design
    except ImportError:
        return None
    if getattr(_scan, "VERSION", None) != _CORE_VERSION:
        warnings.warn(f"{_scan.__file__} is a stale build of hlo_tools/_scan.pyx; parsing on the pure-Python path "
                      "(rebuild: pip install -e . or make)", RuntimeWarning, stacklevel=2)
        return None
    _scan.set_resolution_keys(RESOLVED_KEYS)
    return _scan


#: The compiled core, or None; ``PARSER_PATH`` says which path ``parse`` takes.
COMPILED = _compiled_core()
PARSER_PATH = "compiled" if COMPILED is not None else "python"


def join_mesh_device_ids(text: str, attrs: list[tuple[str, str, int]],
                         spans: list[tuple[int, int]]) -> list[tuple[str, str, int]]:
    """XLA prints a mesh with an explicit device order inside ``replica_groups``:
    ``mesh['a'=2,'b'=4], device_ids=(...) {'a'}``. The ``device_ids`` part belongs
    to that value, not to an attribute of its own: its span joins the value
    (the exact text kept). ``spans``: each value's (start, end) in ``text``."""
    for i in range(len(attrs) - 1):
        if attrs[i][0] == "replica_groups" and attrs[i + 1][0] == "device_ids" and attrs[i][1].startswith("mesh["):
            attrs[i] = (attrs[i][0], text[spans[i][0] : spans[i + 1][1]], attrs[i][2])
            del attrs[i + 1]
            break
    return attrs


def split_attributes(text: str, pos: int, end: int) -> list[tuple[str, str, int]] | None:
    """Parses ``, key=value, key=value`` in text[pos:end]; None if not that form."""
    attrs = []
    spans: list[tuple[int, int]] = []  # each value's span in text
    match = ATTRIBUTE.match
    while pos < end:
        m = match(text, pos, end)
        if m is None:
            break
        v_end = m.end()
        if v_end < end and text[v_end] not in ", \t\r":
            break  # e.g. a value with a space in it: the token loop below handles it
        attrs.append((m.group(1), m.group(2), m.start(1)))
        spans.append(m.span(2))
        pos = v_end
    else:
        return join_mesh_device_ids(text, attrs, spans)
    while True:
        while pos < end and text[pos] in " \t\r":
            pos += 1
        if pos >= end:
            return join_mesh_device_ids(text, attrs, spans)
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
        spans.append((vstart, vstart + len(value)))
        pos = vend


def scan_instruction(text: str, start: int, end: int) -> InstrRecord | None:
    """Scans one instruction line text[start:end]; None if it is not simple."""
    m = _INSTR_HEAD.match(text, start, end)
    if not m:
        return None
    pos = m.end()
    if pos >= end:
        return None
    if text[pos] == "(" or text.startswith("b(", pos):  # a tuple or a buffer shape
        close = matching_paren(text, pos, end)
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
        i = matching_paren(text, open_pos, end)
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


def parse_signature(sig: str, base: int) -> tuple[list[tuple[str, str, int]], str]:
    """``(a: f32[], b: s32[2]) -> f32[]`` -> ([(name, shape text, offset)], result
    text); offsets are relative to ``base``.  Raises Unsupported if malformed."""
    close = matching_paren(sig, 0, len(sig))
    if not sig.startswith("(") or close < 0:
        raise Unsupported(base, whole_module=True)
    params = []
    body = sig[1:close]
    if body.strip():
        cuts = list(_PARAM_SPLIT.finditer(body))
        starts = [0] + [m.end() for m in cuts]
        ends = [m.start() for m in cuts] + [len(body)]
        for start, end in zip(starts, ends):
            name, sep, shape = body[start:end].partition(":")
            if not sep:
                raise Unsupported(base + 1 + start, whole_module=True)
            params.append((name.strip().lstrip("%"), shape.strip(), base + 1 + start + len(name) + 1))
    arrow = sig.find("->", close)
    if arrow < 0:
        raise Unsupported(base + close, whole_module=True)
    return params, sig[arrow + 2 :].strip()

# A whole instruction line in the form XLA prints, in one match: name, shape,
# opcode, operands without parentheses, attributes.  Lines this does not match
# go to scan_instruction (nested parentheses), then to the grammar.
_TUPLE_SHAPE = r"\((?:[^()\n]++|\((?:[^()\n]++|\((?:[^()\n]++|\([^()\n]*+\))*+\))*+\))*+\)"
_BUFFER_SHAPE = r"b\((?:[^()\n]++|\([^()\n]*+\))*+\)"
_LINE = re.compile(
    r"[ \t]*(ROOT[ \t]+)?%?([A-Za-z_][\w.\-]*)[ \t]*=[ \t]*"
    r"([a-z][a-z0-9]*\[[^\]\n]*\](?:\{[^}\n]*\})?|" + _TUPLE_SHAPE + "|" + _BUFFER_SHAPE + r")"
    r"[ \t]+([a-z][a-z0-9\-]*)\(([^()\n]*+)\)"
    # attributes exactly as XLA spaces them, so the raw tail prints back as is
    r"((?:, [A-Za-z_][\w\-]*=" + value_pattern(4) + r")*)[ \t\r]*"
)


def computation_header(line: str, line_off: int) -> CompRecord | None:
    """The record of a computation's header line (``ENTRY %main (p: f32[]) -> f32[] {``)
    starting at offset ``line_off``, its instructions still to come; None if it is not one."""
    hm = _COMP_HEAD.match(line)
    if not hm:
        return None
    sig = hm.group(3)
    return CompRecord(hm.group(2), line_off + hm.start(2), hm.group(1) is not None, sig.rstrip() if sig else None,
                      line_off + hm.start(3) if sig else 0)


def _shifted(r: InstrRecord, off: int) -> InstrRecord:
    """``r`` scanned from a statement's own text, its positions moved to where that
    statement starts in the module (``off``)."""
    attrs = r.attrs if isinstance(r.attrs, str) else [(k, v, p + off) for k, v, p in r.attrs]
    return r._replace(pos=r.pos + off, shape_pos=r.shape_pos + off, opcode_pos=r.opcode_pos + off,
                      operand_pos=r.operand_pos + off, attrs=attrs)


def scan_module(text: str, fallback_line, sink=None, *, core: ModuleType | None = COMPILED,
                whole_computations=None) -> ModuleRecord:
    """Scans a whole module.  ``fallback_line(start, end)`` parses a line the
    scanner cannot (the lark grammar) and returns its InstrRecord.  With
    ``sink(module_record, computation_record)`` each computation is handed on as
    soon as it is complete instead of being kept in the module record.  ``core``:
    the compiled line loop (None: this module's own loop; both give the same records).
    ``whole_computations(text, offset, module_record)``: the sink's own way through whole
    computations as XLA prints them (the compiled builder), returning (lines read,
    computations built, offset); what it leaves is scanned here."""
    bad = first_non_ascii(text)
    if bad is not None:
        raise Unsupported(bad, whole_module=True)  # the grammar says where and why
    # Lines by index for this loop; split only once it needs them (the compiled
    # builder usually reads the whole module first, and a split costs a str per line).
    lines: list[str] | None = None
    nlines = 0  # len(lines), once split
    size = len(text)
    i, off = 0, 0
    head = raw = ""
    while off <= size:  # line i starts at off
        end = text.find("\n", off)
        head = raw = text[off:] if end < 0 else text[off:end]
        if "/" in head:
            head = uncomment_line(head)
            if head is None:
                raise Unsupported(off, whole_module=True)
        if head.strip():
            break
        off += len(raw) + 1
        i += 1
    if off > size:
        raise Unsupported(len(text), whole_module=True)
    head = head.rstrip("\r")
    m = _MODULE_HEAD.match(head)
    if m:
        rec = ModuleRecord(m.group(1))
        attrs = split_attributes(head, m.end(), len(head))
        if attrs is None:
            raise Unsupported(off + m.end(), whole_module=True)
        rec.attrs = [(k, v, off + p) for k, v, p in attrs]
        off += len(raw) + 1
        i += 1
    else:  # no header: XLA names the module after its entry computation
        rec = ModuleRecord(None)
    section: list[str] | None = None
    line_match = _LINE.fullmatch
    attr_iter = ATTRIBUTE.finditer
    needs_resolution = NEEDS_RESOLUTION.search
    repeats_a_key = _repeats_a_key
    computations = rec.computations
    seen_computation = False
    ascii_text = text.isascii()  # the compiled core reads one byte per character
    scan_body = core.scan_body if core is not None and ascii_text else None
    if not ascii_text:
        whole_computations = None
    while off <= size:
        if whole_computations is not None and section is None:
            n, built, off = whole_computations(text, off, rec)
            i += n
            seen_computation = seen_computation or built > 0
            if off > size:
                break
        if lines is None:  # outside computations, one line at a time (stack-frame sections)
            end = text.find("\n", off)
            line = text[off:] if end < 0 else text[off:end]
        else:
            line = lines[i]
        line_off = off
        off += len(line) + 1
        i += 1
        stripped = line.strip()
        if not stripped:
            section = None
            continue
        if "/" in stripped:
            line = uncomment_line(line)
            if line is None:
                raise Unsupported(line_off, whole_module=True)  # a comment across lines
            stripped = line.strip()
            if not stripped:
                continue  # a comment line
        if section is not None and not stripped.endswith("{"):
            section.append(stripped)
            continue
        if stripped in _SECTIONS and not seen_computation:
            section = []
            rec.stack_frames.append((stripped, section))
            continue
        section = None
        line = line.rstrip("\r")
        if lines is None:  # a computation the Python loop reads: the rest split once, indices kept
            lines = [""] * (i - 1) + text[line_off:].split("\n")
            nlines = len(lines)
        comp = computation_header(line, line_off)
        if comp is None and _depth(line) > 0 and not line.rstrip().endswith("{"):  # a signature over lines: read as one
            joined = _continued(lines, i, line, head=True)
            if joined is not None:
                line, i = joined[0].rstrip("\r"), joined[1]
                off = line_off + len(line) + 1
                comp = computation_header(line, line_off)
        if comp is None:
            raise Unsupported(line_off, whole_module=True)
        instrs = comp.instrs
        append = instrs.append
        while True:
            if scan_body is not None:  # the lines _LINE matches, as the loop below reads them
                n, off = scan_body(text, off, instrs, InstrRecord)
                i += n
            if i >= nlines:
                raise Unsupported(len(text), whole_module=True)
            line = lines[i]
            line_off = off
            off += len(line) + 1
            i += 1
            lm = line_match(line)
            if lm is None and "/" in line:  # comments: blanked, so only this line is affected
                line = uncomment_line(line)
                if line is None:
                    raise Unsupported(line_off, whole_module=True)  # a comment across lines
                if not line.strip():
                    continue
                lm = line_match(line)
            if lm is not None:
                root, name, shape, opcode, operands, tail = lm.groups()
                if not tail:
                    attrs = []
                elif needs_resolution(tail) is None and (tail.count(", ") < 2 or not repeats_a_key(tail)):  # one key cannot repeat
                    attrs = tail  # validated by _LINE; split on first use
                else:
                    base = line_off + lm.start(6)
                    attrs = [(a.group(1), a.group(2), base + a.start(1)) for a in attr_iter(tail)]
                append(
                    InstrRecord(
                        line_off + lm.start(2),
                        root is not None,
                        name,
                        shape,
                        line_off + lm.start(3),
                        opcode,
                        line_off + lm.start(4),
                        operands,
                        line_off + lm.start(5),
                        attrs,
                    )
                )
                continue
            stripped = line.strip()
            if not stripped:
                continue
            if stripped[0] == "}":
                line = line.rstrip("\r")
                em = _COMP_END.match(line)
                if not em:
                    raise Unsupported(line_off, whole_module=True)
                if em.group(1):
                    cattrs = split_attributes(line, em.start(1), len(line))
                    if cattrs is None:
                        raise Unsupported(line_off + em.start(1), whole_module=True)
                    comp.attrs = [(k, v, line_off + p) for k, v, p in cattrs]
                seen_computation = True
                if sink is None:
                    computations.append(comp)
                else:
                    sink(rec, comp)
                break
            if _depth(line) > 0 or line.rstrip(" \t\r").endswith(_GOES_ON):  # a statement over several lines
                joined = _continued(lines, i, line)
                if joined is None:
                    raise Unsupported(line_off, whole_module=True)
                line, i, inside = joined
                off = line_off + len(line) + 1
                end = len(line.rstrip(" \t\r"))
                # broken between tokens only: read as one line (the breaks are spaces there, offsets
                # unchanged); broken inside brackets (a value's own line breaks): by the grammar
                r = None if inside else scan_instruction(line, 0, end)
                append(_shifted(r, line_off) if r is not None else fallback_line(line_off, line_off + end))
                continue
            end = line_off + len(line.rstrip(" \t\r"))  # before a blanked comment
            r = scan_instruction(text, line_off, end)
            if r is None:
                r = fallback_line(line_off, end)
            append(r)
    return rec
