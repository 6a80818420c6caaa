"""Shapes, layouts and primitive types of HLO, with XLA's text spelling.

Shapes are immutable values: passes build new ones instead of editing, and the
parser caches them by text (an LLM module repeats a few hundred shapes many
thousand times).
"""

from __future__ import annotations

import enum
import math
import re
from dataclasses import dataclass, field
from functools import cached_property


class PrimitiveType(enum.Enum):
    """XLA element types; the value is the HLO spelling."""

    PRED = "pred"
    S1 = "s1"
    S2 = "s2"
    S4 = "s4"
    S8 = "s8"
    S16 = "s16"
    S32 = "s32"
    S64 = "s64"
    U1 = "u1"
    U2 = "u2"
    U4 = "u4"
    U8 = "u8"
    U16 = "u16"
    U32 = "u32"
    U64 = "u64"
    F16 = "f16"
    F32 = "f32"
    F64 = "f64"
    BF16 = "bf16"
    F4E2M1FN = "f4e2m1fn"
    F8E3M4 = "f8e3m4"
    F8E4M3 = "f8e4m3"
    F8E4M3FN = "f8e4m3fn"
    F8E4M3B11FNUZ = "f8e4m3b11fnuz"
    F8E4M3FNUZ = "f8e4m3fnuz"
    F8E5M2 = "f8e5m2"
    F8E5M2FNUZ = "f8e5m2fnuz"
    F8E8M0FNU = "f8e8m0fnu"
    C64 = "c64"
    C128 = "c128"
    TOKEN = "token"
    OPAQUE = "opaque"
    TUPLE = "tuple"

    @property
    def bit_width(self) -> int:
        """Bits per element (0 for token/opaque/tuple)."""
        return _BIT_WIDTH.get(self, 0)

    @property
    def byte_width(self) -> int:
        """Bytes per element as XLA stores it unpacked (sub-byte types take 1)."""
        return (self.bit_width + 7) // 8

    @property
    def is_floating(self) -> bool:
        return self.value.startswith(("f", "bf"))

    @property
    def is_complex(self) -> bool:
        return self in (PrimitiveType.C64, PrimitiveType.C128)

    @property
    def is_integral(self) -> bool:
        return self.value[0] in "su" and self.value[1:].isdigit()

    @property
    def is_signed(self) -> bool:
        return self.value[0] == "s" or self.is_floating or self.is_complex


_BIT_WIDTH = {
    PrimitiveType.PRED: 8,
    PrimitiveType.C64: 64,
    PrimitiveType.C128: 128,
    PrimitiveType.BF16: 16,
}
for _t in PrimitiveType:
    _m = re.fullmatch(r"[suf](\d+)", _t.value)
    if _m:
        _BIT_WIDTH[_t] = int(_m.group(1))
    elif _t.value.startswith("f8"):
        _BIT_WIDTH[_t] = 8
    elif _t.value.startswith("f4"):
        _BIT_WIDTH[_t] = 4

PRIMITIVE_TYPES: dict[str, PrimitiveType] = {t.value: t for t in PrimitiveType if t is not PrimitiveType.TUPLE}


class ShapeError(ValueError):
    """A shape or layout text that does not follow XLA's syntax."""

    def __init__(self, message: str, offset: int = 0):
        super().__init__(message)
        self.offset = offset


