"""Mutation fuzzing of the parser and the verifier.

Strategies turn a good module into hostile text (truncation, token swaps,
unicode digits, huge numbers, deep nesting, NaN/inf constants, duplicated
attributes, call cycles, comments, ...); ``Runner`` parses and verifies each
mutant in a child process under a time and a memory limit, because the
failures worth finding are the ones that take the process down with them
(hangs, runaway memory, recursion).  The contract checked: ``parse`` raises
only HloParseError with a location inside the text, ``verify`` only
VerificationError, and a module that verifies prints.

Used by tests/test_fuzz.py (a short seeded run) and bench/fuzz_campaign.py (a
long one).  Imports no jax.
"""

from __future__ import annotations

import json
import os
import random
import re
import select
import struct
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable

from hlo_tools.errors import HloParseError, VerificationError
from hlo_tools.opcode import HloOpcode
from hlo_tools.parser import parse
from hlo_tools.verifier import verify

#: classes that are failures (everything else is an accepted outcome)
FAILURES = ("crash", "bad_location", "hang", "died")

# ---------------------------------------------------------------------------
# Strategies: (rng, text, other seeds) -> mutant, or None when not applicable.

Strategy = Callable[[random.Random, str, list[str]], "str | None"]

_TOKEN = re.compile(r"\s+|[A-Za-z_%][\w.\-%]*|\d+|.", re.S)
_NUMBER = re.compile(r"(?<![\w.])\d+(?![\w])")
_DIGIT = re.compile(r"\d")
_SHAPE = re.compile(r"\b(?:pred|token|[sufc]\d+|bf16|f8\w+|f4\w+)\[[0-9,<=? ]*\](?:\{[^{}\n]*\})?")
_ELEMENT_TYPE = re.compile(r"\b(pred|token|[sufc]\d+|bf16)(?=\[)")
_LAYOUT = re.compile(r"(?<=\])\{[^{}\n]*\}")
_INSTR_LINE = re.compile(r"^[ \t]*(?:ROOT[ \t]+)?%?[\w.\-]+[ \t]*=.*$", re.M)
_OPCODE = re.compile(r"(?<=[\] )}])[ \t]+([a-z][a-z0-9\-]*)\(")
_ATTR = re.compile(r", ([A-Za-z_][\w\-]*)=(\{[^{}\n]*\}|\"(?:[^\"\\\n]|\\.)*\"|[^,\s{}()]+)")
_CONSTANT = re.compile(r"constant\(([^()\n]*)\)")
_PARAMETER = re.compile(r"parameter\((\d+)\)")
_OPERAND_LIST = re.compile(r"(?<=[a-z0-9\-])\(((?:%?[\w.\-]+)(?:, %?[\w.\-]+)*)\)")
_CALL_REF = re.compile(r"(to_apply|calls|body|condition|select|scatter)=%?([\w.\-]+)")
_COMP_HEAD = re.compile(r"^(ENTRY[ \t]+)?%?([\w.\-]+)[ \t]*(?:\(.*\)[ \t]*->.*)?\{[ \t]*$", re.M)

_HUGE = ["9223372036854775807", "9223372036854775808", "18446744073709551616", "1" * 20, "9" * 5000, "0" * 30 + "1", "-1", "-0"]
_ODD_DIGITS = ["\u00b2", "\u00b9", "\u0663", "\u06f3", "\u0966", "\u0a67", "\uff11", "\U0001d7d9", "\u2460"]
_ODD_CHARS = ["\x00", "\x0b", "\x0c", "\u2028", "\ufeff", "\u00a0", "\u200b", "\x7f", "\ud7ff", "\u540d", "\u00e9", "\\", '"', "'", "#", "%%"]
_ODD_LITERALS = ["nan", "-nan", "inf", "-inf", "1e999", "-1e999", "nan(0x7fffff)", "nan(0x" + "f" * 40 + ")", "NaN", "Infinity",
                 "1_000", "0x10", "+1", "1.5", ".5", "true", "{}", "{{}}", "{1,", "(1, 2)", "1" * 5000, "-" * 3]
