"""A documented subset of XLA's AlgebraicSimplifier, written with the matchers.

Rewrites (each mirrors a rule in xla/hlo/transforms/simplifiers/algebraic_simplifier.cc):

- ``add(x, 0)`` -> ``x`` and ``multiply(x, 1)`` -> ``x`` (0/1 scalar or broadcast of one)
- ``reshape(reshape(x))`` -> ``reshape(x)``; a reshape to x's own shape -> ``x``
- ``transpose(transpose(x))`` -> one transpose, or ``x`` when the permutations cancel;
  an identity transpose -> ``x``
- ``broadcast(broadcast(x))`` -> one broadcast; a broadcast to x's own shape -> ``x``
- ``op(broadcast(c1), broadcast(c2))`` for scalar constants and op in add, subtract,
  multiply, maximum, minimum -> ``broadcast(c)`` with ``c = op(c1, c2)`` folded
- ``convert(convert(x))`` -> ``convert(x)`` (or ``x``) when the inner conversion is exact
- a ``convert`` to the operand's own type -> ``x``
- a ``slice`` of the full range with stride 1 -> ``x``

Replacements keep layouts: a rule fires only when the replacement has exactly the
shape (layout included) of what it replaces.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hlo_tools import Computation, HloOpcode, Instruction, PrimitiveType
from hlo_tools import pattern as m
from hlo_tools.pattern import scalar_value
from hlo_tools.rewriter import RewritePattern, apply_patterns_greedily

from .base import ComputationPass


class IdentityOperand(RewritePattern):
    """x + 0 => x; x * 1 => x"""

    opcode = frozenset({HloOpcode.ADD, HloOpcode.MULTIPLY})
    PATTERNS = (m.add(m.op("x"), m.broadcast_of_scalar(0)), m.multiply(m.op("x"), m.broadcast_of_scalar(1)))

    def match_and_rewrite(self, instr, rewriter):
        for p in self.PATTERNS:
            found = m.match(instr, p)
            if found and found["x"].shape == instr.shape:
                rewriter.replace_instruction(instr, found["x"])
                return True
        return False


class ReshapeOfReshape(RewritePattern):
    """reshape(reshape(x)) => reshape(x); a reshape to x's own shape => x"""

    opcode = HloOpcode.RESHAPE
    PATTERN = m.reshape(m.reshape(m.op("x")))

    def match_and_rewrite(self, instr, rewriter):
        x = instr.operand(0)
        if x.shape == instr.shape:
            rewriter.replace_instruction(instr, x)
            return True
        found = m.match(instr, self.PATTERN)
        if not found:
            return False
        rewriter.replace_instruction(instr, Instruction.create("reshape", instr.shape, [found["x"]], name=instr.name))
        return True


class TransposeOfTranspose(RewritePattern):
    """transpose(transpose(x)) => one transpose, or x when they cancel; an identity transpose => x"""

    opcode = HloOpcode.TRANSPOSE
    PATTERN = m.transpose(m.transpose(m.op("x")))

    def match_and_rewrite(self, instr, rewriter):
        perm = instr.dimensions
        x = instr.operand(0)
        if perm == tuple(range(len(perm))) and x.shape == instr.shape:
            rewriter.replace_instruction(instr, x)
            return True
        found = m.match(instr, self.PATTERN)
        if not found:
            return False
        inner = instr.operand(0).dimensions
        composed = tuple(inner[p] for p in perm)
        src = found["x"]
        if composed == tuple(range(len(composed))) and src.shape == instr.shape:
            rewriter.replace_instruction(instr, src)
            return True
        rewriter.replace_instruction(instr, Instruction.create("transpose", instr.shape, [src], name=instr.name, dimensions=composed))
        return True


class BroadcastOfBroadcast(RewritePattern):
    """broadcast(broadcast(x)) => one broadcast; a broadcast to x's own shape => x"""

    opcode = HloOpcode.BROADCAST
    PATTERN = m.broadcast(m.broadcast(m.op("x")))

    def match_and_rewrite(self, instr, rewriter):
        x = instr.operand(0)
        dims = instr.dimensions or ()
        if dims == tuple(range(len(dims))) and x.shape == instr.shape:
            rewriter.replace_instruction(instr, x)
            return True
        found = m.match(instr, self.PATTERN)
        if not found:
            return False
        inner = x.dimensions or ()
        composed = tuple(dims[d] for d in inner)
        rewriter.replace_instruction(instr, Instruction.create("broadcast", instr.shape, [found["x"]], name=instr.name, dimensions=composed))
        return True


_FOLD = {
    HloOpcode.ADD: lambda a, b: a + b,
    HloOpcode.SUBTRACT: lambda a, b: a - b,
    HloOpcode.MULTIPLY: lambda a, b: a * b,
    HloOpcode.MAXIMUM: max,
    HloOpcode.MINIMUM: min,
}