@dataclass(frozen=True, slots=True)
class Layout:
    """A physical layout: minor-to-major order plus XLA's other layout fields.

    Fields after the ``:`` (tiles ``T(..)``, element size ``E(..)``, memory space
    ``S(..)``, dim level types ``D(..)``, split configs, ...) are kept verbatim in
    ``suffix`` so nothing is dropped; the common ones have typed views.
    """

    minor_to_major: tuple[int, ...]
    suffix: str = ""

    @classmethod
    def make(
        cls,
        minor_to_major: tuple[int, ...],
        tiles: tuple[tuple[int, ...], ...] = (),
        element_size_in_bits: int = 0,
        memory_space: int = 0,
    ) -> "Layout":
        """Builds a layout from typed fields, in XLA's print order (T, E, S)."""
        parts = []
        if tiles:
            parts.append("T" + "".join("(" + ",".join("*" if d < 0 else str(d) for d in t) + ")" for t in tiles))
        if element_size_in_bits:
            parts.append(f"E({element_size_in_bits})")
        if memory_space:
            parts.append(f"S({memory_space})")
        return cls(tuple(minor_to_major), "".join(parts))

    def _field(self, letter: str) -> str | None:
        m = re.search(r"(?<![A-Z])" + letter + r"((?:\([^)]*\))+)", self.suffix)
        return m.group(1) if m else None

    @property
    def tiles(self) -> tuple[tuple[int, ...], ...]:
        f = self._field("T")
        if not f:
            return ()
        return tuple(
            tuple(-1 if d.strip() == "*" else int(d) for d in t.split(",") if d.strip())
            for t in re.findall(r"\(([^)]*)\)", f)
        )

    @property
    def memory_space(self) -> int:
        f = self._field("S")
        return int(f.strip("()")) if f else 0

    @property
    def element_size_in_bits(self) -> int:
        f = self._field("E")
        return int(f.strip("()")) if f else 0

    def to_text(self) -> str:
        body = ",".join(map(str, self.minor_to_major))
        return "{" + body + (":" + self.suffix if self.suffix else "") + "}"

    def __str__(self) -> str:
        return self.to_text()


