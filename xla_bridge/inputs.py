"""Deterministic inputs for a module's entry parameters.

Floats are uniform in [-1, 1) (bf16, f16 and f8 through ml_dtypes), pred is a
fair coin, integers are in [0, 16) except where the value is used as an index
(gather/scatter indices, dynamic-slice and dynamic-update-slice offsets, also
through converts, reshapes and fusion parameters): there it stays in range, so a
run exercises the module rather than XLA's clamping.
"""

from __future__ import annotations

import re

import numpy as np

from hlo_tools.ir import Instruction, Module
from hlo_tools.opcode import HloOpcode
from hlo_tools.shape import PrimitiveType, Shape

_INT_RE = re.compile(r"-?\d+")

# Ops through which an integer keeps its meaning as an index.
_PASS_THROUGH = {HloOpcode.CONVERT, HloOpcode.RESHAPE, HloOpcode.BITCAST, HloOpcode.COPY, HloOpcode.BROADCAST,
                 HloOpcode.SLICE, HloOpcode.TRANSPOSE}


def numpy_dtype(t: PrimitiveType) -> np.dtype:
    """The numpy dtype of an XLA element type (ml_dtypes for bf16/f8/int4)."""
    if t is PrimitiveType.PRED:
        return np.dtype(bool)
    if t is PrimitiveType.BF16 or t.value.startswith("f8") or t.value.startswith("f4") or t.value in ("s4", "u4", "s2", "u2"):
        import ml_dtypes

        name = {"bf16": "bfloat16", "s4": "int4", "u4": "uint4", "s2": "int2", "u2": "uint2"}.get(t.value, t.value)
        if t.value.startswith(("f8", "f4")):
            name = "float" + t.value[1] + "_" + t.value[2:]  # f8e4m3fn -> float8_e4m3fn
        return np.dtype(getattr(ml_dtypes, name))
    names = {"c64": "complex64", "c128": "complex128"}
    if t.value in names:
        return np.dtype(names[t.value])
    kind = {"s": "int", "u": "uint", "f": "float"}[t.value[0]]
    return np.dtype(f"{kind}{t.value[1:]}")


def _ints(text: str | None) -> list[int]:
    return [int(x) for x in _INT_RE.findall(text or "")]


def _index_bound(user: Instruction, index: int) -> int | None:
    """Exclusive upper bound for values of operand ``index`` of ``user`` when it is
    used as an index, else None."""
    op = user.opcode
    if op is HloOpcode.DYNAMIC_SLICE and index >= 1:
        dim = index - 1
        sizes = _ints(user.attribute("dynamic_slice_sizes"))
        full = user.operand(0).shape.dims
        if dim < len(full):
            return max(1, full[dim] - (sizes[dim] if dim < len(sizes) else 1) + 1)
    if op is HloOpcode.DYNAMIC_UPDATE_SLICE and index >= 2:
        dim = index - 2
        full, upd = user.operand(0).shape.dims, user.operand(1).shape.dims
        if dim < len(full):
            return max(1, full[dim] - (upd[dim] if dim < len(upd) else 1) + 1)
    if op is HloOpcode.GATHER and index == 1:
        dims = user.operand(0).shape.dims
        mapped = _ints(user.attribute("start_index_map")) or list(range(len(dims)))
        sizes = _ints(user.attribute("slice_sizes"))
        bounds = [dims[d] - (sizes[d] if d < len(sizes) else 1) + 1 for d in mapped if d < len(dims)]
        return max(1, min(bounds)) if bounds else None
    if op is HloOpcode.SCATTER and index == (user.operand_count - 1) // 2:
        # scatter(operands..., indices, updates...): out-of-bounds updates are dropped
        dims = user.operand(0).shape.dims
        mapped = _ints(user.attribute("scatter_dims_to_operand_dims")) or list(range(len(dims)))
        bounds = [dims[d] for d in mapped if d < len(dims)]
        return max(1, min(bounds)) if bounds else None
    return None


def index_bounds(module: Module) -> dict[int, int]:
    """``{parameter_number: exclusive bound}`` for entry parameters used as indices."""
    out: dict[int, int] = {}
    for param in module.entry.parameters:
        if not param.shape.is_array or not param.shape.element_type.is_integral:
            continue
        bound = _bound_of(param, depth=0)
        if bound is not None:
            out[param.parameter_number] = bound
    return out


def _bound_of(value: Instruction, depth: int) -> int | None:
    if depth > 8:
        return None
    best = None
    for user in value.users:
        for i, operand in enumerate(user.operands):
            if operand is not value:
                continue
            b = _index_bound(user, i)
            if b is None and user.opcode in _PASS_THROUGH:
                b = _bound_of(user, depth + 1)
            elif b is None and user.opcode in (HloOpcode.FUSION, HloOpcode.CALL) and user.called_computations:
                comp = user.called_computations[0]
                if i < len(comp.parameters):
                    b = _bound_of(comp.parameter(i), depth + 1)
            if b is not None:
                best = b if best is None else min(best, b)
    return best


