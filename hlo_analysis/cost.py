"""Flops, transcendentals and bytes per instruction, per fusion and per module, by
the rules of XLA's HloCostAnalysis (xla/service/hlo_cost_analysis.cc).

Rules, deliberate differences and agreement: docs/analysis.md#cost-model-cost
"""

from __future__ import annotations

import json

import math
from dataclasses import dataclass, field
from typing import Iterator, Sequence

from hlo_tools.ir import Computation, Instruction, Module
from hlo_tools.opcode import ELEMENTWISE, NO_KERNEL, HloOpcode
from hlo_tools.shape import PrimitiveType, Shape

FLOPS = "flops"
TRANSCENDENTALS = "transcendentals"
BYTES_ACCESSED = "bytes accessed"

#: Bytes per entry of a tuple's index table as the CPU client's cost analysis
#: sizes it (measured: a 3-tuple costs 12 bytes; tests/test_cost.py pins it).
POINTER_SIZE = 4

_H = HloOpcode
#: HloCostAnalysis::HandleElementwiseOp counts these as transcendentals.
TRANSCENDENTAL_OPS = frozenset(
    {_H.ERF, _H.EXPONENTIAL, _H.LOG, _H.LOGISTIC, _H.POWER, _H.SQRT, _H.CBRT, _H.RSQRT, _H.TANH,
     _H.SINE, _H.COSINE, _H.EXPONENTIAL_MINUS_ONE, _H.LOG_PLUS_ONE, _H.ATAN2, _H.TAN}
)
#: HloCostAnalysis overrides HandleCopy: a copy moves bytes but does no flops.
_ELEMENTWISE_FLOP_OPS = ELEMENTWISE - {_H.COPY}
#: Flops per element where not one: an fma is a multiply and an add (measured: jaxlib
#: 0.12.1's cost analysis of an f32[8,32] fma says 512 flops; tests/test_cost.py).
_FLOPS_PER_ELEMENT = {_H.FMA: 2}
#: Instructions that touch no memory and emit no code (XLA sets their bytes to 0):
#: those that run no kernel, except the ones HloCostAnalysis still charges for
#: their operands and output (a tuple writes its index table, see HandleTuple).
_FREE_OPS = NO_KERNEL - {_H.TUPLE, _H.OPTIMIZATION_BARRIER, _H.PARTITION_ID, _H.REPLICA_ID}
#: Run no kernel of their own either: control flow (the kernels are in its bodies)
#: and the second half of an async pair (its ``*-start`` is the kernel).
_NOT_KERNELS = NO_KERNEL | {_H.CALL, _H.WHILE, _H.CONDITIONAL, _H.ASYNC_DONE, _H.ASYNC_UPDATE, _H.ALL_GATHER_DONE,
                            _H.ALL_REDUCE_DONE, _H.COLLECTIVE_PERMUTE_DONE, _H.COPY_DONE, _H.SEND_DONE, _H.RECV_DONE}
#: Custom-call targets that only annotate sharding: the SPMD partitioner (GSPMD or
#: Shardy) consumes them and they emit no code. XLA's HloCostAnalysis prices every
#: custom-call as unknown (-1 flops, -1 bytes); for these the true cost is nothing.
SHARDING_ANNOTATION_TARGETS = frozenset({
    "Sharding", "SPMDFullToShardShape", "SPMDShardToFullShape", "SPMDShardShapeToFull",
    "ShardBarrierFrom", "ShardBarrierTo", "InspectSharding",
})
#: Shardy's round-trip markers (``xla.sdy.GlobalToLocalShape``, ``...LocalToGlobalShape``,
#: ``...FuncResultSharding``, ``...ShardingGroup``, ``...PropagationBarrier``).
SHARDY_ANNOTATION_PREFIX = "xla.sdy."
#: A fused constant with more elements than this is read from memory
#: (HloCostAnalysis::immediate_constant_max_elements).
IMMEDIATE_CONSTANT_MAX_ELEMENTS = 1


def shape_size(shape: Shape) -> int:
    """Bytes of one buffer as XLA:CPU sizes it: arrays by element, a tuple as its
    pointer table (its elements are separate buffers), tokens nothing. Kept on the
    shape (immutable, like ``Shape.byte_size``): the analyses ask millions of times."""
    cached = shape.__dict__.get("_xla_cpu_shape_size")
    if cached is None:
        cached = shape.__dict__["_xla_cpu_shape_size"] = _shape_size(shape)
    return cached


def _shape_size(shape: Shape) -> int:
    if shape.is_tuple:
        return POINTER_SIZE * len(shape.tuple_shapes)
    if shape.element_type is PrimitiveType.OPAQUE:
        return POINTER_SIZE
    if not shape.is_array:
        return 0
    dims = shape.dims
    return 0 if dims and min(dims) < 0 else shape.byte_size


