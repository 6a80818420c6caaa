"""Layout: what moves bytes only to change layout (``layout_analysis``), and passes
that remove it: ``transpose-folding`` (xla/service/transpose_folding.cc),
``entry-layout-assignment`` and ``layout-normalization``
(xla/service/layout_normalization.cc).

Each pass, and what XLA keeps of its work: docs/layout_and_scheduling.md#layout
"""

from __future__ import annotations

from dataclasses import dataclass

from hlo_tools import Computation, HloOpcode, Instruction, Module, Shape
from hlo_tools.rewriter import Rewriter
from hlo_tools.shape import Layout

from hlo_analysis.cost import unfused_bytes

from .base import ComputationPass, Pass

LAYOUT_OPS = frozenset({HloOpcode.TRANSPOSE, HloOpcode.COPY})
_VIEW_OPS = frozenset({HloOpcode.PARAMETER, HloOpcode.TRANSPOSE, HloOpcode.COPY, HloOpcode.BITCAST, HloOpcode.RESHAPE})


def minor_to_major(shape: Shape) -> tuple[int, ...]:
    """The layout, or XLA's default (descending: last dimension minor)."""
    if shape.layout is not None and len(shape.layout.minor_to_major) == shape.rank:
        return shape.layout.minor_to_major
    return tuple(range(shape.rank - 1, -1, -1))


def physical_permutation(instr: Instruction) -> tuple[int, ...]:
    """For a transpose/copy: output physical position j reads operand physical
    position perm[j] (both major-to-minor).  Identity means a bitcast."""
    src, out = instr.operand(0).shape, instr.shape
    logical = instr.dimensions if instr.opcode is HloOpcode.TRANSPOSE else tuple(range(out.rank))
    in_major = list(reversed(minor_to_major(src)))
    pos_in = {d: k for k, d in enumerate(in_major)}
    return tuple(pos_in[logical[b]] for b in reversed(minor_to_major(out)))


def is_bitcast_like(instr: Instruction) -> bool:
    """True when the op keeps the physical order of the non-degenerate dims."""
    if instr.opcode not in LAYOUT_OPS or not instr.shape.is_array:
        return False
    if instr.shape.layout is not None and instr.shape.layout.suffix:
        return False  # tiled / packed layouts: not a plain bitcast
    src = instr.operand(0).shape
    in_major = list(reversed(minor_to_major(src)))
    perm = physical_permutation(instr)
    kept = [p for p in perm if src.dims[in_major[p]] != 1]
    return kept == sorted(kept)


@dataclass(frozen=True)
class LayoutOp:
    """One instruction that only moves data to change its layout."""

    computation: str
    name: str
    opcode: str
    kind: str          # "transpose" | "layout-copy" | "bitcast-like" | "layout-fusion"
    bytes_moved: int   # read + write


@dataclass(frozen=True)
class LayoutReport:
    ops: tuple[LayoutOp, ...]

    @property
    def bytes_moved(self) -> int:
        return sum(o.bytes_moved for o in self.ops)

    def by_kind(self) -> dict[str, tuple[int, int]]:
        """kind -> (count, bytes)."""
        out: dict[str, tuple[int, int]] = {}
        for o in self.ops:
            n, b = out.get(o.kind, (0, 0))
            out[o.kind] = (n + 1, b + o.bytes_moved)
        return out

    def __str__(self) -> str:
        kinds = ", ".join(f"{k} {n} ({b:,} B)" for k, (n, b) in sorted(self.by_kind().items()))
        return f"{len(self.ops)} layout-only ops moving {self.bytes_moved:,} B: {kinds or 'none'}"


def _layout_only_fusion(instr: Instruction) -> bool:
    body = instr.fused_computation
    return body is not None and any(i.opcode in LAYOUT_OPS for i in body) and all(i.opcode in _VIEW_OPS for i in body)


