"""Checks a constant's literal text against its shape, as XLA's parser does:
nesting and element counts per dimension, value ranges per element type, NaN
payloads.  (Values are not stored: the IR keeps the literal text exactly.)"""

from __future__ import annotations

import math
import re
from functools import lru_cache

from .shape import PrimitiveType, Shape

_TOKEN = re.compile(r"\s*(?:/\*.*?\*/\s*)*([-+]?nan\([^()]*\)|[{}(),]|[^\s{}(),/]+|/)", re.S)


class LiteralError(ValueError):
    def __init__(self, message: str, offset: int):
        super().__init__(message)
        self.offset = offset


@lru_cache(maxsize=None)
def _float_max(etype: PrimitiveType) -> float:
    if etype is PrimitiveType.F64:
        return 1.7976931348623157e308
    if etype is PrimitiveType.F32:
        return 3.4028234663852886e38
    import ml_dtypes
    import numpy as np

    name = {PrimitiveType.F16: "float16"}.get(etype)
    dtype = np.dtype(name) if name else np.dtype(getattr(ml_dtypes, {"bf16": "bfloat16"}.get(etype.value, etype.value.replace("f8", "float8_").replace("f4", "float4_"))))
    return float(ml_dtypes.finfo(dtype).max)


@lru_cache(maxsize=None)
def _numpy_dtype(etype: PrimitiveType):
    import ml_dtypes
    import numpy as np

    names = {PrimitiveType.F16: "float16", PrimitiveType.F32: "float32", PrimitiveType.F64: "float64"}
    if etype in names:
        return np.dtype(names[etype])
    return np.dtype(getattr(ml_dtypes, {"bf16": "bfloat16"}.get(etype.value, etype.value.replace("f8", "float8_").replace("f4", "float4_"))))


def _round_to(v: float, etype: PrimitiveType) -> float:
    import numpy as np

    with np.errstate(over="ignore", invalid="ignore"):
        out = float(np.array(v, dtype=np.float64).astype(_numpy_dtype(etype)))
    if math.isnan(out):  # types without inf saturate to NaN on overflow
        return math.inf
    return out


#: mantissa bits of the types whose NaNs carry a payload; others have none
_NAN_PAYLOAD_BITS = {
    PrimitiveType.F16: 10,
    PrimitiveType.BF16: 7,
    PrimitiveType.F32: 23,
    PrimitiveType.F64: 52,
    PrimitiveType.F8E5M2: 2,
    PrimitiveType.F8E4M3: 3,
    PrimitiveType.F8E3M4: 4,
}