def leaf_bytes(shape: Shape) -> int:
    """Bytes of all array leaves of a shape (the data, not the index tables)."""
    return sum(shape_size(s) for _, s in shape.leaves() if s.is_array)


def output_bytes(shape: Shape) -> int:
    """Bytes XLA:CPU's cost analysis charges for writing a result of this shape: an
    array's size; a tuple's array leaves (its index table is not counted), tokens 0."""
    return leaf_bytes(shape) if shape.is_tuple else shape_size(shape)


def is_sharding_annotation(instr: Instruction) -> bool:
    """A custom-call that only annotates sharding (``Sharding``, ``SPMDFullToShardShape``,
    ``xla.sdy.*``...): free, and not a kernel."""
    if instr.opcode is not _H.CUSTOM_CALL:
        return False
    target = instr.custom_call_target or ""
    return target in SHARDING_ANNOTATION_TARGETS or target.startswith(SHARDY_ANNOTATION_PREFIX)


def is_kernel(instr: Instruction) -> bool:
    """Whether XLA emits code for ``instr`` at its own level: a fusion or an unfused
    instruction, not one that runs no kernel (``NO_KERNEL``), control flow, the
    ``*-done`` half of an async pair, a sharding annotation or a transpose that
    only relabels the layout (a bitcast)."""
    if instr.opcode in _NOT_KERNELS:
        return False
    if instr.opcode is _H.CUSTOM_CALL and is_sharding_annotation(instr):
        return False  # the partitioner's marks: no kernel, no launch
    if instr.opcode is _H.TRANSPOSE and instr.shape.is_array:
        return not transpose_is_bitcast(instr)
    return not instr.opcode_text.endswith("-done")


def _elements(shape: Shape) -> int:
    return shape.num_elements  # 0 for a tuple, token or opaque shape


def _elements_recursive(shape: Shape) -> int:
    return sum(_elements(s) for _, s in shape.leaves())


@dataclass(frozen=True, slots=True)
class InstructionCost:
    """What one instruction (a fusion counts as one) costs.

    ``bytes_accessed`` is XLA's figure; ``bytes_read`` / ``bytes_written`` split it
    into operand and output traffic (they can differ from it by the large
    constants a fusion reads).
    """

    name: str
    computation: str
    opcode: str
    flops: float
    transcendentals: float
    bytes_accessed: float
    bytes_read: float
    bytes_written: float
    fusion_kind: str | None = None
    unknown: bool = False


@dataclass(frozen=True)
class ModuleCost:
    """Totals keyed like XLA's cost analysis, plus every top-level instruction's cost
    (entry, and the bodies of calls, whiles, conditionals and async ops)."""

    name: str
    flops: float
    transcendentals: float
    bytes_accessed: float
    instructions: tuple[InstructionCost, ...] = field(repr=False)

    def as_dict(self) -> dict[str, float]:
        return {FLOPS: self.flops, TRANSCENDENTALS: self.transcendentals, BYTES_ACCESSED: self.bytes_accessed}

    def by_name(self) -> dict[str, InstructionCost]:
        return {c.name: c for c in self.instructions}

    @property
    def fusions(self) -> tuple[InstructionCost, ...]:
        return tuple(c for c in self.instructions if c.opcode == "fusion")


class _Props:
    """One instruction's (or a computation's summed) properties, as XLA keeps them."""

    __slots__ = ("flops", "trans", "bytes", "out", "read", "unknown")

    def __init__(self, flops=0.0, trans=0.0, bytes_=0.0, out=0.0, read=0.0, unknown=False):
        self.flops, self.trans, self.bytes, self.out, self.read, self.unknown = flops, trans, bytes_, out, read, unknown

    def add(self, other: "_Props") -> None:
        self.flops += other.flops
        self.trans += other.trans
        self.bytes += other.bytes
        self.out += other.out
        self.read += other.read
        self.unknown |= other.unknown

    def copy(self) -> "_Props":
        return _Props(self.flops, self.trans, self.bytes, self.out, self.read, self.unknown)


def transpose_is_bitcast(instr: Instruction) -> bool:
    """ShapeUtil::TransposeIsBitcast: the permutation only relabels the physical order."""
    src, dst = instr.operands[0].shape, instr.shape
    if src.element_type is not dst.element_type:
        return False
    dims = instr.dimensions or ()
    src_m2m = src.layout.minor_to_major if src.layout and src.layout.minor_to_major else tuple(range(src.rank - 1, -1, -1))
    dst_m2m = dst.layout.minor_to_major if dst.layout and dst.layout.minor_to_major else tuple(range(dst.rank - 1, -1, -1))
    try:
        return tuple(dims[d] for d in dst_m2m) == tuple(src_m2m)
    except IndexError:
        return False


