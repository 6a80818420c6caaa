"""Result shapes of the common opcodes, from operands and attributes.

Used by the parser where the text leaves a shape out (XLA infers it) and by the
verifier to check the shapes a pass wrote.  Mirrors xla/service/shape_inference.cc
for the ops it covers; ``infer_shape`` returns None for the rest.
"""

from __future__ import annotations

import re

from . import attributes as A
from .opcode import BINARY_ELEMENTWISE, UNARY_ELEMENTWISE, HloOpcode
from .shape import Layout, PrimitiveType, Shape


class ShapeInferenceError(ValueError):
    """Operands that no result shape fits (wrong ranks, dims or types)."""


def default_layout(rank: int) -> Layout:
    return Layout(tuple(range(rank - 1, -1, -1)))


def _array(etype: PrimitiveType, dims) -> Shape:
    dims = tuple(dims)
    return Shape(etype, dims, default_layout(len(dims)))


def _like(s: Shape, etype: PrimitiveType, *others: Shape) -> Shape:
    """``s``'s dims and layout with element type ``etype``: what XLA infers for
    elementwise ops (the layout of the operand the result is modelled on, the
    element size dropped when the type changes; a dimension dynamic in any
    operand is dynamic in the result)."""
    layout = s.layout if s.layout is not None else default_layout(s.rank)
    if etype is not s.element_type and "E(" in layout.suffix:
        layout = Layout(layout.minor_to_major, re.sub(r"(?<![A-Z])E\(\d+\)", "", layout.suffix))
    dynamic = s.dynamic
    for o in others:
        if o.dynamic and o.rank == s.rank:
            dynamic = tuple(a or b for a, b in zip(dynamic or (False,) * s.rank, o.dynamic))
    return Shape(etype, s.dims, layout, (), dynamic)


def _attr(attrs: dict, key: str) -> str | None:
    return attrs.get(key)