def _format_literal(value, etype: PrimitiveType) -> str | None:
    if etype.is_integral:
        bits = etype.bit_width
        lo, hi = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if etype.is_signed else (0, (1 << bits) - 1)
        return str(int(value)) if lo <= value <= hi and value == int(value) else None
    if etype in (PrimitiveType.F32, PrimitiveType.F64):
        v = np.float32(value) if etype is PrimitiveType.F32 else np.float64(value)
        if not np.isfinite(v):
            return None
        return repr(float(v)) if float(v) != int(v) else str(int(v))
    return None  # bf16/f16/f8: the folded value would need rounding; leave it


class FoldBroadcastScalarConstants(RewritePattern):
    """add(broadcast(2), broadcast(3)) => broadcast(5) (ints, f32, f64; also subtract, multiply, maximum, minimum)"""

    opcode = frozenset(_FOLD)

    def match_and_rewrite(self, instr, rewriter):
        fold = _FOLD[instr.opcode]
        found = m.match(instr, m.opcode(instr.opcode, m.broadcast_of_scalar(capture="a"), m.broadcast_of_scalar(capture="b")))
        if not found:
            return False
        ca = found["a"] if found["a"].opcode is HloOpcode.CONSTANT else found["a"].operand(0)
        cb = found["b"] if found["b"].opcode is HloOpcode.CONSTANT else found["b"].operand(0)
        va, vb = scalar_value(ca), scalar_value(cb)
        etype = instr.shape.element_type
        if va is None or vb is None or isinstance(va, bool) or isinstance(vb, bool) or ca.shape.element_type is not etype:
            return False
        text = _format_literal(fold(va, vb), etype)
        if text is None:
            return False
        const = Instruction("constant", HloOpcode.CONSTANT, ca.shape, literal=text)
        rewriter.insert_before(instr, const)
        new = const if instr.shape.is_scalar else Instruction.create("broadcast", instr.shape, [const], name="broadcast", dimensions=())
        rewriter.replace_instruction(instr, new)
        return True


_FLOAT_ORDER = {PrimitiveType.F16: 1, PrimitiveType.BF16: 1, PrimitiveType.F32: 2, PrimitiveType.F64: 3}
_EXACT_INT_IN_FLOAT = {PrimitiveType.F16: 11, PrimitiveType.BF16: 8, PrimitiveType.F32: 24, PrimitiveType.F64: 53}


def is_exact_conversion(src: PrimitiveType, dst: PrimitiveType) -> bool:
    """True when every value of ``src`` converts to ``dst`` and back unchanged."""
    if src is dst:
        return True
    if src is PrimitiveType.PRED:
        return dst is not PrimitiveType.PRED
    if src.is_floating and dst.is_floating:
        if src in (PrimitiveType.F16, PrimitiveType.BF16) and dst in (PrimitiveType.F16, PrimitiveType.BF16):
            return False  # neither contains the other
        return src in _FLOAT_ORDER and dst in _FLOAT_ORDER and _FLOAT_ORDER[src] < _FLOAT_ORDER[dst]
    if src.is_integral and dst.is_integral:
        sb, db = src.bit_width, dst.bit_width
        if src.is_signed == dst.is_signed:
            return db >= sb
        return not src.is_signed and dst.is_signed and db > sb
    if src.is_integral and dst.is_floating:
        mantissa = _EXACT_INT_IN_FLOAT.get(dst)
        return mantissa is not None and src.bit_width - (1 if src.is_signed else 0) <= mantissa
    return False


class ConvertOfConvert(RewritePattern):
    """convert(convert(x)) => convert(x), or x, when the inner conversion is exact; a convert to x's own type => x"""

    opcode = HloOpcode.CONVERT
    PATTERN = m.convert(m.convert(m.op("x")))

    def match_and_rewrite(self, instr, rewriter):
        x = instr.operand(0)
        if x.shape == instr.shape:
            rewriter.replace_instruction(instr, x)
            return True
        found = m.match(instr, self.PATTERN)
        if not found:
            return False
        src = found["x"]
        if not is_exact_conversion(src.shape.element_type, x.shape.element_type):
            return False
        if src.shape == instr.shape:
            rewriter.replace_instruction(instr, src)
            return True
        rewriter.replace_instruction(instr, Instruction.create("convert", instr.shape, [src], name=instr.name))
        return True


class FullSlice(RewritePattern):
    """slice(x) of the full range with stride 1 => x"""

    opcode = HloOpcode.SLICE

    def match_and_rewrite(self, instr, rewriter):
        x = instr.operand(0)
        spec = instr.slice or ()
        if x.shape == instr.shape and all(lo == 0 and hi == d and st == 1 for (lo, hi, st), d in zip(spec, x.shape.dims)):
            rewriter.replace_instruction(instr, x)
            return True
        return False


SIMPLIFICATIONS: tuple[RewritePattern, ...] = (
    IdentityOperand(),
    ReshapeOfReshape(),
    TransposeOfTranspose(),
    BroadcastOfBroadcast(),
    FoldBroadcastScalarConstants(),
    ConvertOfConvert(),
    FullSlice(),
)


@dataclass(frozen=True)
class AlgebraicSimplifier(ComputationPass):
    name = "simplify"

    def run_on_computation(self, computation: Computation) -> bool:
        return apply_patterns_greedily(computation, SIMPLIFICATIONS)