def _recorded_callees(instr: Instruction) -> tuple[Computation, ...]:
    """The computations a recorded walk records through ``instr``: control flow's (a
    call, a while's body and condition, a conditional's branches, an async
    computation), not reducers or fusion bodies."""
    op = instr.opcode
    if op is _H.ASYNC_START and instr.async_wrapped_opcode is not None:
        op = instr.async_wrapped_opcode
    return instr.called_computations if op in (_H.CALL, _H.WHILE, _H.ASYNC_START, _H.CONDITIONAL) else ()


class CostAnalysis:
    """Walks a module once; per-computation results are memoized, since XLA's
    answer for a called computation does not depend on the caller."""

    def __init__(self, module: Module):
        self.module = module
        self._memo: dict[int, _Props] = {}
        self._recorded: dict[int, list[InstructionCost]] = {}  # a computation's own records, by id
        self._fused: set[int] = set()  # fused computations met by price_callees_first's walk, by id

    # -- computations ---------------------------------------------------------
    def computation(self, comp: Computation, *, record: bool = False) -> _Props:
        """Summed properties of a computation (XLA's ProcessSubcomputation)."""
        key = id(comp)
        if key in self._memo and not (record and key not in self._recorded):
            return self._memo[key]
        self._callees_first(comp, record)
        return self._price(comp, record)

    def price_callees_first(self, comp: Computation) -> None:
        """Prices every computation ``comp`` calls, transitively, in one walk of
        the call graph (callees first): later walks find them all known, instead
        of searching each fusion body for callees of its own."""
        fused = self._fused

        def callees(instr: Instruction) -> tuple[Computation, ...]:
            called = instr.called_computations
            if called and instr.opcode is _H.FUSION:
                fused.update(map(id, called))
            return called

        for c in comp.make_embedded_computations_post_order(known=self._memo, via=callees):
            if id(c) not in self._memo:
                self._price(c, False)

    def _price(self, comp: Computation, record: bool) -> _Props:
        """``computation`` once its callees are priced."""
        key = id(comp)
        if not record and key in self._fused:
            return self._price_fused(comp)
        total = _Props()
        own: list[InstructionCost] = []
        for instr in comp:
            p = self.instruction(instr, record=record)
            total.add(p)
            if record:
                own.append(InstructionCost(
                    instr.name, comp.name, instr.opcode_text, p.flops, p.trans, p.bytes, p.read, p.out,
                    instr.fusion_kind if instr.opcode is _H.FUSION else None, p.unknown))
        self._memo[key] = total
        if record:
            self._recorded[key] = own
        return total

    def _price_fused(self, comp: Computation) -> _Props:
        """A fused computation's flops and transcendentals, all that its fusion takes
        from it (the fusion's bytes are its parameters' and outputs', ``_fusion``):
        the elementwise members, most of it, are counted without pricing their bytes."""
        total = _Props()
        for instr in comp:
            op = instr.opcode
            if op in _ELEMENTWISE_FLOP_OPS:
                if op in TRANSCENDENTAL_OPS:
                    total.trans += instr.shape.num_elements
                else:
                    total.flops += instr.shape.num_elements * _FLOPS_PER_ELEMENT.get(op, 1)
            elif op not in _FREE_OPS:
                total.add(self.instruction(instr))
        self._memo[id(comp)] = total
        return total

    def _callees_first(self, comp: Computation, record: bool) -> None:
        """Prices what ``comp``'s walk enters before ``comp`` itself, callees first, so
        that no walk goes more than one call deep (call and fusion chains of any depth)."""
        self.price_callees_first(comp)
        if record:
            for c in comp.make_embedded_computations_post_order(known=self._recorded, via=_recorded_callees):
                self.computation(c, record=True)

    def records(self, comp: Computation) -> list[InstructionCost]:
        """The records of a recorded walk of ``comp``, in program order: a control-flow
        callee's (the first time it is reached) just before the instruction calling it."""

        def items(c: Computation) -> Iterator[tuple[str, object]]:
            for instr, rec in zip(c, self._recorded[id(c)]):
                for callee in _recorded_callees(instr):
                    yield "walk", callee
                yield "emit", rec

        out: list[InstructionCost] = []
        done: set[int] = {id(comp)}
        stack = [items(comp)]  # an explicit stack: call chains of any depth
        while stack:
            item = next(stack[-1], None)
            if item is None:
                stack.pop()
            elif item[0] == "emit":
                out.append(item[1])
            elif id(item[1]) not in done and id(item[1]) in self._recorded:
                done.add(id(item[1]))
                stack.append(items(item[1]))
        return out

    def _sub(self, comp: Computation | None, record: bool) -> _Props:
        return self.computation(comp, record=record) if comp is not None else _Props()

    # -- instructions ---------------------------------------------------------
    def instruction(self, instr: Instruction, *, record: bool = False) -> _Props:
        op = instr.opcode
        out = output_bytes(instr.shape)
        operand_sizes = [shape_size(o.shape) for o in instr.operands]
        p = _Props(bytes_=out + sum(operand_sizes), out=out, read=sum(operand_sizes))
        n_out = _elements(instr.shape)
        if op in _ELEMENTWISE_FLOP_OPS:
            if op in TRANSCENDENTAL_OPS:
                p.trans = n_out
            else:
                p.flops = n_out * _FLOPS_PER_ELEMENT.get(op, 1)
        elif op in _FREE_OPS or (op is _H.TRANSPOSE and transpose_is_bitcast(instr)):
            p.bytes = p.out = p.read = 0
        elif op is _H.DOT:
            p.flops = dot_flops(instr)
        elif op is _H.RAGGED_DOT:
            p.flops = dot_flops(instr, ragged=True)
        elif op is _H.SLICE:
            p.bytes, p.out, p.read = 2 * out, out, out
        elif op is _H.DYNAMIC_SLICE:
            idx = operand_sizes[1] if len(operand_sizes) > 1 else 0
            p.bytes, p.out, p.read = 2 * out + idx, out, out + idx
        elif op is _H.DYNAMIC_UPDATE_SLICE:
            upd = operand_sizes[1]
            idx = operand_sizes[2] if len(operand_sizes) > 2 else 0  # XLA counts only the first index
            p.bytes, p.out, p.read = 2 * upd + idx, upd, upd + idx
        elif op is _H.TUPLE:
            table = shape_size(instr.shape)  # HandleTuple: only the index table is written
            p.bytes, p.out, p.read = table, table, 0
        elif op is _H.GATHER:
            self._gather(instr, p)
        elif op is _H.SCATTER:
            self._scatter(instr, p, record)
        elif op is _H.REDUCE:
            sub = self._sub(instr.to_apply, False)
            out0 = instr.shape if instr.shape.is_array else instr.shape.tuple_shapes[0]
            count = _elements(instr.operands[0].shape) - _elements(out0)
            p.flops, p.trans = sub.flops * count, sub.trans * count
        elif op is _H.REDUCE_WINDOW:
            sub = self._sub(instr.to_apply, False)
            count = _reduce_window_count(instr)
            p.flops, p.trans = sub.flops * count, sub.trans * count
        elif op is _H.MAP:
            sub = self._sub(instr.to_apply, False)
            p.flops, p.trans = sub.flops * n_out, sub.trans * n_out
        elif op is _H.SELECT_AND_SCATTER:
            sel = self._sub(instr.called_computation("select"), False)
            sca = self._sub(instr.called_computation("scatter"), False)
            src = _elements(instr.operands[1].shape)
            w = math.prod(instr.window.size) if instr.attribute("window") else 1
            p.flops = sel.flops * src * (w - 1) + sca.flops * src
            p.trans = sel.trans * src * (w - 1) + sca.trans * src
        elif op is _H.FUSION:
            self._fusion(instr, p, record)
        elif op is _H.ASYNC_START and instr.async_wrapped_opcode is not None:
            p = self._wrapped(instr, record)
        elif op in (_H.CALL, _H.WHILE, _H.ASYNC_START):
            p = _Props()
            for c in instr.called_computations:
                p.add(self.computation(c, record=record))
            if op is _H.ASYNC_START and not instr.called_computations:
                p = _Props(bytes_=out + sum(operand_sizes), out=out, read=sum(operand_sizes))
        elif op is _H.CONDITIONAL:
            branches = [self.computation(c, record=record) for c in instr.called_computations]
            p = _Props()
            for b in branches:
                p.flops, p.trans, p.bytes = max(p.flops, b.flops), max(p.trans, b.trans), max(p.bytes, b.bytes)
                p.out, p.read = max(p.out, b.out), max(p.read, b.read)
        elif op in (_H.ALL_REDUCE, _H.ALL_REDUCE_START):
            arrays = [s for _, s in instr.shape.leaves() if s.is_array]
            p.flops = sum(_elements(s) for s in arrays)
            p.out = sum(shape_size(s) for s in arrays)
            p.bytes = p.out + sum(operand_sizes)
        elif op is _H.SORT:
            n = _elements(instr.operands[0].shape)
            p.flops = n * (math.ceil(math.log2(n)) if n > 1 else 0)
        elif op is _H.RNG:
            p.trans = n_out
        elif op is _H.RNG_BIT_GENERATOR:
            p.trans = _elements_recursive(instr.shape)
        elif op is _H.CONVOLUTION:
            p.flops = _convolution_flops(instr)
        elif op is _H.FFT:
            src = instr.operands[0].shape
            src = src.tuple_shapes[0] if src.is_tuple else src
            lengths = [int(x) for x in (instr.attribute("fft_length") or "{}").strip("{}").split(",") if x.strip()]
            logs = math.prod(int(math.floor(math.log2(d))) for d in lengths) if lengths else 1
            p.flops = 2 * 4 * logs * _elements(src)
        elif op is _H.TRIANGULAR_SOLVE:
            a, b = instr.operands[0].shape, instr.operands[1].shape
            p.read = operand_sizes[0] / 2 + operand_sizes[1]
            p.bytes = out + p.read
            p.flops = 2 * (a.dims[-1] if a.dims else 1) * _elements(b)
        elif op is _H.CHOLESKY:
            a = instr.operands[0].shape
            p.out = p.read = operand_sizes[0] / 2
            p.bytes = operand_sizes[0]
            p.flops = ((a.dims[-1] if a.dims else 1) * _elements(a)) // 3
        elif op is _H.CUSTOM_CALL and is_sharding_annotation(instr):
            p = _Props()  # XLA: -1 flops, -1 bytes (unknown); a marker that moves nothing
        elif op is _H.CUSTOM_CALL and (gemm := _gemm_flops(instr)) is not None:
            # a cuBLAS/cuBLASLt GEMM (XLA: -1, unknown): its dot's flops, and its result
            # written, not the scratch workspace beside it in the output tuple
            result = output_bytes(instr.shape.tuple_shapes[0]) if instr.shape.is_tuple else out
            p = _Props(flops=gemm, bytes_=result + sum(operand_sizes), out=result, read=sum(operand_sizes))
        elif op is _H.CUSTOM_CALL:
            p.unknown = True  # XLA: -1 flops and -1 bytes; we keep operands + output
        return p

    def _wrapped(self, start: Instruction, record: bool) -> _Props:
        """``fusion-start`` / ``reduce-scatter-start`` sugar: XLA parses it into an
        async computation holding one instruction, and prices that instruction.
        We price a stand-in for it (detached again before returning)."""
        out = start.shape.tuple_shapes[1] if start.shape.is_tuple and len(start.shape.tuple_shapes) > 1 else start.shape
        stand_in = Instruction(start.name, start.async_wrapped_opcode, out, start.operands,
                               dict(start.attributes), start.called_computation_map)
        try:
            return self.instruction(stand_in, record=record)
        finally:
            stand_in.replace_operands(())

    def _gather(self, g: Instruction, p: _Props) -> None:
        out = shape_size(g.shape)
        idx = shape_size(g.operands[1].shape)
        p.bytes, p.out, p.read = 2 * out + idx, out, out + idx
        p.flops = p.trans = 0

    def _scatter(self, s: Instruction, p: _Props, record: bool) -> None:
        n = (len(s.operands) - 1) // 2
        updates = s.operands[n + 1:]
        upd = sum(shape_size(u.shape) for u in updates)
        idx = shape_size(s.operands[n].shape)
        p.bytes, p.out, p.read = 3 * upd + idx, upd, 2 * upd + idx
        sub = self._sub(s.to_apply, False)
        count = _elements(updates[0].shape) if updates else 0
        p.flops, p.trans = sub.flops * count, sub.trans * count

    def _fusion(self, f: Instruction, p: _Props, record: bool) -> None:
        comp = f.fused_computation
        if comp is None:
            return
        if f.fusion_kind == "kCustom":
            # HloCostAnalysis::HandleFusion: a custom fusion holding a gather or
            # scatter is priced as that one instruction.
            for inner in comp:
                if inner.opcode is _H.GATHER:
                    p.flops = p.trans = 0
                    self._gather(inner, p)
                    return
                if inner.opcode is _H.SCATTER:
                    p.flops = p.trans = 0
                    self._scatter(inner, p, record)
                    return
        sub = self.computation(comp)
        p.flops, p.trans, p.unknown = sub.flops, sub.trans, sub.unknown
        p.out = _fusion_output_bytes(f, comp)
        constants = sum(shape_size(i.shape) for i in comp
                        if i.opcode is _H.CONSTANT and _elements(i.shape) > IMMEDIATE_CONSTANT_MAX_ELEMENTS)
        p.read = sum(_fusion_operand_bytes(param) for param in comp.parameters)
        p.bytes = p.out + constants + p.read