_ODD_LAYOUTS = ["{}", "{0:T(a)}", "{0,0}", "{:}", "{0:S(1)T(2)}", "{99999999999999999999}", "{0:E(", "{-1}", "{0:P(f32[])}",
                "{0:T(8)(128)L(2)E(4)S(1)M(8)}", "{0:D(X)}", "{ 0 : T( * ) }", "{0:#(s32)}", "{0:#(foo)}"]
_ODD_PARAMS = ["", "x", "-1", "\u00b2", "99999999999999999999", "1 1", "0x1", "1.0", "9223372036854775807", "%p", "(0)"]
_TYPES = ["pred", "s8", "s32", "u4", "f16", "bf16", "f32", "f64", "c64", "token", "tuple", "opaque", "s33", "f8e4m3fn", "x"]
_OPCODES = [op.value for op in HloOpcode]


def _pick(rng: random.Random, matches: list):
    return rng.choice(matches) if matches else None


def _replace_span(text: str, start: int, end: int, new: str) -> str:
    return text[:start] + new + text[end:]


def _tokens(text: str) -> list[str]:
    return _TOKEN.findall(text)


def truncate(rng, text, seeds):
    return text[: rng.randrange(0, len(text) + 1)]


def truncate_in_line(rng, text, seeds):
    m = _pick(rng, list(_INSTR_LINE.finditer(text)))
    if m is None:
        return None
    return text[: rng.randrange(m.start(), m.end() + 1)]


def delete_tokens(rng, text, seeds):
    toks = _tokens(text)
    i = rng.randrange(len(toks))
    del toks[i : i + rng.randint(1, 4)]
    return "".join(toks)


def swap_tokens(rng, text, seeds):
    toks = _tokens(text)
    i, j = rng.randrange(len(toks)), rng.randrange(len(toks))
    toks[i], toks[j] = toks[j], toks[i]
    return "".join(toks)


def duplicate_token(rng, text, seeds):
    toks = _tokens(text)
    toks.insert(rng.randrange(len(toks)), rng.choice(toks))
    return "".join(toks)


def junk_chars(rng, text, seeds):
    pos = rng.randrange(len(text) + 1)
    junk = "".join(rng.choice(_ODD_CHARS) for _ in range(rng.randint(1, 4)))
    return text[:pos] + junk + text[pos:]


def unicode_digits(rng, text, seeds):
    m = _pick(rng, list(_DIGIT.finditer(text)))
    return None if m is None else _replace_span(text, m.start(), m.end(), rng.choice(_ODD_DIGITS))


def huge_number(rng, text, seeds):
    m = _pick(rng, list(_NUMBER.finditer(text)))
    return None if m is None else _replace_span(text, m.start(), m.end(), rng.choice(_HUGE))


def huge_dimension(rng, text, seeds):
    m = _pick(rng, list(_SHAPE.finditer(text)))
    if m is None:
        return None
    shape = m.group()
    inner = shape[shape.index("[") + 1 : shape.index("]")]
    dims = inner.split(",") if inner else ["1"]
    dims[rng.randrange(len(dims))] = rng.choice(_HUGE + ["?", "<=" + rng.choice(_HUGE), ""])
    return _replace_span(text, m.start(), m.end(), shape[: shape.index("[") + 1] + ",".join(dims) + "]")


def deep_tuple_shape(rng, text, seeds):
    m = _pick(rng, list(_SHAPE.finditer(text)))
    if m is None:
        return None
    d = rng.choice([99, 100, 101, 1000, 100_000])
    return _replace_span(text, m.start(), m.end(), "(" * d + m.group() + ")" * d)


