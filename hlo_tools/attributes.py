"""Typed views of HLO attributes that passes need, over their exact text.

The IR stores each attribute as the text XLA printed; the functions here parse
that text on demand and format typed values back in XLA's spelling, so a module
that no pass touched prints back byte-for-byte.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Callable

from .text import split_top_level


def typed(key: str, parse: Callable[[str], Any], fmt: Callable[[Any], str]) -> property:
    """A property on Instruction that reads/writes attribute ``key`` through parse/fmt."""

    def get(self):
        raw = self.attributes.get(key)
        return None if raw is None else parse(raw)

    def set_(self, value):  # through set_attribute: the one guarded write
        self.set_attribute(key, None if value is None else fmt(value))

    return property(get, set_, doc=f"The ``{key}`` attribute, typed (None when absent).")


# -- integer lists: dimensions={0,1} ---------------------------------------------
def parse_int_list(raw: str) -> tuple[int, ...]:
    """``{0,1}`` -> (0, 1); ValueError naming the text when it is not that."""
    body = raw.strip()
    if body.startswith("{") and body.endswith("}"):
        body = body[1:-1]
    try:
        return tuple(int(x) for x in body.split(",") if x.strip())
    except ValueError:
        raise ValueError(f"{raw[:60]!r} is not a braced list of integers like {{0,1}}") from None


def format_int_list(values) -> str:
    return "{" + ",".join(str(int(v)) for v in values) + "}"


# -- slice={[0:3:1], [0:4]} -----------------------------------------------------------
def parse_slice(raw: str) -> tuple[tuple[int, int, int], ...]:
    out = []
    for m in re.finditer(r"\[\s*(-?\d+)\s*:\s*(-?\d+)\s*(?::\s*(-?\d+)\s*)?\]", raw):
        out.append((int(m.group(1)), int(m.group(2)), int(m.group(3) or 1)))
    return tuple(out)


def format_slice(dims) -> str:
    dims = [tuple(d) + (1,) * (3 - len(d)) for d in dims]
    strided = any(d[2] != 1 for d in dims)
    parts = [f"[{a}:{b}:{c}]" if strided else f"[{a}:{b}]" for a, b, c in dims]
    return "{" + ", ".join(parts) + "}"


# -- padding=0_0x1_1_0 ----------------------------------------------------------------------
def parse_padding(raw: str) -> tuple[tuple[int, int, int], ...]:
    out = []
    for dim in raw.strip().split("x"):
        if not dim:
            continue
        nums = [int(n) for n in re.findall(r"-?\d+", dim)]
        out.append((nums[0], nums[1], nums[2] if len(nums) > 2 else 0))
    return tuple(out)


def format_padding(dims) -> str:
    dims = [tuple(d) + (0,) * (3 - len(d)) for d in dims]
    interior = any(d[2] for d in dims)
    return "x".join(f"{lo}_{hi}_{it}" if interior else f"{lo}_{hi}" for lo, hi, it in dims)


# -- window={size=3x3 stride=2x2 pad=1_1x1_1 ...} ---------------------------------------
@dataclass(frozen=True)
class Window:
    """A convolution / reduce-window window, one entry per spatial dimension."""

    size: tuple[int, ...]
    stride: tuple[int, ...] = ()
    pad: tuple[tuple[int, int], ...] = ()
    lhs_dilate: tuple[int, ...] = ()
    rhs_dilate: tuple[int, ...] = ()
    rhs_reversal: tuple[int, ...] = ()

    def dim(self, name: str, i: int):
        values = getattr(self, name)
        if values:
            return values[i]
        return (0, 0) if name == "pad" else (0 if name == "rhs_reversal" else 1)


def parse_window(raw: str) -> Window:
    fields: dict[str, Any] = {}
    body = raw.strip().strip("{}")
    for m in re.finditer(r"(\w+)=(\S+)", body):
        key, value = m.group(1), m.group(2)
        if key == "pad":
            fields[key] = tuple(tuple(int(n) for n in d.split("_")) for d in value.split("x"))
        else:
            fields[key] = tuple(int(n) for n in value.split("x"))
    return Window(**fields)


def format_window(w: Window) -> str:
    n = len(w.size)
    parts = ["size=" + "x".join(map(str, w.size))] if n else []
    if w.stride and any(s != 1 for s in w.stride):
        parts.append("stride=" + "x".join(map(str, w.stride)))
    if w.pad and any(p != (0, 0) for p in w.pad):
        parts.append("pad=" + "x".join(f"{lo}_{hi}" for lo, hi in w.pad))
    if w.lhs_dilate and any(s != 1 for s in w.lhs_dilate):
        parts.append("lhs_dilate=" + "x".join(map(str, w.lhs_dilate)))
    if w.rhs_dilate and any(s != 1 for s in w.rhs_dilate):
        parts.append("rhs_dilate=" + "x".join(map(str, w.rhs_dilate)))
    if w.rhs_reversal and any(w.rhs_reversal):
        parts.append("rhs_reversal=" + "x".join(map(str, w.rhs_reversal)))
    return "{" + " ".join(parts) + "}"


# -- dim_labels=b01f_01io->b01f ----------------------------------------------------------
@dataclass(frozen=True)
class ConvolutionDimensionNumbers:
    """Dimension numbers of a convolution, read from XLA's ``dim_labels``."""

    input_batch_dimension: int
    input_feature_dimension: int
    input_spatial_dimensions: tuple[int, ...]
    kernel_input_feature_dimension: int
    kernel_output_feature_dimension: int
    kernel_spatial_dimensions: tuple[int, ...]
    output_batch_dimension: int
    output_feature_dimension: int
    output_spatial_dimensions: tuple[int, ...]
    text: str = ""