def _fusion_output_bytes(f: Instruction, comp: Computation) -> float:
    """Outputs written once; a dynamic-update-slice root writes only its update."""
    root = comp.root
    total = 0
    if not f.shape.is_tuple:
        if f.shape.is_array:
            return shape_size(root.operands[1].shape) if root.opcode is _H.DYNAMIC_UPDATE_SLICE else shape_size(f.shape)
        return 0
    for index, leaf in f.shape.leaves():
        if not leaf.is_array:
            continue
        r = root.operands[index[0]] if len(index) == 1 and root.opcode is _H.TUPLE else root
        if len(index) == 1 and r.opcode is _H.DYNAMIC_UPDATE_SLICE:
            total += shape_size(r.operands[1].shape)
        else:
            total += shape_size(leaf)
    return total


def _fusion_operand_bytes(param: Instruction) -> float:
    if not param.shape.is_tuple:
        return _parameter_read_bytes(param)
    total = 0
    for index, _leaf in param.shape.leaves():
        node = param
        for sub in index:
            for u in node.users:
                if u.opcode is _H.GET_TUPLE_ELEMENT and u.tuple_index == sub:
                    node = u
                    break
        total += _parameter_read_bytes(node)
    return total


def _parameter_read_bytes(hlo: Instruction) -> float:
    """HloCostAnalysis::FusionParameterReadBytes: a fused parameter is read once
    by all its plain users together; slices read only what they keep."""
    size = 0
    seen_trivial = False
    for user in hlo.users:
        op = user.opcode
        if op is _H.FUSION:
            nested = user.fused_computation
            root = nested.root
            params = nested.parameters
            for idx in [i for i, o in enumerate(user.operands) if o is hlo]:
                nested_seen = False
                simple = root.operand_count == 0 or params[idx] is root.operands[0]
                for fu in user.users:
                    if simple and fu.opcode is _H.SLICE:
                        size += shape_size(fu.shape)
                    elif simple and fu.opcode is _H.DYNAMIC_SLICE:
                        if user is fu.operands[0]:
                            size += shape_size(fu.shape)
                        elif not nested_seen:
                            nested_seen = True
                            size += shape_size(user.shape)
                    elif simple and fu.opcode is _H.DYNAMIC_UPDATE_SLICE:
                        if user is not fu.operands[0] and not nested_seen:
                            nested_seen = True
                            size += shape_size(user.shape)
                    elif not nested_seen:
                        nested_seen = True
                        size += _parameter_read_bytes(params[idx])
        elif op is _H.SLICE:
            size += shape_size(user.shape)
        elif op is _H.DYNAMIC_SLICE:
            if hlo is user.operands[0]:
                size += shape_size(user.shape)
            elif not seen_trivial:
                seen_trivial = True
                size += shape_size(hlo.shape)
        elif op is _H.DYNAMIC_UPDATE_SLICE:
            if hlo is not user.operands[0] and not seen_trivial:
                seen_trivial = True
                size += shape_size(hlo.shape)
        elif op in (_H.BROADCAST, _H.RESHAPE):
            size += shape_size(hlo.shape)
        elif not seen_trivial:
            seen_trivial = True
            size += shape_size(hlo.shape)
    return size