@dataclass(frozen=True)
class Shape:
    """An array shape, a tuple of shapes, a token, or a buffer.

    ``dynamic`` marks bounded-dynamic dimensions (``<=N``); ``dims`` holds the bound.
    An unbounded dynamic dimension (``?``) has dim -1.

    A buffer shape ``b(f32[16])`` (XLA's BUFFER kind: an array that is never
    copied, e.g. pinned by a ``Pin`` custom-call) is the array's fields with
    ``buffer=True``: as in XLA, ``element_type``, ``dims``, ``layout`` are the
    array's, ``is_array`` holds, and ``is_buffer`` tells the two apart.
    ``compatible`` never matches a buffer with a plain array.
    """

    element_type: PrimitiveType
    dims: tuple[int, ...] = ()
    layout: Layout | None = None
    tuple_shapes: tuple["Shape", ...] = ()
    dynamic: tuple[bool, ...] = field(default=())
    buffer: bool = False

    # -- constructors -------------------------------------------------------
    @classmethod
    def array(cls, element_type: PrimitiveType | str, dims, layout: Layout | tuple[int, ...] | None = None) -> "Shape":
        """An array shape; ``layout`` may be a minor-to-major tuple."""
        if isinstance(element_type, str):
            element_type = PRIMITIVE_TYPES[element_type]
        if isinstance(layout, tuple):
            layout = Layout(layout)
        return cls(element_type, tuple(dims), layout)

    @classmethod
    def scalar(cls, element_type: PrimitiveType | str) -> "Shape":
        """A rank-0 array of ``element_type`` (``f32[]``), the shape of a scalar constant."""
        return cls.array(element_type, ())

    @classmethod
    def tuple_of(cls, shapes) -> "Shape":
        return cls(PrimitiveType.TUPLE, tuple_shapes=tuple(shapes))

    @classmethod
    def token(cls) -> "Shape":
        return cls(PrimitiveType.TOKEN)

    @classmethod
    def buffer_of(cls, array: "Shape") -> "Shape":
        """The buffer shape ``b(array)``; ``array`` must be an array shape
        (XLA's MakeValidatedBufferShape: not a tuple, token, opaque or buffer)."""
        if not array.is_array or array.buffer:
            raise ValueError(f"a buffer shape holds an array shape, not {array.to_text()}")
        return cls(array.element_type, array.dims, array.layout, (), array.dynamic, True)

    # -- queries -------------------------------------------------------------
    @property
    def is_tuple(self) -> bool:
        return self.element_type is PrimitiveType.TUPLE

    @cached_property
    def is_array(self) -> bool:
        """Kept once asked (the shape is frozen): the analyses ask millions of times."""
        return self.element_type not in (PrimitiveType.TUPLE, PrimitiveType.TOKEN, PrimitiveType.OPAQUE)

    @property
    def is_token(self) -> bool:
        return self.element_type is PrimitiveType.TOKEN

    @property
    def is_buffer(self) -> bool:
        """A buffer shape ``b(...)`` (also ``is_array``, as XLA's IsArray)."""
        return self.buffer

    @property
    def buffer_shape(self) -> "Shape":
        """The array shape inside a buffer shape (XLA's buffer_shape())."""
        if not self.buffer:
            raise ValueError(f"{self.to_text()} is not a buffer shape")
        return Shape(self.element_type, self.dims, self.layout, (), self.dynamic)

    @property
    def rank(self) -> int:
        return len(self.dims)

    @property
    def is_scalar(self) -> bool:
        return self.is_array and not self.dims

    @property
    def is_dynamic(self) -> bool:
        return any(self.dynamic) or any(d < 0 for d in self.dims)

    @cached_property
    def num_elements(self) -> int:
        return math.prod(self.dims) if self.is_array else 0

    @cached_property
    def byte_size(self) -> int:
        """Bytes of the buffer(s): arrays (and buffer shapes, by their array)
        by element width (packed when the layout sets ``E(bits)``), tuples as
        the sum of their leaves (XLA also counts the tuple's pointer table; we
        do not, as cost models don't)."""
        if self.is_tuple:
            return sum(s.byte_size for s in self.tuple_shapes)
        if not self.is_array:
            return 0
        if self.layout is not None and self.layout.element_size_in_bits:
            return (self.num_elements * self.layout.element_size_in_bits + 7) // 8
        return self.num_elements * self.element_type.byte_width

    def leaves(self) -> list[tuple[tuple[int, ...], "Shape"]]:
        """(shape index, array shape) pairs in XLA's pre-order."""
        if not self.is_tuple:
            return [((), self)]
        out = []
        for i, s in enumerate(self.tuple_shapes):
            out.extend(((i, *idx), leaf) for idx, leaf in s.leaves())
        return out

    def subshape(self, index) -> "Shape":
        s = self
        for i in index:
            s = s.tuple_shapes[i]
        return s

    def with_layout(self, layout: Layout | tuple[int, ...] | None) -> "Shape":
        if isinstance(layout, tuple):
            layout = Layout(layout)
        return Shape(self.element_type, self.dims, layout, self.tuple_shapes, self.dynamic, self.buffer)

    def without_layout(self) -> "Shape":
        if self.is_tuple:
            return Shape.tuple_of(s.without_layout() for s in self.tuple_shapes)
        return Shape(self.element_type, self.dims, None, (), self.dynamic, self.buffer)

    def compatible(self, other: "Shape") -> bool:
        """XLA's ShapeUtil::Compatible: same kind (array, buffer, tuple, token,
        opaque), element types and rank; dims equal except where either side
        is unbounded (``?``); layouts and bounded-dynamic marks (``<=``) ignored."""
        if self.is_tuple or other.is_tuple:
            return (
                self.is_tuple
                and other.is_tuple
                and len(self.tuple_shapes) == len(other.tuple_shapes)
                and all(a.compatible(b) for a, b in zip(self.tuple_shapes, other.tuple_shapes))
            )
        if self.element_type is not other.element_type or self.buffer != other.buffer:
            return False
        if self.dims == other.dims:
            return True
        return len(self.dims) == len(other.dims) and all(a == b or a < 0 or b < 0 for a, b in zip(self.dims, other.dims))

    # -- text ----------------------------------------------------------------
    def to_text(self, print_layout: bool = True) -> str:
        """XLA's HumanStringWithLayout (or HumanString without layout)."""
        return self._text if print_layout else self._text_no_layout

    @cached_property
    def _text(self) -> str:
        return self._format(True)

    @cached_property
    def _text_no_layout(self) -> str:
        return self._format(False)

    def _format(self, print_layout: bool) -> str:
        if self.is_tuple:
            parts = []
            for i, s in enumerate(self.tuple_shapes):
                t = s.to_text(print_layout)
                parts.append(f"/*index={i}*/" + t if i and i % 5 == 0 else t)
            return "(" + ", ".join(parts) + ")"
        if self.buffer:
            return "b(" + self.buffer_shape._format(print_layout) + ")"
        dims = []
        for i, d in enumerate(self.dims):
            if d < 0:
                dims.append("?")
            elif self.dynamic and self.dynamic[i]:
                dims.append(f"<={d}")
            else:
                dims.append(str(d))
        text = f"{self.element_type.value}[{','.join(dims)}]"
        if print_layout and self.layout is not None and (self.dims or self.layout.suffix):
            text += self.layout.to_text()
        return text

    def __str__(self) -> str:
        return self.to_text()

    def __repr__(self) -> str:
        return f"Shape({self.to_text()!r})"