# The number tokens XLA's lexer reads (ASCII only: Python's int() and float()
# would also take '1_0', '+5', 'Infinity' or other scripts' digits).
_INT_TOKEN = re.compile(r"-?[0-9]+")
_FLOAT_TOKEN = re.compile(r"(?:-?[0-9]+(?:\.[0-9]*)?|-\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_NAN_PAYLOAD = re.compile(r"-?nan\((0x[0-9a-fA-F]+)\)")
#: longer integer tokens are out of every type's range (and past int()'s digit limit)
_MAX_INT_DIGITS = 24


def _check_float(tok: str, etype: PrimitiveType, pos: int, what: str = "value") -> None:
    if tok in ("inf", "-inf", "nan", "-nan"):
        return
    m = _NAN_PAYLOAD.fullmatch(tok)
    if m:
        bits = _NAN_PAYLOAD_BITS.get(etype)
        if bits is None:
            raise LiteralError(f"{etype.value} does not support NaN payloads", pos)
        if len(m.group(1)) > 20 or int(m.group(1), 16) >= 1 << bits:
            raise LiteralError(f"NaN payload {m.group(1)[:20]} is out of range for {etype.value} (max {hex((1 << bits) - 1)})", pos)
        return
    if not _FLOAT_TOKEN.fullmatch(tok):
        raise LiteralError(f"expected a {etype.value} number, got {tok[:30]!r}", pos)
    v = float(tok)
    if math.isinf(v):
        raise LiteralError(f"constant {tok[:30]} is out of range for double (+/-1.79769e+308)", pos)
    hi = _float_max(etype)
    # XLA rounds to the type first: only values that round to infinity are out of range
    if abs(v) > hi and math.isinf(_round_to(v, etype)):
        raise LiteralError(f"{what} {tok[:30]} is out of range for {etype.value}, namely [{-hi:g}, {hi:g}]", pos)


def _check_scalar(tok: str, etype: PrimitiveType, pos: int) -> None:
    if etype is PrimitiveType.PRED:
        # XLA reads true/false or any integer token (nonzero is true)
        if tok not in ("true", "false") and not (_INT_TOKEN.fullmatch(tok) and len(tok) <= _MAX_INT_DIGITS):
            raise LiteralError(f"expected true or false, got {tok[:30]!r}", pos)
        return
    if etype.is_integral:
        if not _INT_TOKEN.fullmatch(tok):
            # XLA: "expects integer" for 1.0, 1e3, inf, nan; a lexer error for the rest
            raise LiteralError(f"expected an integer, got {tok[:30]!r}", pos)
        if len(tok) > _MAX_INT_DIGITS:
            raise LiteralError(f"value {tok[:20]}... ({len(tok)} digits) is out of range for {etype.value}", pos)
        v = int(tok)
        bits = etype.bit_width
        lo, hi = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if etype.value.startswith("s") else (0, (1 << bits) - 1)
        if etype is PrimitiveType.U64:
            lo = -(1 << 63)  # XLA reads u64 literals as int64 and accepts -1
        if not lo <= v <= hi:
            raise LiteralError(f"value {tok} is out of range for {etype.value}, namely [{lo}, {hi}]", pos)
        return
    if etype.is_floating:
        _check_float(tok, etype, pos)


class _Reader:
    def __init__(self, text: str):
        self.toks = [(m.group(1), m.start(1)) for m in _TOKEN.finditer(text)]
        self.i = 0
        self.end = len(text)

    def peek(self) -> tuple[str, int]:
        return self.toks[self.i] if self.i < len(self.toks) else ("", self.end)

    def take(self, want: str | None = None) -> tuple[str, int]:
        tok, pos = self.peek()
        if want is not None and tok != want:
            raise LiteralError(f"expected '{want}', got {tok!r}" if tok else f"expected '{want}' at the end of the literal", pos)
        self.i += 1
        return tok, pos


def _element(r: _Reader, etype: PrimitiveType) -> None:
    if etype.is_complex:
        r.take("(")
        part = PrimitiveType.F32 if etype is PrimitiveType.C64 else PrimitiveType.F64
        re_tok, re_pos = r.take()
        r.take(",")
        im_tok, im_pos = r.take()
        r.take(")")
        _check_float(re_tok, part, re_pos, f"real part of {etype.value}")
        _check_float(im_tok, part, im_pos, f"imaginary part of {etype.value}")
        return
    tok, pos = r.take()
    if tok in ("{", "}", ",", "(", ")", ""):
        raise LiteralError(f"expected a value, got {tok!r}" if tok else "expected a value", pos)
    _check_scalar(tok, etype, pos)


def _array(r: _Reader, shape: Shape) -> None:
    """A nested ``{...}`` literal, read with an explicit stack of per-level
    element counts (a rank-100,000 shape must not exhaust Python's stack)."""
    rank, dims, etype = shape.rank, shape.dims, shape.element_type
    r.take("{")
    counts = [0]  # elements read so far at each open level
    while counts:
        level = len(counts) - 1
        n = dims[level]
        tok, pos = r.peek()
        if counts[-1] and tok == ",":  # XLA's literal parser also reads elements without commas
            r.take(",")
            tok, pos = r.peek()
        if not tok:
            raise LiteralError("expected '}' at the end of the literal", pos)
        if tok == "}":
            if counts[-1] != n:
                raise LiteralError(f"expects {n} elements in dimension {level}, but sees {counts[-1]}", pos)
            r.take("}")
            counts.pop()
            if counts:
                counts[-1] += 1
            continue
        if counts[-1] >= n:
            raise LiteralError(f"expects {n} elements in dimension {level}, but sees more", pos)
        if level + 1 < rank:
            if tok != "{":
                raise LiteralError(f"expects nested array in rank {rank}, but sees {level + 1}", pos)
            r.take("{")
            counts.append(0)
        else:
            if tok == "{":
                raise LiteralError(f"expects nested array in rank {level + 1}, but sees larger", pos)
            _element(r, etype)
            counts[-1] += 1


def check_literal(text: str, shape: Shape) -> None:
    """Raises LiteralError (offset into ``text``) when the literal does not fit."""
    body = text.strip()
    if body == "{...}" or shape.is_token or not shape.is_array and not shape.is_tuple:
        return
    if shape.is_tuple:
        return  # tuple literals: structure only checked by XLA; keep verbatim
    r = _Reader(text)
    if shape.rank > 0 and r.peek()[0] not in ("{", ""):  # one scalar fills the array, as XLA allows
        _element(r, shape.element_type)
    elif shape.rank == 0:
        if r.peek()[0] == "{":  # a rank-0 literal may be braced
            r.take("{")
            _element(r, shape.element_type)
            r.take("}")
        else:
            _element(r, shape.element_type)
    elif shape.num_elements == 0 and r.peek()[0] == "{":
        depth = 0
        while r.peek()[0]:
            tok, pos = r.take()
            if tok not in ("{", "}", ","):
                raise LiteralError(f"{shape.to_text(False)} has no elements, the literal has {tok!r}", pos)
            depth += {"{": 1, "}": -1}.get(tok, 0)
        return
    else:
        _array(r, shape)
    tok, pos = r.peek()
    if tok:
        raise LiteralError(f"unexpected {tok!r} after the literal", pos)