def dot_flops(dot: Instruction, *, ragged: bool = False) -> int:
    """2 * output elements * contracted size (GetDotFlops)."""
    lhs = dot.operands[0].shape
    raw = dot.attribute("lhs_contracting_dims") or "{}"
    contracting = [int(x) for x in raw.strip("{}").split(",") if x.strip()]
    k = math.prod(lhs.dims[d] for d in contracting)
    out = _elements(dot.shape)
    if ragged:
        groups = [int(x) for x in (dot.attribute("rhs_group_dims") or "{}").strip("{}").split(",") if x.strip()]
        dims = list(dot.shape.dims)
        for i in range(len(groups)):  # XLA deletes dimension i, once per group dimension
            if i < len(dims):
                dims.pop(i)
        out = math.prod(dims)
    return 2 * out * k


def _gemm_flops(call: Instruction) -> int | None:
    """2 * result elements * contracted size of a cuBLAS GEMM custom call
    (``__cublas$gemm``, ``__cublas$lt$matmul``...: its dot's dimension numbers are
    in ``gemm_backend_config``); None for any other custom call."""
    if not (call.custom_call_target or "").startswith("__cublas$") or not call.operands:
        return None
    config = call.backend_config
    gemm = config.get("gemm_backend_config") if isinstance(config, dict) else None
    if not isinstance(gemm, dict) or "dot_dimension_numbers" not in gemm:
        return None
    lhs = call.operands[0].shape
    contracting = [int(d) for d in gemm["dot_dimension_numbers"].get("lhs_contracting_dimensions", [])]
    result = call.shape.tuple_shapes[0] if call.shape.is_tuple else call.shape
    return 2 * _elements(result) * math.prod(lhs.dims[d] for d in contracting)