# ---------------------------------------------------------------------------
# Parsing.  A regex handles array shapes; tuples are read with an explicit stack
# (no recursion), so hostile nesting gives a located error, never a crash.

#: XLA reads dimension sizes and layout numbers as int64.
INT64_MAX = (1 << 63) - 1
#: Tuple shapes nest at most this deep.  XLA has no fixed bound (it crashes on
#: 100,000 levels); real modules nest a handful, and the IR's shape methods
#: recurse on tuples, so a bound keeps every later step safe.
MAX_TUPLE_DEPTH = 100

_WS = " \t\r\n"
_ARRAY_RE = re.compile(r"([a-z][a-z0-9]*)\[([^\]]*)\](?:[ \t\r\n]*(\{[^}]*\}))?")
_DIM_RE = re.compile(r"[ \t\r\n]*(<=)?[ \t\r\n]*([0-9]+|\?)[ \t\r\n]*")
_LAYOUT_RE = re.compile(r"\{[ \t\r\n]*([0-9,\s]*?)[ \t\r\n]*(?:(:)[ \t\r\n]*(.*?))?[ \t\r\n]*\}", re.S)
_COMMENT_RE = re.compile(r"/\*.*?\*/", re.S)

# The fields after ':' in XLA's order (ParseLayout in hlo_parser.cc): dim level
# types, tiles, tail padding, index and pointer types, element size, memory
# space, split configs, dynamic-shape metadata bytes.  A physical shape P(...)
# is only for sparse arrays, which XLA's parser then rejects, so it is left out.
_N = r"[ \t\r\n]*"
_I = _N + r"-?[0-9]+" + _N
_LEVEL = _N + r"[DCSH]" + _N + r"\+?" + _N + r"~?" + _N
_TILE_DIM = _N + r"(?:-?[0-9]+|\*)" + _N
_LAYOUT_SUFFIX = re.compile(
    _N
    + r"(?:D" + _N + r"\((?:" + _LEVEL + r"(?:," + _LEVEL + r")*)?\)" + _N + r")?"
    + r"(?:T" + _N + r"(?:\((?:" + _TILE_DIM + r"(?:," + _TILE_DIM + r")*)?\)" + _N + r")+)?"
    + r"(?:L" + _N + r"\(" + _I + r"\)" + _N + r")?"
    + r"(?:#" + _N + r"\(" + _N + r"([a-z][a-z0-9]*)" + _N + r"\)" + _N + r")?"
    + r"(?:\*" + _N + r"\(" + _N + r"([a-z][a-z0-9]*)" + _N + r"\)" + _N + r")?"
    + r"(?:E" + _N + r"\(" + _I + r"\)" + _N + r")?"
    + r"(?:S" + _N + r"\(" + _I + r"\)" + _N + r")?"
    + r"(?:SC" + _N + r"(?:\(" + _I + r":(?:" + _I + r"(?:," + _I + r")*)?\)" + _N + r")+)?"
    + r"(?:M" + _N + r"\(" + _I + r"\)" + _N + r")?"
)
_SUFFIX_INT = re.compile(r"[0-9]+")

_shape_cache: dict[str, Shape] = {}


