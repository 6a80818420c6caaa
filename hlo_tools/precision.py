"""Which floating-point types each output of a module is computed through.

A float32 output computed from bfloat16 arithmetic (a mixed-precision train
step: bf16 matmuls, f32 master weights) carries bf16 rounding.  Two correct
compilations may round differently (XLA:CPU's own dot emitter against YNNPACK,
a convert folded into a fusion or not), so comparing such an output at f32's
tolerance reports a "mismatch" that is only rounding.  ``computed_through``
says, per output, which float types its value passed through, so the comparison
can use the loosest of them.

The walk is per tuple element (a ``get-tuple-element`` of a ``tuple`` follows
only that element), and conservative through calls: a value that comes out of a
``while``, ``call``, ``conditional`` or fusion is taken to pass through every
float type inside it.  Iterative, so call chains of any depth are fine.
"""

from __future__ import annotations

from .ir import Instruction, Module
from .opcode import HloOpcode
from .shape import PrimitiveType, Shape

#: A value's float types: a frozenset for an array, a tuple of those for a tuple.
Types = frozenset | tuple


def _float_types(shape: Shape) -> frozenset[PrimitiveType]:
    return frozenset(s.element_type for _, s in shape.leaves() if s.element_type.is_floating)


def _flat(t: Types) -> frozenset[PrimitiveType]:
    if isinstance(t, frozenset):
        return t
    out: set[PrimitiveType] = set()
    stack = [t]
    while stack:
        x = stack.pop()
        if isinstance(x, frozenset):
            out |= x
        else:
            stack.extend(x)
    return frozenset(out)


def _inner_types(module: Module) -> dict[int, frozenset[PrimitiveType]]:
    """Per computation the entry reaches (by id), every float type of its
    instructions and of the computations it calls, transitively: callees first, in
    ``make_embedded_computations_post_order``'s order (no recursion)."""
    memo: dict[int, frozenset[PrimitiveType]] = {}
    if module.entry is None:
        return memo
    for comp in module.entry.make_embedded_computations_post_order():
        types: set[PrimitiveType] = set()
        for instr in comp:
            types |= _float_types(instr.shape)
            for c in instr.called_computations:
                types |= memo.get(id(c), frozenset())  # a call cycle (invalid HLO) contributes nothing
        memo[id(comp)] = frozenset(types)
    return memo


def _value_types(instr: Instruction, seen: dict[int, Types], inner: dict[int, frozenset]) -> Types:
    op = instr.opcode
    if op is HloOpcode.TUPLE:
        return tuple(seen[id(o)] for o in instr.operands)
    if op is HloOpcode.GET_TUPLE_ELEMENT:
        src = seen[id(instr.operand(0))]
        index = int(instr.attributes.get("index") or 0)
        if isinstance(src, tuple) and 0 <= index < len(src):
            return src[index]
        return _flat(src)
    types = set(_float_types(instr.shape))
    for o in instr.operands:
        types |= _flat(seen[id(o)])
    for c in instr.called_computations:
        types |= inner.get(id(c), frozenset())
    return frozenset(types)


def computed_through(module: Module) -> list[frozenset[PrimitiveType]]:
    """Per output of ``module`` (the entry root's leaves, in XLA's order), the
    float types its value was computed through, its own type included."""
    entry = module.entry
    if entry is None or entry.root is None:
        return []
    inner = _inner_types(module)
    seen: dict[int, Types] = {}
    for instr in entry.post_order():
        seen[id(instr)] = _value_types(instr, seen, inner)
    root = seen[id(entry.root)]
    if not isinstance(root, tuple):
        return [_flat(root)]
    out: list[frozenset[PrimitiveType]] = []
    stack: list[Types] = [root]
    while stack:  # pre-order over nested tuples, as XLA flattens outputs
        x = stack.pop()
        if isinstance(x, tuple):
            stack.extend(reversed(x))
        else:
            out.append(x)
    return out