def _reduce_window_count(rw: Instruction) -> int:
    """(window - 1) reductions per output, or XLA's count for a reduce-window that is a
    reduce followed by a broadcast of one padded dimension (HandleReduceWindow)."""
    w = rw.window
    sizes = w.size
    pads = w.pad or tuple((0, 0) for _ in sizes)
    window_elems = math.prod(sizes)
    out_shape = rw.shape if rw.shape.is_array else rw.shape.tuple_shapes[0]
    n_out = _elements(out_shape)
    count = (window_elems - 1) * n_out
    n_reduce = sum(1 for s in sizes if s != 1)
    n_padded = sum(1 for lo_hi in pads if lo_hi[0] != 0 or lo_hi[1] != 0)
    if n_reduce == 1 and n_padded == 1 and rw.shape.is_array:
        for d, (s, (lo, hi)) in enumerate(zip(sizes, pads)):
            if s != 1 and lo != 0 and hi != 0 and lo == hi and s == 2 * lo + 1:
                if lo == rw.shape.dims[d] - 1:
                    span = rw.shape.dims[d]
                    count = n_out // span + (span - 1)
                break
    return count


def _convolution_flops(conv: Instruction) -> int:
    """2 * output elements * input features per group * kernel spatial size; an
    upper bound of XLA's count, which skips padded positions (no corpus module
    has a convolution)."""
    rhs = conv.operands[1].shape
    out = _elements(conv.shape)
    labels = conv.attribute("dim_labels") or ""
    kernel = labels.split("_")[1] if "_" in labels else ""
    i_pos = kernel.find("i")
    in_feat = rhs.dims[i_pos] if 0 <= i_pos < rhs.rank else 1
    spatial = math.prod(rhs.dims[j] for j, ch in enumerate(kernel) if ch.isdigit() and j < rhs.rank) if kernel else 1
    return 2 * out * in_feat * spatial