def deep_operand_nesting(rng, text, seeds):
    m = _pick(rng, list(_OPERAND_LIST.finditer(text)))
    if m is None:
        return None
    d = rng.choice([50, 99, 100, 101, 3000])
    name = m.group(1).split(",")[0].strip()
    nested = "f32[] negate(" * d + name + ")" * d
    return _replace_span(text, m.start(1), m.start(1) + len(m.group(1).split(",")[0]), nested)


def deep_braces(rng, text, seeds):
    m = _pick(rng, list(_INSTR_LINE.finditer(text)))
    if m is None:
        return None
    d = rng.choice([100, 5000, 100_000])
    where = rng.choice(["attr", "literal"])
    if where == "literal":
        c = _pick(rng, list(_CONSTANT.finditer(text)))
        if c is not None:
            return _replace_span(text, c.start(1), c.end(1), "{" * d + "1" + "}" * d)
    return text[: m.end()] + ", foo=" + "{" * d + "}" * d + text[m.end() :]


def odd_constant(rng, text, seeds):
    m = _pick(rng, list(_CONSTANT.finditer(text)))
    if m is None:
        return None
    lit = m.group(1)
    nums = list(re.finditer(r"-?[\w.]+", lit))
    value = rng.choice(_ODD_LITERALS)
    if nums and rng.random() < 0.7:
        n = rng.choice(nums)
        return _replace_span(text, m.start(1) + n.start(), m.start(1) + n.end(), value)
    return _replace_span(text, m.start(1), m.end(1), value)


def constant_type(rng, text, seeds):
    """A constant's element type changed under its literal (s32 holding 1.5, pred holding 7)."""
    m = _pick(rng, [c for c in re.finditer(r"=\s*([a-z0-9]+)(\[[^\]]*\])\s*constant\(", text)])
    if m is None:
        return None
    return _replace_span(text, m.start(1), m.end(1), rng.choice(["s32", "u8", "pred", "s4", "f16", "c64", "bf16", "u64"]))


def duplicate_attribute(rng, text, seeds):
    m = _pick(rng, list(_ATTR.finditer(text)))
    if m is None:
        return None
    copy = m.group() if rng.random() < 0.7 else f", {m.group(1)}={rng.choice(['{}', '1', 'x', '{0}'])}"
    return text[: m.end()] + copy + text[m.end() :]


def drop_attribute(rng, text, seeds):
    m = _pick(rng, list(_ATTR.finditer(text)))
    return None if m is None else _replace_span(text, m.start(), m.end(), "")


def junk_attribute_value(rng, text, seeds):
    m = _pick(rng, list(_ATTR.finditer(text)))
    if m is None:
        return None
    junk = rng.choice(["{:}", "{a}", "{1,}", "{" + "9" * 30 + "}", "{[0:x]}", "-", "{{1}}", '"', "{1 2}", "XX", "{0:1}", "0_0x"])
    return _replace_span(text, m.start(2), m.end(2), junk)


def call_cycle(rng, text, seeds):
    """A called computation replaced by the computation the call is in (self
    recursion) or by the entry (a cycle through it)."""
    refs = list(_CALL_REF.finditer(text))
    m = _pick(rng, refs)
    if m is None:
        return None
    heads = [h for h in _COMP_HEAD.finditer(text) if h.start() < m.start()]
    if not heads:
        return None
    here = heads[-1].group(2)
    entry = next((h.group(2) for h in _COMP_HEAD.finditer(text) if h.group(1)), here)
    target = here if rng.random() < 0.6 else entry
    return _replace_span(text, m.start(2), m.end(2), target)


def swap_opcode(rng, text, seeds):
    m = _pick(rng, list(_OPCODE.finditer(text)))
    return None if m is None else _replace_span(text, m.start(1), m.end(1), rng.choice(_OPCODES + ["custom-call-start", "fusion-start", "nosuch-op"]))


def change_element_type(rng, text, seeds):
    m = _pick(rng, list(_ELEMENT_TYPE.finditer(text)))
    return None if m is None else _replace_span(text, m.start(1), m.end(1), rng.choice(_TYPES))