#: Ops whose result is meaningless (NaN) on a negative operand 0.
_NEEDS_NONNEGATIVE = frozenset({HloOpcode.SQRT, HloOpcode.RSQRT, HloOpcode.LOG, HloOpcode.POWER})
#: Ops a value goes through on its way there with its sign carried along (an
#: optimizer's second moment: scaled, summed with g*g, divided by a bias correction).
_CARRIES_SIGN = frozenset({HloOpcode.CONVERT, HloOpcode.RESHAPE, HloOpcode.BITCAST, HloOpcode.COPY,
                           HloOpcode.BROADCAST, HloOpcode.TRANSPOSE, HloOpcode.SLICE, HloOpcode.DYNAMIC_SLICE,
                           HloOpcode.CONCATENATE, HloOpcode.MULTIPLY, HloOpcode.ADD, HloOpcode.DIVIDE,
                           HloOpcode.MAXIMUM, HloOpcode.MINIMUM, HloOpcode.SELECT})


def nonnegative_parameters(module: Module) -> set[int]:
    """Entry float parameters whose values reach the operand of a ``sqrt``, ``rsqrt``,
    ``log`` or ``power`` through ops that carry their sign (also into fusions, calls,
    tuples and while loops): an Adam second moment.  Generated negative, they turn
    the updated weights into NaN and a comparison into one of NaNs."""
    out: set[int] = set()
    callers: dict[int, list[Instruction]] = {}  # computation id -> the fusions and calls whose value is its root's
    for instr in module.instructions():
        if instr.opcode is not HloOpcode.WHILE:
            for c in instr.called_computations:
                callers.setdefault(id(c), []).append(instr)
    for param in module.entry.parameters:
        if not (param.shape.is_array and param.shape.element_type.is_floating):
            continue
        stack, seen = [(param, None)], set()
        while stack and param.parameter_number not in out:
            value, index = stack.pop()  # index: the tuple element followed, for tuple-shaped values
            if (id(value), index) in seen:
                continue
            seen.add((id(value), index))
            for user in value.users:
                slots = [i for i, o in enumerate(user.operands) if o is value]
                op = user.opcode
                if op in _NEEDS_NONNEGATIVE and 0 in slots and index is None:
                    out.add(param.parameter_number)
                    break
                if op is HloOpcode.TUPLE:
                    stack += [(user, i) for i in slots] if index is None else []
                elif op is HloOpcode.GET_TUPLE_ELEMENT:
                    if index is not None and int(user.attributes.get("index") or -1) == index:
                        stack.append((user, None))
                elif op in (HloOpcode.FUSION, HloOpcode.CALL) and user.called_computations:
                    comp = user.called_computations[0]
                    stack += [(comp.parameter(i), index) for i in slots if i < len(comp.parameters)]
                elif op is HloOpcode.WHILE:
                    body = user.called_computation("body")
                    stack.append((user, index))
                    if body is not None and body.parameters:
                        stack.append((body.parameters[0], index))
                elif op is HloOpcode.MULTIPLY and user.operand(0) is user.operand(1):
                    continue  # a square: non-negative whatever the input
                elif op in _CARRIES_SIGN and index is None:
                    stack.append((user, None))
            # a value that is a computation's root flows out of its fusion/call/while
            comp = value.parent
            if comp is not None and comp.root is value and not comp.is_entry:
                stack += [(caller, index) for caller in callers.get(id(comp), ())]
    return out


def random_array(shape: Shape, rng: np.random.Generator, bound: int | None = None, *,
                 nonnegative: bool = False) -> np.ndarray:
    """One deterministic array for an array shape; floats in [0, 1) when
    ``nonnegative`` (``nonnegative_parameters``), else in [-1, 1)."""
    t = shape.element_type
    dims = tuple(shape.dims)
    dtype = numpy_dtype(t)
    if t is PrimitiveType.PRED:
        return rng.random(dims) < 0.5
    if t.is_complex:
        return (rng.uniform(-1, 1, dims) + 1j * rng.uniform(-1, 1, dims)).astype(dtype)
    if t.is_floating:
        return rng.uniform(0.0 if nonnegative else -1.0, 1.0, dims).astype(np.float32).astype(dtype)
    if t.is_integral:
        hi = 16 if bound is None else bound
        if t.bit_width <= 4:
            hi = min(hi, 2 ** (t.bit_width - 1) if t.is_signed else 2 ** t.bit_width)
        return rng.integers(0, max(hi, 1), dims).astype(dtype)
    raise ValueError(f"cannot make inputs of type {t.value}")


def make_inputs(module: Module, *, seed: int = 0, sets: int = 1) -> list[list[np.ndarray]]:
    """``sets`` lists of arrays, one per entry parameter.  Each array depends only
    on (seed, set, parameter number, shape, index use, sign use), so an original
    module and its rewrite get the same inputs."""
    params = sorted(module.entry.parameters, key=lambda p: p.parameter_number)
    for p in params:
        if not p.shape.is_array:
            raise ValueError(f"parameter {p.name} of {module.name} has shape {p.shape.to_text()}: "
                             "only array parameters can be fed (tuple/token parameters are not supported)")
    bounds = index_bounds(module)
    positive = nonnegative_parameters(module)
    out = []
    for s in range(sets):
        arrays = []
        for p in params:
            rng = np.random.default_rng([seed, s, p.parameter_number])
            arrays.append(random_array(p.shape, rng, bounds.get(p.parameter_number),
                                       nonnegative=p.parameter_number in positive))
        out.append(arrays)
    return out