def _labels(part: str, a: str, b: str) -> tuple[int, int, tuple[int, ...]]:
    spatial = sorted((c, i) for i, c in enumerate(part) if c.isdigit())
    return part.index(a), part.index(b), tuple(i for _, i in spatial)


def parse_dim_labels(raw: str) -> ConvolutionDimensionNumbers:
    m = re.fullmatch(r"\s*(\w+)_(\w+)->(\w+)\s*", raw)
    if not m:
        raise ValueError(f"dim_labels {raw!r} is not like b01f_01io->b01f")
    lhs, rhs, out = m.groups()
    ib, if_, isp = _labels(lhs, "b", "f")
    ki, ko, ksp = _labels(rhs, "i", "o")
    ob, of, osp = _labels(out, "b", "f")
    return ConvolutionDimensionNumbers(ib, if_, isp, ki, ko, ksp, ob, of, osp, raw.strip())


def format_dim_labels(d: ConvolutionDimensionNumbers | str) -> str:
    if isinstance(d, str):
        return d

    def spell(rank: int, a: int, ca: str, b: int, cb: str, spatial: tuple[int, ...]) -> str:
        chars = ["?"] * rank
        chars[a], chars[b] = ca, cb
        for k, dim in enumerate(spatial):
            chars[dim] = str(k)
        return "".join(chars)

    n = len(d.input_spatial_dimensions) + 2
    return (
        spell(n, d.input_batch_dimension, "b", d.input_feature_dimension, "f", d.input_spatial_dimensions)
        + "_"
        + spell(n, d.kernel_input_feature_dimension, "i", d.kernel_output_feature_dimension, "o", d.kernel_spatial_dimensions)
        + "->"
        + spell(n, d.output_batch_dimension, "b", d.output_feature_dimension, "f", d.output_spatial_dimensions)
    )


# -- dot dimension numbers ---------------------------------------------------------------
_DOT_KEYS = ("lhs_batch_dims", "lhs_contracting_dims", "rhs_batch_dims", "rhs_contracting_dims")


@dataclass(frozen=True)
class DotDimensionNumbers:
    lhs_batch_dims: tuple[int, ...] = ()
    lhs_contracting_dims: tuple[int, ...] = ()
    rhs_batch_dims: tuple[int, ...] = ()
    rhs_contracting_dims: tuple[int, ...] = ()

    @classmethod
    def from_attributes(cls, attrs: dict[str, str | None]) -> "DotDimensionNumbers":
        return cls(*(parse_int_list(attrs[k]) if attrs.get(k) else () for k in _DOT_KEYS))

    def to_attributes(self, attrs: dict[str, str | None]) -> None:
        """Writes the four lists in XLA's order, omitting empty ones as XLA does."""
        rest = {k: v for k, v in attrs.items() if k not in _DOT_KEYS}
        attrs.clear()
        for k in _DOT_KEYS:
            v = getattr(self, k)
            if v:
                attrs[k] = format_int_list(v)
        attrs.update(rest)


# -- strings ------------------------------------------------------------------------------
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", '"': '"', "\\": "\\", "'": "'", "0": "\0"}


def parse_string(raw: str) -> str:
    """Unescapes an HLO string literal (C escapes)."""
    raw = raw.strip()
    if len(raw) < 2 or raw[0] != '"' or raw[-1] != '"':
        return raw
    body = raw[1:-1]
    if "\\" not in body:
        return body
    return re.sub(r"\\(x[0-9a-fA-F]{2}|.)", lambda m: chr(int(m.group(1)[1:], 16)) if m.group(1)[0] == "x" and len(m.group(1)) == 3 else _ESCAPES.get(m.group(1), m.group(1)), body)