def layout_analysis(module: Module) -> LayoutReport:
    """Layout-only ops in every computation that runs (fusion bodies count as
    one ``layout-fusion`` when all they do is transpose/copy/reshape)."""
    fused = {id(c) for c in module.fusion_computations()}
    ops = []
    for comp in module.computations:
        if id(comp) in fused:
            continue
        for instr in comp:
            kind = None
            if instr.opcode in LAYOUT_OPS and instr.shape.is_array:
                if is_bitcast_like(instr):
                    kind = "bitcast-like"
                elif instr.opcode is HloOpcode.TRANSPOSE:
                    kind = "transpose"
                elif minor_to_major(instr.shape) != minor_to_major(instr.operand(0).shape):
                    kind = "layout-copy"
            elif instr.opcode is HloOpcode.FUSION and _layout_only_fusion(instr):
                kind = "layout-fusion"
            if kind:
                ops.append(LayoutOp(comp.name, instr.name, instr.opcode.value, kind, unfused_bytes(instr)))
    return LayoutReport(tuple(ops))


# -- transpose folding ------------------------------------------------------------------
def _fold_into_dot(dot: Instruction, rw: Rewriter) -> bool:
    """Folds transposed operands into ``dot``'s dimension numbers when the
    operand's free (non-batch, non-contracting) dims keep their order, so the
    dot's output is unchanged (transpose_folding.cc's condition, generalised)."""
    dnums = dot.dot_dimension_numbers
    if dnums is None or dot.opcode is not HloOpcode.DOT:
        return False
    changed = False
    for side in (0, 1):
        t = dot.operand(side)
        if t.opcode is not HloOpcode.TRANSPOSE:
            continue
        perm = t.dimensions
        batch = dnums.lhs_batch_dims if side == 0 else dnums.rhs_batch_dims
        contract = dnums.lhs_contracting_dims if side == 0 else dnums.rhs_contracting_dims
        free = [d for d in range(t.shape.rank) if d not in batch and d not in contract]
        mapped_free = [perm[d] for d in free]
        if mapped_free != sorted(mapped_free):
            continue
        new_batch = tuple(perm[d] for d in batch)
        new_contract = tuple(perm[d] for d in contract)
        if side == 0:
            dnums = type(dnums)(new_batch, new_contract, dnums.rhs_batch_dims, dnums.rhs_contracting_dims)
        else:
            dnums = type(dnums)(dnums.lhs_batch_dims, dnums.lhs_contracting_dims, new_batch, new_contract)
        ops = list(dot.operands)
        ops[side] = t.operand(0)
        rw.replace_operands(dot, ops)
        changed = True
    if changed:
        rw.set_field(dot, "dot_dimension_numbers", dnums)
    return changed


def _compose_transposes(t: Instruction, rw: Rewriter) -> bool:
    """transpose(transpose(x, p), q) -> transpose(x, p[q]); identity -> x."""
    src = t.operand(0)
    perm = t.dimensions
    if src.opcode is HloOpcode.TRANSPOSE:
        inner = src.dimensions
        perm = tuple(inner[d] for d in perm)
        src = src.operand(0)
        if perm != tuple(range(len(perm))):
            rw.replace_operands(t, [src])
            rw.set_field(t, "dimensions", perm)
            return True
    if perm == tuple(range(len(perm))) and src.shape.compatible(t.shape) and not t.is_root \
            and minor_to_major(src.shape) == minor_to_major(t.shape):
        rw.replace_all_uses_with(t, src)
        rw.erase(t)
        return True
    return False


def _remove_dead(comp: Computation, candidates, rw: Rewriter) -> None:
    for i in candidates:
        if i.parent is comp and not i.users and not i.is_root:
            rw.erase(i)


@dataclass(frozen=True)
class TransposeFolding(ComputationPass):
    """Folds transposes into dot dimension numbers and into each other."""

    name = "transpose-folding"

    def run_on_computation(self, comp: Computation) -> bool:
        rw = Rewriter()
        for instr in list(comp):
            if instr.parent is not comp:
                continue
            if instr.opcode is HloOpcode.DOT:
                before = list(instr.operands)
                if _fold_into_dot(instr, rw):
                    _remove_dead(comp, before, rw)
            elif instr.opcode is HloOpcode.TRANSPOSE:
                inner = instr.operand(0)
                if _compose_transposes(instr, rw):
                    _remove_dead(comp, [inner], rw)
        return rw.changed


# -- entry computation layout ---------------------------------------------------------------
def entry_layout_text(module: Module) -> str:
    """``entry_computation_layout`` as XLA prints it, from the entry's parameters and root."""
    entry = module.entry
    params = ", ".join(_with_default_layout(p.shape).to_text() for p in entry.parameters)
    return "{(" + params + ")->" + _with_default_layout(entry.root.shape).to_text() + "}"