def infer_shape(opcode: HloOpcode, operands: list[Shape], attrs: dict[str, str | None]) -> Shape | None:
    """The result shape (default layout), None where this module does not infer it.

    Raises ShapeInferenceError when the operands are inconsistent.
    """
    op = opcode
    if op in UNARY_ELEMENTWISE and op not in (HloOpcode.CONVERT, HloOpcode.BITCAST_CONVERT, HloOpcode.REDUCE_PRECISION):
        _need(op, operands, 1)
        s = operands[0]
        if op is HloOpcode.IS_FINITE:
            return _like(s, PrimitiveType.PRED)
        if op in (HloOpcode.REAL, HloOpcode.IMAG, HloOpcode.ABS) and s.element_type.is_complex:
            return _like(s, PrimitiveType.F32 if s.element_type is PrimitiveType.C64 else PrimitiveType.F64)
        return _like(s, s.element_type)
    if op is HloOpcode.REDUCE_PRECISION:
        _need(op, operands, 1)
        return _like(operands[0], operands[0].element_type)
    if op in BINARY_ELEMENTWISE and op is not HloOpcode.STOCHASTIC_CONVERT:
        _need(op, operands, 2)
        a, b = operands
        _same_dims(op, a, b)
        if op is HloOpcode.COMPARE:
            return _like(a, PrimitiveType.PRED, b)
        if op is HloOpcode.COMPLEX:
            return _like(a, PrimitiveType.C64 if a.element_type is PrimitiveType.F32 else PrimitiveType.C128, b)
        if a.element_type is not b.element_type:
            raise ShapeInferenceError(f"{op.value} needs operands of one element type, got {a} and {b}")
        return _like(a, a.element_type, b)
    if op is HloOpcode.SELECT:
        _need(op, operands, 3)
        pred, t, f = operands
        _same_dims(op, t, f)
        if pred.element_type is not PrimitiveType.PRED:
            raise ShapeInferenceError(f"select needs a pred[] predicate, got {pred}")
        if pred.dims and pred.dims != t.dims:
            raise ShapeInferenceError(f"select predicate {pred} does not match {t}")
        return _like(t, t.element_type, f, *([pred] if pred.dims else []))
    if op is HloOpcode.CLAMP:
        _need(op, operands, 3)
        lo, x, hi = operands
        for b in (lo, hi):
            if b.dims and b.dims != x.dims:
                raise ShapeInferenceError(f"clamp bound {b} does not match operand {x}")
        return _like(x, x.element_type, *(b for b in (lo, hi) if b.dims))
    if op is HloOpcode.FMA:
        _need(op, operands, 3)
        a, b, c = operands
        _same_dims(op, a, b)
        _same_dims(op, a, c)
        if not a.element_type is b.element_type is c.element_type:
            raise ShapeInferenceError(f"fma needs operands of one element type, got {a}, {b} and {c}")
        return _like(a, a.element_type, b, c)
    if op is HloOpcode.TUPLE:
        return Shape.tuple_of(operands)
    if op is HloOpcode.GET_TUPLE_ELEMENT:
        _need(op, operands, 1)
        t = operands[0]
        idx = int(_attr(attrs, "index") or -1)
        if not t.is_tuple or not 0 <= idx < len(t.tuple_shapes):
            raise ShapeInferenceError(f"get-tuple-element index {idx} is out of range for {t}")
        return t.tuple_shapes[idx]
    if op is HloOpcode.AFTER_ALL:
        return Shape.token()
    if op in (HloOpcode.GET_DIMENSION_SIZE, HloOpcode.PARTITION_ID, HloOpcode.REPLICA_ID):
        return _array(PrimitiveType.S32 if op is HloOpcode.GET_DIMENSION_SIZE else PrimitiveType.U32, ())
    if op is HloOpcode.DOT:
        _need(op, operands, 2)
        return _dot(operands[0], operands[1], A.DotDimensionNumbers.from_attributes(attrs))
    if op is HloOpcode.TRANSPOSE:
        _need(op, operands, 1)
        perm = A.parse_int_list(_attr(attrs, "dimensions") or "{}")
        s = operands[0]
        if sorted(perm) != list(range(s.rank)):
            raise ShapeInferenceError(f"transpose dimensions {list(perm)} are not a permutation of rank {s.rank}")
        # XLA permutes the layout with the dimensions: the bytes stay in place
        m2m = s.layout.minor_to_major if s.layout is not None else ()
        if sorted(m2m) != list(range(s.rank)):
            m2m = default_layout(s.rank).minor_to_major
        where = {d: i for i, d in enumerate(perm)}
        layout = Layout(tuple(where[d] for d in m2m), s.layout.suffix if s.layout is not None else "")
        dynamic = tuple(s.dynamic[p] for p in perm) if s.dynamic else ()
        return Shape(s.element_type, tuple(s.dims[p] for p in perm), layout, (), dynamic)
    if op is HloOpcode.CONCATENATE:
        dims = A.parse_int_list(_attr(attrs, "dimensions") or "{}")
        if len(dims) != 1 or not operands:
            raise ShapeInferenceError("concatenate needs operands and one dimension")
        d = dims[0]
        first = operands[0]
        if not 0 <= d < first.rank:
            raise ShapeInferenceError(f"concatenate dimension {d} is out of range for {first}")
        total = 0
        for s in operands:
            if s.rank != first.rank or any(a != b for i, (a, b) in enumerate(zip(s.dims, first.dims)) if i != d):
                raise ShapeInferenceError(f"concatenate operands {first} and {s} differ outside dimension {d}")
            total += s.dims[d]
        out = list(first.dims)
        out[d] = total
        return _array(first.element_type, out)
    if op is HloOpcode.SLICE:
        _need(op, operands, 1)
        s = operands[0]
        spec = A.parse_slice(_attr(attrs, "slice") or "{}")
        if len(spec) != s.rank:
            raise ShapeInferenceError(f"slice has {len(spec)} ranges for rank {s.rank}")
        return _array(s.element_type, ((hi - lo + st - 1) // st for lo, hi, st in spec))
    if op is HloOpcode.REDUCE:
        if not operands or len(operands) % 2:
            raise ShapeInferenceError("reduce needs N inputs and N init values")
        n = len(operands) // 2
        dims = set(A.parse_int_list(_attr(attrs, "dimensions") or "{}"))
        outs = [_array(s.element_type, (d for i, d in enumerate(s.dims) if i not in dims)) for s in operands[:n]]
        return outs[0] if n == 1 else Shape.tuple_of(outs)
    if op in (HloOpcode.COPY, HloOpcode.REVERSE, HloOpcode.OPTIMIZATION_BARRIER):
        _need(op, operands, 1)
        return operands[0] if op is HloOpcode.OPTIMIZATION_BARRIER else _like(operands[0], operands[0].element_type)
    if op is HloOpcode.PAD:
        _need(op, operands, 2)
        s = operands[0]
        cfg = A.parse_padding(_attr(attrs, "padding") or "")
        if len(cfg) != s.rank:
            raise ShapeInferenceError(f"padding has {len(cfg)} dimensions for rank {s.rank}")
        return _array(s.element_type, (lo + hi + d + max(d - 1, 0) * it for d, (lo, hi, it) in zip(s.dims, cfg)))
    if op in (HloOpcode.DYNAMIC_SLICE, HloOpcode.DYNAMIC_UPDATE_SLICE) and not (operands and operands[0].is_array):
        raise ShapeInferenceError(f"{op.value} needs an array operand to slice, got {len(operands)} operands")
    if op is HloOpcode.DYNAMIC_SLICE:
        sizes = A.parse_int_list(_attr(attrs, "dynamic_slice_sizes") or "{}")
        return _array(operands[0].element_type, sizes)
    if op is HloOpcode.DYNAMIC_UPDATE_SLICE:
        return _array(operands[0].element_type, operands[0].dims)
    if op is HloOpcode.CONVOLUTION:
        _need(op, operands, 2)
        return _convolution(operands[0], operands[1], attrs)
    if op is HloOpcode.REDUCE_WINDOW:
        if not operands or len(operands) % 2:
            raise ShapeInferenceError("reduce-window needs N inputs and N init values")
        n = len(operands) // 2
        window = A.parse_window(_attr(attrs, "window") or "{}")
        outs = []
        for s, init in zip(operands[:n], operands[n:]):
            if len(window.size) != s.rank:
                raise ShapeInferenceError(f"reduce-window window has {len(window.size)} dimensions for {s}")
            outs.append(_array(init.element_type, _windowed(s.dims, range(s.rank), window)))
        return outs[0] if n == 1 else Shape.tuple_of(outs)
    return None


def _windowed(dims, which, window) -> list[int]:
    """Output sizes of a windowed op over dims[which[i]] (XLA's InferWindowOutputShape):
    the base dilated and padded, the window dilated, then strided."""
    out = []
    for i, d in enumerate(which):
        size = dims[d]
        base = (size - 1) * window.dim("lhs_dilate", i) + 1 if size else 0
        lo, hi = window.dim("pad", i)
        padded = base + lo + hi
        span = (window.size[i] - 1) * window.dim("rhs_dilate", i) + 1
        stride = window.dim("stride", i)
        if stride < 1:
            raise ShapeInferenceError(f"window stride {stride} must be positive")
        out.append((padded - span) // stride + 1 if padded >= span else 0)
    return out


def _convolution(lhs: Shape, rhs: Shape, attrs) -> Shape:
    """XLA's InferConvolveShape for the shapes the parser infers (default layout)."""
    try:
        d = A.parse_dim_labels(_attr(attrs, "dim_labels") or "")
    except ValueError as e:
        raise ShapeInferenceError(str(e)) from None
    window = A.parse_window(_attr(attrs, "window") or "{}")
    spatial = len(d.input_spatial_dimensions)
    if lhs.rank != spatial + 2 or rhs.rank != spatial + 2 or len(window.size) != spatial:
        raise ShapeInferenceError(f"convolution of {lhs} and {rhs} needs {spatial} spatial dimensions in its window and operands")
    batch_groups = int(_attr(attrs, "batch_group_count") or 1)
    out = [0] * (spatial + 2)
    out[d.output_batch_dimension] = lhs.dims[d.input_batch_dimension] // max(batch_groups, 1)
    out[d.output_feature_dimension] = rhs.dims[d.kernel_output_feature_dimension]
    for o, size in zip(d.output_spatial_dimensions, _windowed(lhs.dims, d.input_spatial_dimensions, window)):
        out[o] = size
    etype = lhs.element_type
    if rhs.element_type is not etype and rhs.element_type.bit_width > etype.bit_width:
        etype = rhs.element_type
    return _array(etype, out)


def _need(op: HloOpcode, operands: list[Shape], n: int) -> None:
    if len(operands) != n:
        raise ShapeInferenceError(f"{op.value} takes {n} operand{'s' if n != 1 else ''}, got {len(operands)}")
    for s in operands:
        if not s.is_array and op not in (HloOpcode.TUPLE, HloOpcode.GET_TUPLE_ELEMENT, HloOpcode.OPTIMIZATION_BARRIER):
            raise ShapeInferenceError(f"{op.value} takes arrays, got {s}")


def _same_dims(op: HloOpcode, a: Shape, b: Shape) -> None:
    if a.dims != b.dims:
        raise ShapeInferenceError(f"{op.value} operands have different dimensions: {a} vs {b}")


def _dot(lhs: Shape, rhs: Shape, d: A.DotDimensionNumbers) -> Shape:
    for name, dims, s in (("lhs_batch", d.lhs_batch_dims, lhs), ("lhs_contracting", d.lhs_contracting_dims, lhs), ("rhs_batch", d.rhs_batch_dims, rhs), ("rhs_contracting", d.rhs_contracting_dims, rhs)):
        if any(not 0 <= x < s.rank for x in dims):
            raise ShapeInferenceError(f"dot {name}_dims {list(dims)} out of range for {s}")
    if len(d.lhs_batch_dims) != len(d.rhs_batch_dims) or len(d.lhs_contracting_dims) != len(d.rhs_contracting_dims):
        raise ShapeInferenceError("dot needs as many lhs as rhs batch (and contracting) dimensions")
    for a, b in zip(d.lhs_contracting_dims, d.rhs_contracting_dims):
        if lhs.dims[a] != rhs.dims[b]:
            raise ShapeInferenceError(f"dot contracting dimensions differ: {lhs} dim {a} vs {rhs} dim {b}")
    for a, b in zip(d.lhs_batch_dims, d.rhs_batch_dims):
        if lhs.dims[a] != rhs.dims[b]:
            raise ShapeInferenceError(f"dot batch dimensions differ: {lhs} dim {a} vs {rhs} dim {b}")
    batch = [lhs.dims[i] for i in d.lhs_batch_dims]
    lhs_free = [x for i, x in enumerate(lhs.dims) if i not in d.lhs_batch_dims and i not in d.lhs_contracting_dims]
    rhs_free = [x for i, x in enumerate(rhs.dims) if i not in d.rhs_batch_dims and i not in d.rhs_contracting_dims]
    etype = lhs.element_type if lhs.element_type is rhs.element_type else lhs.element_type
    return _array(etype, batch + lhs_free + rhs_free)