def junk_layout(rng, text, seeds):
    m = _pick(rng, list(_LAYOUT.finditer(text)))
    if m is None:
        s = _pick(rng, list(_SHAPE.finditer(text)))
        return None if s is None else text[: s.end()] + rng.choice(_ODD_LAYOUTS) + text[s.end() :]
    return _replace_span(text, m.start(), m.end(), rng.choice(_ODD_LAYOUTS))


def parameter_number(rng, text, seeds):
    m = _pick(rng, list(_PARAMETER.finditer(text)))
    return None if m is None else _replace_span(text, m.start(1), m.end(1), rng.choice(_ODD_PARAMS + [str(int(m.group(1)) + 1)]))


def comment(rng, text, seeds):
    lines = text.split("\n")
    i = rng.randrange(len(lines) + 1)
    kind = rng.choice(["line", "tail", "block", "unterminated", "tail_in_string", "block_multiline"])
    if kind == "line":
        lines.insert(i, rng.choice(["  // a comment", "// }", "//", "  /* x */", "/* a */ // b"]))
    elif kind == "tail" and i < len(lines):
        lines[i] += rng.choice([" // trailing", "// x", " /* c */", ' // "quoted']) 
    elif kind == "tail_in_string" and i < len(lines):
        lines[i] += ', foo="a // b /* c"'
    elif kind == "block_multiline":
        lines.insert(i, "/* spans\n   lines */")
    else:
        toks = _tokens(text)
        j = rng.randrange(len(toks) + 1)
        toks.insert(j, "/* c */" if kind == "block" else "/*")
        return "".join(toks)
    return "\n".join(lines)


def undefined_reference(rng, text, seeds):
    m = _pick(rng, list(_OPERAND_LIST.finditer(text)))
    if m is None:
        return None
    return _replace_span(text, m.start(1), m.start(1) + len(m.group(1).split(",")[0]), rng.choice(["%nosuch", "%", "nosuch.1", "%1", "%\u540d"]))


def swap_lines(rng, text, seeds):
    lines = text.split("\n")
    i, j = rng.randrange(len(lines)), rng.randrange(len(lines))
    lines[i], lines[j] = lines[j], lines[i]
    return "\n".join(lines)


def duplicate_line(rng, text, seeds):
    lines = text.split("\n")
    i = rng.randrange(len(lines))
    lines.insert(rng.randrange(len(lines) + 1), lines[i])
    return "\n".join(lines)


def delete_line(rng, text, seeds):
    lines = text.split("\n")
    del lines[rng.randrange(len(lines))]
    return "\n".join(lines)


def line_endings(rng, text, seeds):
    return rng.choice([text.replace("\n", "\r\n"), text.replace("  ", "\t"), text.replace("\n", "\r"), text.replace(" ", "  ")])


def brackets(rng, text, seeds):
    spots = [m.start() for m in re.finditer(r"[(){}\[\]]", text)]
    if not spots:
        return None
    i = rng.choice(spots)
    return text[:i] + (rng.choice("(){}[]") if rng.random() < 0.5 else "") + text[i + 1 :]


def splice(rng, text, seeds):
    other = rng.choice(seeds).split("\n")
    lines = text.split("\n")
    lines.insert(rng.randrange(len(lines) + 1), rng.choice(other))
    return "\n".join(lines)


def entry_first(rng, text, seeds):
    """The entry moved before the computations it calls (XLA's parser refuses;
    ours reads callees defined later)."""
    heads = list(_COMP_HEAD.finditer(text))
    entry = next((h for h in heads if h.group(1)), None)
    if entry is None or entry is heads[0]:
        return None
    end = text.find("\n}", entry.end())
    end = len(text) if end < 0 else end + 2
    body = text[entry.start() : end]
    rest = text[: entry.start()] + text[end:]
    first = heads[0].start()
    return rest[:first] + body + "\n\n" + rest[first:]