def _with_default_layout(shape: Shape) -> Shape:
    if shape.is_tuple:
        return Shape.tuple_of(_with_default_layout(s) for s in shape.tuple_shapes)
    if shape.is_array and shape.layout is None:
        return shape.with_layout(minor_to_major(shape))
    return shape


@dataclass(frozen=True)
class EntryLayoutAssignment(Pass):
    """Gives parameters (by number) and the result the requested minor-to-major
    layouts, and makes ``entry_computation_layout`` say so.  With no layouts it
    only makes the attribute agree with the instructions."""

    name = "entry-layout-assignment"
    parameter_layouts: tuple[tuple[int, tuple[int, ...]], ...] = ()
    result_layout: tuple[int, ...] | None = None

    def run(self, module: Module) -> bool:
        entry = module.entry
        rw = Rewriter()
        for number, m2m in self.parameter_layouts:
            p = entry.parameter(number)
            if sorted(m2m) != list(range(p.shape.rank)):
                raise ValueError(f"layout {m2m} is not a permutation of the {p.shape.rank} dims of parameter {number}")
            rw.set_shape(p, p.shape.with_layout(Layout(tuple(m2m))))
        if self.result_layout is not None:
            root = entry.root
            if root.shape.is_tuple or sorted(self.result_layout) != list(range(root.shape.rank)):
                raise ValueError(f"result layout {self.result_layout} does not fit the root shape {root.shape}")
            rw.set_shape(root, root.shape.with_layout(Layout(tuple(self.result_layout))))
        rw.set_module_attribute(module, "entry_computation_layout", entry_layout_text(module))
        return rw.changed


# -- layout normalization --------------------------------------------------------------------
def _normalize(instr: Instruction, rw: Rewriter) -> bool:
    if instr.shape.layout is not None and instr.shape.layout.suffix:
        return False
    src = instr.operand(0)
    if src.shape.layout is not None and src.shape.layout.suffix:
        return False
    if is_bitcast_like(instr):
        if instr.opcode is HloOpcode.COPY and minor_to_major(instr.shape) == minor_to_major(src.shape):
            return False  # a real copy (copy insertion's): keep it
        bc = Instruction.create("bitcast", instr.shape, [src], name=f"{instr.name}.bitcast")
        rw.replace_instruction(instr, bc)
        return True
    perm = physical_permutation(instr)
    in_major = list(reversed(minor_to_major(src.shape)))
    out_major = list(reversed(minor_to_major(instr.shape)))
    et = src.shape.element_type
    n = src.shape.rank
    desc = tuple(range(n - 1, -1, -1))
    norm_in = Shape.array(et, [src.shape.dims[d] for d in in_major], desc)
    norm_out = Shape.array(et, [instr.shape.dims[d] for d in out_major], desc)
    if instr.opcode is HloOpcode.TRANSPOSE and instr.shape == norm_out and src.shape == norm_in:
        return False  # already normal
    b_in = rw.insert_before(instr, Instruction.create("bitcast", norm_in, [src], name=f"{instr.name}.normalized_operand"))
    t = Instruction.create("transpose", norm_out, [b_in], name=f"{instr.name}.normalized",
                           dimensions="{" + ",".join(map(str, perm)) + "}")
    t.set_attribute("metadata", instr.attribute("metadata"))
    rw.insert_before(instr, t)
    out = Instruction.create("bitcast", instr.shape, [t], name=f"{instr.name}.bitcast")
    rw.replace_instruction(instr, out)
    return True


@dataclass(frozen=True)
class LayoutNormalization(ComputationPass):
    """Makes physical transposes explicit on descending-layout shapes; meant for
    modules whose layouts are assigned (run it through the pre-scheduler hook)."""

    name = "layout-normalization"

    def run_on_computation(self, comp: Computation) -> bool:
        rw = Rewriter()
        for instr in list(comp):
            if instr.opcode in LAYOUT_OPS and instr.shape.is_array and not instr.control_predecessors \
                    and not instr.control_successors and not instr.is_root:
                _normalize(instr, rw)
        return rw.changed
