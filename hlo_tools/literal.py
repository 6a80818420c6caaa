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


def _check_float(tok: str, etype: PrimitiveType, pos: int, what: str = "value") -> None:
    t = tok.lower().lstrip("+-")
    if t in ("inf", "nan"):
        return
    m = re.fullmatch(r"nan\((0x[0-9a-f]+)\)", t)
    if m:
        bits = _NAN_PAYLOAD_BITS.get(etype)
        payload = int(m.group(1), 16)
        if bits is None:
            raise LiteralError(f"{etype.value} does not support NaN payloads", pos)
        if payload >= 1 << bits:
            raise LiteralError(f"NaN payload {m.group(1)} is out of range for {etype.value} (max {hex((1 << bits) - 1)})", pos)
        return
    try:
        v = float(tok)
    except ValueError:
        raise LiteralError(f"expected a {etype.value} number, got {tok!r}", pos) from None
    if math.isinf(v):
        raise LiteralError(f"constant {tok} is out of range for double (+/-1.79769e+308)", pos)
    hi = _float_max(etype)
    # XLA rounds to the type first: only values that round to infinity are out of range
    if abs(v) > hi and math.isinf(_round_to(v, etype)):
        raise LiteralError(f"{what} {tok} is out of range for {etype.value}, namely [{-hi:g}, {hi:g}]", pos)


def _check_scalar(tok: str, etype: PrimitiveType, pos: int) -> None:
    if etype is PrimitiveType.PRED:
        if tok not in ("true", "false", "0", "1"):
            raise LiteralError(f"expected true or false, got {tok!r}", pos)
        return
    if etype.is_integral:
        try:
            v = int(tok, 0)
        except ValueError:
            try:
                f = float(tok)
            except ValueError:
                raise LiteralError(f"expected an integer, got {tok!r}", pos) from None
            if f != int(f):
                raise LiteralError(f"expected an integer, got {tok!r}", pos) from None
            v = int(f)
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


def _array(r: _Reader, shape: Shape, level: int) -> None:
    if level == shape.rank:
        _element(r, shape.element_type)
        return
    r.take("{")
    n = shape.dims[level]
    count = 0
    while r.peek()[0] != "}":
        if count and r.peek()[0] == ",":  # XLA's literal parser also reads elements without commas
            r.take(",")
        if r.peek()[0] == "}":
            break
        if count >= n:
            raise LiteralError(f"expects {n} elements in dimension {level}, but sees more", r.peek()[1])
        if level + 1 < shape.rank and r.peek()[0] != "{":
            raise LiteralError(f"expects nested array in rank {shape.rank}, but sees {level + 1}", r.peek()[1])
        if level + 1 == shape.rank and r.peek()[0] == "{":
            raise LiteralError(f"expects nested array in rank {level + 1}, but sees larger", r.peek()[1])
        _array(r, shape, level + 1)
        count += 1
    if count != n:
        raise LiteralError(f"expects {n} elements in dimension {level}, but sees {count}", r.peek()[1])
    r.take("}")


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
        _array(r, shape, 0)
    tok, pos = r.peek()
    if tok:
        raise LiteralError(f"unexpected {tok!r} after the literal", pos)