def _int64(digits: str, what: str, offset: int) -> int:
    """``int(digits)`` for ASCII digits XLA reads as int64; a located error past
    that (and before Python's own 4300-digit limit could turn it into a crash)."""
    if len(digits.lstrip("0")) > 19 or int(digits) > INT64_MAX:
        shown = digits if len(digits) <= 24 else digits[:20] + f"... ({len(digits)} digits)"
        raise ShapeError(f"{what} {shown} is past the int64 range XLA reads", offset)
    return int(digits)


def _check_layout_suffix(suffix: str, offset: int) -> None:
    """The fields after ':' must be the ones XLA's parser reads, in its order."""
    m = _LAYOUT_SUFFIX.match(suffix)
    if m.end() != len(suffix):
        raise ShapeError(
            f"unexpected {suffix[m.end():m.end() + 20]!r} in a layout (expected D(..), T(..), L(n), #(type), *(type), "
            "E(n), S(n), SC(..), M(n), in that order)",
            offset + m.end(),
        )
    for g in (1, 2):
        if m.group(g) and m.group(g) not in PRIMITIVE_TYPES:
            raise ShapeError(f"unknown element type {m.group(g)!r} in a layout", offset + m.start(g))
    for d in _SUFFIX_INT.finditer(suffix):
        _int64(d.group(), "layout value", offset + d.start())


def parse_layout(text: str) -> Layout:
    """Parses ``{1,0:T(8,128)S(1)}``; ShapeError offsets are into ``text``."""
    m = _LAYOUT_RE.fullmatch(text)
    if not m:
        raise ShapeError(f"expected a layout like {{1,0}}, got {text[:40]!r}")
    if not m.group(1).strip() and not m.group(2):
        # XLA takes '{' as a layout only when an integer or ':' follows it
        raise ShapeError("a layout lists the minor-to-major order of the dimensions, like {1,0}; '{}' is not a layout")
    minor_to_major = []
    pos = m.start(1)
    for piece in m.group(1).split(",") if m.group(1).strip() else ():
        digits = piece.strip()
        if not digits.isascii() or not digits.isdigit():
            raise ShapeError(f"bad minor-to-major in layout {text[:40]!r}", pos)
        minor_to_major.append(_int64(digits, "layout dimension", pos + piece.index(digits)))
        pos += len(piece) + 1
    suffix = (m.group(3) or "").strip()
    if suffix:
        _check_layout_suffix(suffix, m.start(3))
    return Layout(tuple(minor_to_major), suffix)


def _parse_dims(text: str, where: int) -> tuple[tuple[int, ...], tuple[bool, ...]]:
    if not text.strip(_WS):
        return (), ()
    dims, dyn = [], []
    off = where
    for part in text.split(","):
        m = _DIM_RE.fullmatch(part)
        if not m:
            raise ShapeError(f"expected a dimension size, got {part.strip()[:40]!r}", off + len(part) - len(part.lstrip()))
        if m.group(2) == "?":
            dims.append(-1)
            dyn.append(True)
        else:
            dims.append(_int64(m.group(2), "dimension size", off + m.start(2)))
            dyn.append(bool(m.group(1)))
        off += len(part) + 1
    return tuple(dims), (tuple(dyn) if any(dyn) else ())


def _skip(text: str, pos: int) -> int:
    """Skips whitespace and ``/* ... */`` comments (XLA's lexer does the same)."""
    n = len(text)
    while pos < n:
        c = text[pos]
        if c in _WS:
            pos += 1
        elif text.startswith("/*", pos):
            end = text.find("*/", pos + 2)
            if end < 0:
                raise ShapeError("unterminated /* comment", pos)
            pos = end + 2
        else:
            break
    return pos