def analyze(module: Module) -> ModuleCost:
    """The module's cost, totals over the entry computation as XLA reports them."""
    ca = CostAnalysis(module)
    total = ca.computation(module.entry, record=True)
    return ModuleCost(module.name, total.flops, total.trans, total.bytes, tuple(ca.records(module.entry)))


def known_trip_count(instr: Instruction) -> int | None:
    """A while loop's trip count as XLA records it
    (``backend_config={"known_trip_count":{"n":"N"}}``), else None."""
    cfg = instr.attributes.get("backend_config")
    if instr.opcode is not _H.WHILE or not isinstance(cfg, str) or "known_trip_count" not in cfg:
        return None
    try:
        return int(json.loads(cfg)["known_trip_count"]["n"])
    except (ValueError, KeyError, TypeError):
        return None


def executions(module: Module) -> tuple[dict[str, int], int]:
    """How often each computation runs per run of the module: a while body its
    loop's known trip count times its caller's count (the condition one more),
    everything else as often as its caller; and how many loops have no known trip
    count (their bodies are counted once).  The one loop rule of every prediction
    (``roofline``, ``hlo analyze``, ``bench --target``, ``regress``; ``collectives``
    reads the same trip counts).  Iterative: call chains of any depth."""
    out: dict[str, int] = {}
    unknown = 0
    if module.entry is None:
        return out, 0
    stack = [(module.entry, 1)]
    while stack:
        comp, n = stack.pop()
        if out.get(comp.name, 0) >= n:
            continue
        out[comp.name] = n
        for instr in comp:
            if instr.opcode is _H.FUSION:
                continue
            if instr.opcode is _H.WHILE:
                trips = known_trip_count(instr)
                unknown += trips is None
                body, cond = instr.called_computation("body"), instr.called_computation("condition")
                if body is not None:
                    stack.append((body, n * (trips if trips is not None else 1)))
                if cond is not None:
                    stack.append((cond, n * ((trips + 1) if trips is not None else 1)))
                continue
            stack.extend((c, n) for c in instr.called_computations)
    return out, unknown


def kernel_instructions(module: Module, cost: ModuleCost | None = None) -> list[Instruction]:
    """Every kernel the module runs: the ``is_kernel`` instructions of the entry and
    of the control-flow bodies it calls (the top-level instructions ``analyze``
    records), each once.  The one kernel list behind every command's count
    (``roofline``, ``hlo analyze``, ``bench``, ``tune``, ``regress``)."""
    cost = cost or analyze(module)
    comps = {c.name: c for c in module.computations}
    out: list[Instruction] = []
    for c in cost.instructions:
        comp = comps.get(c.computation)
        instr = comp.get_instruction(c.name) if comp is not None else None
        if instr is not None and is_kernel(instr):
            out.append(instr)
    return out


