"""Portable patterns: a rewrite written once that runs on our HLO IR and, through
MLIR's own rewrite driver, on StableHLO (``xla_bridge.mlir_rewrite``).

A pattern names its ``root`` opcode (HLO's spelling) and implements
``rewrite(op, b) -> bool``: ``op`` answers ``opcode``, ``operands``, ``dims``,
``element_type``, ``user_count``, ``dimensions`` (a transpose's permutation, a
broadcast's operand-to-output map) (``HloOp`` here, ``MlirOp`` in the bridge; HLO's
``broadcast`` is StableHLO's ``broadcast_in_dim``); ``b`` builds
``reshape``/``convert``/``transpose``/``broadcast`` before the root and
``replace``s it (the operands only it read go too). Both drivers visit each op
once, in order, one pattern per op, so the same module gives the same count at
both levels. A pattern asks for fuel before each rewrite (``hlo bisect``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Protocol

from hlo_tools import Instruction, Module
from hlo_tools.attributes import format_int_list
from hlo_tools.opcode import HloOpcode
from hlo_tools.rewriter import Rewriter
from hlo_tools.shape import PrimitiveType, Shape

from .base import Pass
from .fuel import consume_fuel


class PortablePattern(Protocol):
    root: str

    def rewrite(self, op, b) -> bool: ...


class HloOp:
    """An HLO instruction as a portable pattern sees it."""

    def __init__(self, instr: Instruction):
        self.instr = instr

    opcode = property(lambda self: self.instr.opcode.value)
    operands = property(lambda self: [HloOp(o) for o in self.instr.operands])
    element_type = property(lambda self: self.instr.shape.element_type.value)
    dims = property(lambda self: tuple(self.instr.shape.dims))
    user_count = property(lambda self: self.instr.user_count)
    dimensions = property(lambda self: self.instr.dimensions or ())
    name = property(lambda self: self.instr.name)


class HloBuilder:
    """Builds instructions before the matched root (``xla_bridge.mlir_rewrite.MlirBuilder``'s twin)."""

    def __init__(self, rw: Rewriter, root: Instruction):
        self.rw, self.root = rw, root

    def _add(self, opcode: HloOpcode, etype: str, dims, x: HloOp, **attrs) -> HloOp:
        shape = Shape.array(etype, tuple(dims))
        return HloOp(self.rw.insert_before(self.root, Instruction.create(opcode, shape, [x.instr], opcode.value,
                                                                          **attrs)))

    def reshape(self, x: HloOp, dims) -> HloOp:
        return self._add(HloOpcode.RESHAPE, x.element_type, dims, x)

    def convert(self, x: HloOp, etype: str) -> HloOp:
        return self._add(HloOpcode.CONVERT, etype, x.dims, x)

    def transpose(self, x: HloOp, permutation) -> HloOp:
        return self._add(HloOpcode.TRANSPOSE, x.element_type, [x.dims[p] for p in permutation], x,
                         dimensions=format_int_list(permutation))

    def broadcast(self, x: HloOp, dims, dimensions) -> HloOp:
        return self._add(HloOpcode.BROADCAST, x.element_type, dims, x, dimensions=format_int_list(dimensions))

    def replace(self, root: HloOp, new: HloOp) -> None:
        """``root``'s uses read ``new``; ``root`` and the operands it alone read go."""
        producers = list(root.instr.operands)
        self.rw.replace_all_uses_with(root.instr, new.instr)
        self.rw.erase(root.instr)
        for p in producers:
            if p.opcode is not HloOpcode.PARAMETER and p.parent is not None and not p.users and not p.is_root:
                self.rw.erase(p)


def apply_patterns(module: Module, patterns) -> int:
    """Runs portable ``patterns`` over ``module``'s computations (fusion bodies
    left alone): each instruction visited once, in order; the number of rewrites."""
    by_root: dict[str, list] = {}
    for p in patterns:
        by_root.setdefault(p.root, []).append(p)
    fused = {id(c) for c in module.fusion_computations()}
    rw = Rewriter()
    count = 0
    for comp in module.computations:
        if id(comp) in fused:
            continue
        for instr in list(comp):
            if instr.parent is None:  # erased by an earlier rewrite
                continue
            for p in by_root.get(instr.opcode.value, ()):
                if p.rewrite(HloOp(instr), HloBuilder(rw, instr)):
                    count += 1
                    break
    return count


# -- the library ------------------------------------------------------------------------------
@dataclass(frozen=True)
class FoldReshapePair:
    """reshape(reshape(x)) -> reshape(x)."""

    root: ClassVar[str] = "reshape"

    def rewrite(self, op, b) -> bool:
        inner = op.operands[0]
        if inner.opcode != "reshape" or not consume_fuel(lambda: f"fold reshape pair at {op.name}"):
            return False
        x = inner.operands[0]
        b.replace(op, x if x.dims == op.dims else b.reshape(x, op.dims))
        return True


def _bits(etype: str) -> int:
    """Bit width of an element type; 0 for one HLO has no name for (the pattern declines)."""
    try:
        return PrimitiveType(etype).bit_width
    except ValueError:
        return 0


def _sole_operand(op, opcode: str):
    """``op``'s first operand when it is an ``opcode`` that only ``op`` reads, else None."""
    o = op.operands[0]
    return o if o.opcode == opcode and o.user_count == 1 else None


@dataclass(frozen=True)
class ConvertAfterTranspose:
    """transpose(convert(x)) -> convert(transpose(x)) when the convert widens and
    only the transpose reads it: the transpose moves the narrower data."""

    root: ClassVar[str] = "transpose"

    def rewrite(self, op, b) -> bool:
        cvt = _sole_operand(op, "convert")
        narrow, wide = (_bits(cvt.operands[0].element_type), _bits(cvt.element_type)) if cvt is not None else (0, 0)
        if not 0 < narrow < wide or not consume_fuel(
                lambda: f"move convert after transpose at {op.name}"):
            return False
        b.replace(op, b.convert(b.transpose(cvt.operands[0], op.dimensions), op.element_type))
        return True


@dataclass(frozen=True)
class BroadcastOfReshape:
    """broadcast(reshape(x)) -> broadcast(x) when the reshape only inserts size-1
    dimensions (what jax's broadcasting emits before every broadcast_in_dim of a
    lower-rank value) and only the broadcast reads it."""

    root: ClassVar[str] = "broadcast"

    def rewrite(self, op, b) -> bool:
        r = _sole_operand(op, "reshape")
        if r is None:
            return False
        x = r.operands[0]
        kept = [j for j, d in enumerate(r.dims) if d != 1]
        if 1 in x.dims or [r.dims[j] for j in kept] != list(x.dims):
            return False
        dimensions = [op.dimensions[j] for j in kept]
        if dimensions != sorted(dimensions) or not consume_fuel(lambda: f"broadcast of reshape at {op.name}"):
            return False
        b.replace(op, b.broadcast(x, op.dims, dimensions))
        return True


@dataclass(frozen=True)
class PortablePass(Pass):
    """Runs portable patterns at the level of the module it is given: our HLO IR,
    or a ``StableHloModule`` through MLIR's walk driver."""

    name = "portable"
    levels: ClassVar[tuple[str, ...]] = ("hlo", "stablehlo")
    patterns: tuple = ()

    def apply(self, module) -> int:
        """The number of rewrites."""
        if isinstance(module, Module):
            return apply_patterns(module, self.patterns)
        # a StableHloModule runs them through MLIR's driver itself: passes stay free of jax
        return module.apply_patterns(self.patterns)

    def run(self, module) -> bool:
        return self.apply(module) > 0


def _single(cls_name: str, name: str, pattern) -> type[PortablePass]:
    """The pass that runs one pattern, named for ``--passes`` (a module-level class: picklable)."""
    doc = f"``{name}``: {type(pattern).__doc__.strip()}"
    return dataclass(frozen=True)(type(cls_name, (PortablePass,), {
        "name": name, "__doc__": doc, "__module__": __name__, "__qualname__": cls_name,
        "__annotations__": {"patterns": "tuple"}, "patterns": (pattern,)}))


FoldReshapePairs = _single("FoldReshapePairs", "fold-reshape-pair", FoldReshapePair())
ConvertsAfterTransposes = _single("ConvertsAfterTransposes", "convert-after-transpose", ConvertAfterTranspose())
BroadcastsOfReshapes = _single("BroadcastsOfReshapes", "broadcast-of-reshape", BroadcastOfReshape())


@dataclass(frozen=True)
class StableHloPass(Pass):
    """Base of a pass written against MLIR directly: ``run(module)`` gets a
    ``StableHloModule`` (``module.module`` is MLIR's; ``xla_bridge.mlir_rewrite``
    has the rewrite API). The pass manager verifies with MLIR's verifier."""

    levels: ClassVar[tuple[str, ...]] = ("stablehlo",)