def long_value(rng, text, seeds):
    m = _pick(rng, list(_INSTR_LINE.finditer(text)))
    if m is None:
        return None
    n = rng.choice([10_000, 300_000])
    value = rng.choice(['"' + "a" * n + '"', "x" * n, "{" + ",".join(["1"] * (n // 2)) + "}"])
    return text[: m.end()] + ", backend_config=" + value + text[m.end() :]


def root_games(rng, text, seeds):
    lines = text.split("\n")
    idx = [i for i, l in enumerate(lines) if _INSTR_LINE.fullmatch(l)]
    if not idx:
        return None
    i = rng.choice(idx)
    if "ROOT" in lines[i]:
        lines[i] = lines[i].replace("ROOT ", "", 1)
    else:
        lines[i] = re.sub(r"^([ \t]*)", r"\1ROOT ", lines[i], count=1)
    return "\n".join(lines)


def tiny_inputs(rng, text, seeds):
    return rng.choice(["", " ", "\n", "HloModule", "HloModule m", "ENTRY", "ENTRY e {", "ENTRY e {\n}", "}", "{", "\x00",
                       "HloModule m\nENTRY e {\n ROOT p = f32[] parameter(0)\n}\n" * 2, "%" * 100, "(" * 100_000, "/*" * 1000])


def chain_module(kind: str, n: int, *, shape: str = "f32[]", callers_first: bool = False) -> str:
    """c0 .. c{n-1}; c_i calls (``kind`` "call") or fuses ("fusion") c_{i+1}, the
    last negates; ENTRY calls c0.  Callees come first, as in XLA's own prints (and
    in hostile2's {call,fusion}_chain_1000.hlo, which n=1000 gives byte for byte);
    ``callers_first``: the reverse, as a hand-written module may be."""
    comps = []
    for i in range(n):
        if i == n - 1:
            body = f"negate(p{i})"
        elif kind == "call":
            body = f"call(p{i}), to_apply=c{i + 1}"
        else:
            body = f"fusion(p{i}), kind=kLoop, calls=c{i + 1}"
        comps.append([f"c{i} {{", f"  p{i} = {shape} parameter(0)", f"  ROOT r{i} = {shape} {body}", "}", ""])
    top = "call(x), to_apply=c0" if kind == "call" else "fusion(x), kind=kLoop, calls=c0"
    out = [f"HloModule {kind}_chain_{n}", ""]
    for lines in (comps if callers_first else reversed(comps)):
        out += lines
    out += ["ENTRY main {", f"  x = {shape} parameter(0)", f"  ROOT y = {shape} {top}", "}", ""]
    return "\n".join(out)


def deep_chain(rng, text, seeds):
    """Issue 39: a chain of calls or of nested fusions thousands deep, in the
    element type and dims of one of the seed's shapes, callees first or last."""
    m = _pick(rng, list(re.finditer(r"\b(f32|bf16|f16|s32)\[[\d,]*\]", text)))
    return chain_module(rng.choice(["call", "fusion"]), rng.choice([100, 1000, 3000, 10_000]),
                        shape=m.group() if m is not None else "f32[4]", callers_first=rng.random() < 0.5)


def overflowing_dimensions(rng, text, seeds):
    """Dims that each fit in int64 but whose element count or byte size does not
    (XLA's shape validation rejects them)."""
    m = _pick(rng, list(re.finditer(r"\b(?:f32|bf16|s32|u8|pred|f64)\[([\d,]+)\]", text)))
    if m is None:
        return None
    rank = m.group(1).count(",") + 1  # the rank kept: the layout still fits
    per_dim = {1: [2**61, 2**62, 2**63 - 1], 2: [2**31, 2**32, 3037000500]}.get(rank, [2**21 + 1, 2**16 + 1])
    v = rng.choice(per_dim)
    return _replace_span(text, m.start(1), m.end(1), ",".join([str(v)] * rank))


_HOSTILE_NAMES = ["../../evil", "a/b", "x" * 5000, "%%x", "name with space", "\u00e9t\u00e9", "con", ".", "..",
                  "-dash", "1leading", "a.b.c.d.e.f.g", "null\x00byte", "ROOT", "ENTRY", "HloModule"]


def hostile_name(rng, text, seeds):
    """An instruction's name, everywhere it appears, replaced by one a file name
    or a lexer could trip on (issue 39: names become file names)."""
    m = _pick(rng, list(re.finditer(r"^[ \t]*(?:ROOT[ \t]+)?%?([A-Za-z_][\w.\-]*)[ \t]*=", text, re.M)))
    if m is None:
        return None
    old, new = m.group(1), rng.choice(_HOSTILE_NAMES)
    return re.sub(rf"(?<![\w.\-%]){re.escape(old)}(?![\w.\-])|%{re.escape(old)}(?![\w.\-])",
                  lambda x: ("%" if x.group().startswith("%") else "") + new, text)


STRATEGIES: dict[str, Strategy] = {
    f.__name__: f
    for f in (
        truncate, truncate_in_line, delete_tokens, swap_tokens, duplicate_token, junk_chars, unicode_digits,
        huge_number, huge_dimension, deep_tuple_shape, deep_operand_nesting, deep_braces, odd_constant,
        constant_type, duplicate_attribute, drop_attribute, junk_attribute_value, call_cycle, swap_opcode,
        change_element_type, junk_layout, parameter_number, comment, undefined_reference, swap_lines,
        duplicate_line, delete_line, line_endings, brackets, splice, entry_first, long_value, root_games,
        tiny_inputs, deep_chain, overflowing_dimensions, hostile_name,
    )
}


def mutate(strategy: str, seed_text: str, seeds: list[str], rng: random.Random) -> str | None:
    """One mutant of ``seed_text`` (None when the strategy does not apply to it)."""
    if not seed_text:
        return None
    return STRATEGIES[strategy](rng, seed_text, seeds)


# ---------------------------------------------------------------------------
# What the child does with one text.


def location_inside(text: str, line: int, column: int) -> bool:
    """Whether 1-based (line, column) names a place in ``text`` (column may be
    one past the end of its line, where a missing token belongs)."""
    lines = text.split("\n")
    return 1 <= line <= len(lines) and 1 <= column <= len(lines[line - 1]) + 1


def check_text(text: str, source: str = "fuzz.hlo") -> tuple[str, str]:
    """Parses, verifies and prints ``text``; returns (class, detail).  Classes:
    ok, parse_error, verify_error, and the failures crash / bad_location."""
    try:
        module = parse(text, source=source)
    except HloParseError as e:
        if e.source != source or not location_inside(text, e.line, e.column):
            return "bad_location", f"{e.source}:{e.line}:{e.column}: {e.message[:200]}"
        return "parse_error", e.message[:200]
    except BaseException as e:  # noqa: BLE001 - the point is to catch what escapes
        return "crash", f"parse: {type(e).__name__}: {str(e)[:300]}"
    try:
        verify(module)
    except VerificationError as e:
        msg = str(e).splitlines()[0]
        if "internal error" in msg:
            return "crash", f"verify: {msg[:300]}"
        return "verify_error", msg[:200]
    except BaseException as e:  # noqa: BLE001
        return "crash", f"verify: {type(e).__name__}: {str(e)[:300]}"
    try:
        module.to_text()
    except BaseException as e:  # noqa: BLE001
        return "crash", f"print: {type(e).__name__}: {str(e)[:300]}"
    return "ok", ""


def _worker_main(mem_mb: int) -> None:
    """Child loop: length-prefixed texts on stdin, one JSON result line each."""
    import resource

    limit = mem_mb * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    inp, out = sys.stdin.buffer, sys.stdout
    while True:
        head = inp.read(4)
        if len(head) < 4:
            return
        (n,) = struct.unpack("<I", head)
        text = inp.read(n).decode("utf-8", "surrogatepass")
        cls, detail = check_text(text)
        out.write(json.dumps({"cls": cls, "detail": detail}) + "\n")
        out.flush()


# ---------------------------------------------------------------------------
# The parent side.


@dataclass
class Result:
    strategy: str
    seed: str
    cls: str
    detail: str
    seconds: float
    text: str = field(repr=False, default="")


class Worker:
    """One child process running ``_worker_main``; restarted after a hang or death."""

    def __init__(self, mem_mb: int):
        self.mem_mb = mem_mb
        self.proc: subprocess.Popen | None = None

    def _start(self) -> subprocess.Popen:
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        env = dict(os.environ, PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""))
        return subprocess.Popen(
            [sys.executable, "-c", f"from tests.fuzz import _worker_main; _worker_main({self.mem_mb})"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, cwd=root,
        )

    def run(self, text: str, timeout: float) -> tuple[str, str]:
        if self.proc is None or self.proc.poll() is not None:
            self.proc = self._start()
        data = text.encode("utf-8", "surrogatepass")
        try:
            self.proc.stdin.write(struct.pack("<I", len(data)) + data)
            self.proc.stdin.flush()
        except BrokenPipeError:
            return self._died()
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        if not ready:
            self.close()
            return "hang", f"no answer in {timeout:g} s"
        line = self.proc.stdout.readline()
        if not line:
            return self._died()
        r = json.loads(line)
        return r["cls"], r["detail"]

    def _died(self) -> tuple[str, str]:
        rc = self.proc.wait()
        self.proc = None
        return "died", f"child exited with {rc} (memory limit or a crash in C)"

    def close(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None


@dataclass
class Campaign:
    """A seeded run: ``cases`` mutants spread evenly over the strategies."""

    seeds: list[tuple[str, str]]  # (label, text)
    seed: int = 0
    timeout: float = 10.0
    mem_mb: int = 2048
    results: list[Result] = field(default_factory=list)

    def plan(self, cases: int, strategies: list[str] | None = None) -> list[tuple[str, str, str]]:
        """(strategy, seed label, mutant) for ``cases`` mutants, deterministic in ``seed``."""
        names = strategies or list(STRATEGIES)
        texts = [t for _, t in self.seeds]
        out = []
        k = 0
        while len(out) < cases and k < cases * 4:
            name = names[k % len(names)]
            rng = random.Random(f"{self.seed}:{k}")
            label, text = self.seeds[rng.randrange(len(self.seeds))]
            k += 1
            mutant = mutate(name, text, texts, rng)
            if mutant is not None:
                out.append((name, label, mutant))
        return out

    def run(self, cases: int, *, jobs: int = 1, strategies: list[str] | None = None, progress=None) -> Counter:
        """Runs the mutants; returns counts by class (results kept in ``results``)."""
        plan = self.plan(cases, strategies)
        workers = [Worker(self.mem_mb) for _ in range(max(1, jobs))]

        def one(i: int) -> Result:
            name, label, mutant = plan[i]
            t0 = time.perf_counter()
            cls, detail = workers[i % len(workers)].run(mutant, self.timeout)
            return Result(name, label, cls, detail, time.perf_counter() - t0, mutant if cls in FAILURES else "")

        try:
            if len(workers) == 1:
                for i in range(len(plan)):
                    self.results.append(one(i))
                    if progress:
                        progress(self.results[-1])
            else:
                from concurrent.futures import ThreadPoolExecutor

                # worker i % jobs is used by one thread at a time: thread j takes cases j, j+jobs, ...
                def lane(j: int) -> list[Result]:
                    out = []
                    for i in range(j, len(plan), len(workers)):
                        out.append(one(i))
                        if progress:
                            progress(out[-1])
                    return out

                with ThreadPoolExecutor(len(workers)) as pool:
                    for lane_results in pool.map(lane, range(len(workers))):
                        self.results.extend(lane_results)
        finally:
            for w in workers:
                w.close()
        return Counter(r.cls for r in self.results)

    def failures(self) -> list[Result]:
        return [r for r in self.results if r.cls in FAILURES]