def module_cost(module: Module) -> dict[str, float]:
    """``{"flops", "transcendentals", "bytes accessed"}`` like XLA's cost analysis."""
    return analyze(module).as_dict()


# -- the coarse model of fusion and scheduling decisions ---------------------------
# Decisions compare alternatives, so they price an instruction by its data
# (``Shape.byte_size``: every array leaf, no tuple index tables) rather than by
# XLA's per-opcode rules above.


def result_bytes(instr: Instruction) -> int:
    """Bytes ``instr`` writes: every array leaf of its result."""
    return instr.shape.byte_size


def operand_bytes(instr: Instruction) -> int:
    """Bytes ``instr`` reads: every operand whole."""
    return sum(o.shape.byte_size for o in instr.operands)


def unfused_bytes(instr: Instruction) -> int:
    """Memory traffic of ``instr`` run on its own: operands read, result written."""
    return result_bytes(instr) + operand_bytes(instr)


def element_flops(instr: Instruction) -> float:
    """The scheduler's coarse work count: 2*M*N*K for a dot, the sum over the body
    for a fusion (its parameters included), one flop per output element for
    anything else. Coarser than ``CostAnalysis`` on purpose: the latency-hiding
    scheduler only needs which instructions are long, and its schedules are pinned."""
    total, stack = 0.0, [instr]  # nested fusion bodies walked with a stack: chains of any depth
    while stack:
        i = stack.pop()
        if i.opcode is _H.DOT:
            total += float(dot_flops(i))
        elif i.opcode is _H.FUSION and i.fused_computation is not None:
            stack.extend(i.fused_computation)
        elif i.shape.is_array:
            total += float(i.shape.num_elements)
    return total


def reread_bytes(producer: Instruction, *, wrapped_broadcast: bool = False) -> int:
    """Bytes one more copy of a duplicated ``producer`` reads: its operands, except
    a broadcast's (its small input stays in cache). ``wrapped_broadcast=True`` also
    reads nothing for a fusion that only wraps a broadcast of at most one parameter
    (XLA:CPU's one-op fusion around a broadcast): priority fusion's charge per extra
    copy; ``bytes_saved`` (and with it the profitability checks) looks at the
    opcode only."""
    if producer.opcode is _H.BROADCAST:
        return 0
    body = producer.fused_computation
    if wrapped_broadcast and body is not None and body.root.opcode is _H.BROADCAST and len(body.parameters) <= 1:
        return 0
    return operand_bytes(producer)


def bytes_saved(producer: Instruction, consumers: Sequence[Instruction], duplicate: bool) -> int:
    """Memory traffic saved by fusing ``producer`` into ``consumers``: its result is
    no longer written and read back (once per consumer); when it is duplicated the
    original still runs for its other users, so only the reads are saved and the
    clone reads the producer's operands again."""
    out = result_bytes(producer)
    if not duplicate:
        return out * (1 + len(consumers))
    return out * len(consumers) - reread_bytes(producer)


# -- time on a device ----------------------------------------------------------------


def arithmetic_seconds(flops: float, transcendentals: float, flops_per_s: float,
                       transcendentals_per_s: float) -> float:
    """Compute time at a device's rates: flops and transcendentals issue separately."""
    return flops / flops_per_s + transcendentals / transcendentals_per_s


def kernel_seconds(compute_s: float, memory_s: float, launch_s: float) -> float:
    """``KernelTime.time_s`` without the object: for callers that price many
    kernels (a frozen dataclass costs more to make than the sum)."""
    return max(compute_s, memory_s) + launch_s


def kernel_bound(compute_s: float, memory_s: float, launch_s: float) -> str:
    """``launch`` when the launch outweighs the body, else ``compute`` or ``memory``."""
    if launch_s > max(compute_s, memory_s):
        return "launch"
    return "compute" if compute_s >= memory_s else "memory"


@dataclass(frozen=True, slots=True)
class KernelTime:
    """One kernel's roofline: ``max(compute, memory) + launch``. Compute and
    memory overlap fully (XLA:GPU's GpuPerformanceModel overlaps them 95%); the
    launch never does."""

    compute_s: float
    memory_s: float
    launch_s: float = 0.0

    @property
    def time_s(self) -> float:
        return kernel_seconds(self.compute_s, self.memory_s, self.launch_s)

    @property
    def bound(self) -> str:
        return kernel_bound(self.compute_s, self.memory_s, self.launch_s)