def format_string(value: str) -> str:
    """Escapes like absl::CEscape, which XLA uses to print strings."""
    out = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\t", "\\t").replace("\r", "\\r").replace("'", "\\'")
    return '"' + out + '"'


# -- metadata={op_name="..." source_line=3} ---------------------------------------------------
_META_RE = re.compile(r'(\w+)=("(?:[^"\\]|\\.)*"|[^\s}]+)')


def parse_metadata(raw: str) -> dict[str, str | int]:
    out: dict[str, str | int] = {}
    for m in _META_RE.finditer(raw.strip()[1:-1] if raw.strip().startswith("{") else raw):
        v = m.group(2)
        out[m.group(1)] = parse_string(v) if v.startswith('"') else (int(v) if re.fullmatch(r"-?\d+", v) else v)
    return out


def format_metadata(meta: dict[str, Any]) -> str:
    parts = []
    for k, v in meta.items():
        parts.append(f"{k}={v}" if isinstance(v, int) and not isinstance(v, bool) else f"{k}={format_string(str(v))}")
    return "{" + " ".join(parts) + "}"


# -- sharding -----------------------------------------------------------------------------
@dataclass(frozen=True)
class Sharding:
    """A sharding annotation: kind plus the common fields; ``text`` is exact."""

    kind: str  # replicated | maximal | manual | tiled | tuple | unknown
    text: str
    device: int | None = None
    tile_assignment_dims: tuple[int, ...] = ()
    elements: tuple["Sharding", ...] = field(default=())


def parse_sharding(raw: str) -> Sharding:
    text = raw.strip()
    body = text[1:-1].strip() if text.startswith("{") and text.endswith("}") else text
    if body.startswith("{"):
        return Sharding("tuple", text, elements=tuple(parse_sharding(p.strip()) for p, _ in split_top_level(body) if p.strip()))
    if body.startswith("replicated"):
        return Sharding("replicated", text)
    if body.startswith("manual"):
        return Sharding("manual", text)
    m = re.match(r"maximal device=(\d+)", body)
    if m:
        return Sharding("maximal", text, device=int(m.group(1)))
    m = re.match(r"devices=\[([\d,]+)\]", body)
    if m:
        return Sharding("tiled", text, tile_assignment_dims=tuple(int(x) for x in m.group(1).split(",")))
    return Sharding("unknown", text)


def format_sharding(s: Sharding | str) -> str:
    return s if isinstance(s, str) else s.text


# -- backend_config ------------------------------------------------------------------------
def parse_backend_config(raw: str | None):
    """Parsed JSON when the config is JSON (bare ``{...}`` or a quoted string of
    JSON); otherwise the text itself (unescaped when quoted)."""
    if raw is None:
        return None
    text = parse_string(raw) if raw.startswith('"') else raw
    if text.startswith("{") or text.startswith("["):
        try:
            return json.loads(text)
        except ValueError:
            return text
    return text


def format_backend_config(value) -> str:
    if isinstance(value, str):
        return value if value.startswith(("{", '"')) else format_string(value)
    return json.dumps(value, separators=(",", ":"))


# -- printing helpers -------------------------------------------------------------------
_BRACED_KEYS = frozenset({"branch_computations", "called_computations"})


def printed_value(instr, key: str) -> str | None:
    """Text of an attribute that the IR stores as objects (called computations,
    control predecessors)."""
    if key == "control-predecessors":
        preds = instr._control_predecessors
        return "{" + ", ".join("%" + p.name for p in preds) + "}" if preds else None
    comps = instr._called.get(key)
    if comps is None:
        return instr.attributes.get(key)
    if key in _BRACED_KEYS or len(comps) != 1:
        return "{" + ", ".join("%" + c.name for c in comps) + "}"
    return "%" + comps[0].name


_FORMATTERS: dict[str, Callable[[Any], str]] = {
    "dimensions": format_int_list,
    "dynamic_slice_sizes": format_int_list,
    "lhs_batch_dims": format_int_list,
    "lhs_contracting_dims": format_int_list,
    "rhs_batch_dims": format_int_list,
    "rhs_contracting_dims": format_int_list,
    "slice": format_slice,
    "padding": format_padding,
    "window": format_window,
    "dim_labels": format_dim_labels,
    "metadata": format_metadata,
    "custom_call_target": format_string,
    "backend_config": format_backend_config,
}


def format_value(key: str, value) -> str:
    """Attribute text for a typed value (strings are taken as HLO text already)."""
    if isinstance(value, str):
        return value
    fmt = _FORMATTERS.get(key)
    if fmt is not None:
        return fmt(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, (tuple, list)) and all(isinstance(v, int) for v in value):
        return format_int_list(value)
    if isinstance(value, (Window,)):
        return format_window(value)
    raise TypeError(f"don't know how to print attribute {key}={value!r}; pass its HLO text as a string")