def _array_at(text: str, pos: int) -> tuple[Shape, int]:
    m = _ARRAY_RE.match(text, pos)
    if not m:
        raise ShapeError("expected a shape such as f32[2,4]{1,0}, a tuple (...) or a buffer b(...)", pos)
    type_name = m.group(1)
    etype = PRIMITIVE_TYPES.get(type_name)
    if etype is None:
        raise ShapeError(f"unknown element type {type_name!r}", m.start(1))
    dims, dyn = _parse_dims(m.group(2), m.start(2))
    if (dims or m.group(3)) and etype in (PrimitiveType.TOKEN, PrimitiveType.OPAQUE):
        raise ShapeError(f"{type_name}[] takes no dimensions or layout", m.start(2) if dims else m.start(3))
    layout = None
    if m.group(3):
        try:
            layout = parse_layout(m.group(3))
        except ShapeError as e:
            raise ShapeError(str(e), m.start(3) + e.offset) from None
        if sorted(layout.minor_to_major) != list(range(len(dims))):
            raise ShapeError(
                f"layout {m.group(3)[:40]} is not a permutation of the {len(dims)} dimensions of {type_name}[{m.group(2)}]",
                m.start(3),
            )
    return Shape(etype, dims, layout, (), dyn), m.end()


def _buffer_at(text: str, pos: int, open_pos: int) -> tuple[Shape, int]:
    """``b(f32[16]{0})`` with its ``(`` at ``open_pos``: a buffer of one array
    shape (XLA reads a shape there and rejects all but an array)."""
    inner = _skip(text, open_pos + 1)
    if text.startswith("(", inner):
        raise ShapeError("a buffer shape b(...) holds an array shape, not a tuple", inner)
    if text.startswith("b", inner) and text.startswith("(", _skip(text, inner + 1)):
        raise ShapeError("a buffer shape b(...) holds an array shape, not a buffer", inner)
    array, end = _array_at(text, inner)
    if not array.is_array:
        raise ShapeError(f"a buffer shape b(...) holds an array shape, not {array.element_type.value}[]", inner)
    end = _skip(text, end)
    if not text.startswith(")", end):
        raise ShapeError("expected ')' at the end of the buffer shape b(...)", end)
    return Shape(array.element_type, array.dims, array.layout, (), array.dynamic, True), end + 1


def _parse_at(text: str, pos: int) -> tuple[Shape, int]:
    """Parses one shape starting at ``pos``; returns it and the end offset."""
    open_tuples: list[list[Shape]] = []  # elements read so far of each open '('
    while True:
        pos = _skip(text, pos)
        if text.startswith("(", pos):
            if len(open_tuples) >= MAX_TUPLE_DEPTH:
                raise ShapeError(f"tuple shapes nest deeper than {MAX_TUPLE_DEPTH} levels", pos)
            open_tuples.append([])
            pos = _skip(text, pos + 1)
            if not text.startswith(")", pos):
                continue  # the first element follows
            pos += 1
            shape = Shape.tuple_of(open_tuples.pop())
        elif text.startswith("b", pos) and text.startswith("(", _skip(text, pos + 1)):
            shape, pos = _buffer_at(text, pos, _skip(text, pos + 1))
        else:
            shape, pos = _array_at(text, pos)
        # hand the finished shape to the tuple around it; close every tuple that ends here
        while open_tuples:
            open_tuples[-1].append(shape)
            pos = _skip(text, pos)
            if text.startswith(",", pos):
                pos += 1
                break
            if not text.startswith(")", pos):
                raise ShapeError("expected ',' or ')' in tuple shape", pos)
            pos += 1
            shape = Shape.tuple_of(open_tuples.pop())
        else:
            return shape, pos


def parse_shape(text: str) -> Shape:
    """Parses a whole shape text; results are cached by text."""
    s = _shape_cache.get(text)
    if s is not None:
        return s
    shape, end = _parse_at(text, 0)
    end = _skip(text, end)
    if end < len(text):
        raise ShapeError(f"unexpected text after shape: {text[end:end + 20]!r}", end)
    if len(_shape_cache) < 100_000:
        _shape_cache[text] = shape
    return shape


def parse_shape_prefix(text: str, pos: int = 0) -> tuple[Shape, int]:
    """Parses the shape that starts at ``pos`` and returns (shape, end offset)."""
    return _parse_at(text, pos)
