"""One GPU kernel's time, the way XLA:GPU's analytical model prices it: its
GpuPerformanceModel (xla/service/gpu/model/gpu_performance_model.cc and
gpu_performance_model_base.cc) in Python over our IR.

What is taken from XLA, and what is not: docs/analysis.md#our-gpu-roofline-vs-xlas-model-gpu_kernel_model
"""

from __future__ import annotations

import contextlib
import contextvars
import math
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator

from hlo_tools.ir import Computation, Instruction
from hlo_tools.opcode import ELEMENTWISE, HloOpcode
from hlo_tools.shape import PrimitiveType, Shape

from .cost import dot_flops, transpose_is_bitcast
from .devices import Device

_H = HloOpcode

#: kMemoryComputeParallelism (gpu_performance_model_base.h): compute and memory overlap 95%
MEMORY_COMPUTE_PARALLELISM = 0.95
#: kL2CacheSpeedup, kL1CacheSpeedup (gpu_performance_model_base.cc)
L2_CACHE_SPEEDUP = 2.5
L1_CACHE_SPEEDUP = 8.0
#: GpuHloCostAnalysis::GetFlopsPerElementwiseOpElement's kDefaultFlopsPerElement
DEFAULT_FLOPS_PER_ELEMENT = 3
#: DeviceDescription::dram_to_l2_transaction_size_bytes: an uncoalesced read uses one
#: element of each 64-byte transaction (GetCoalescingUtilizationRate)
DRAM_TO_L2_TRANSACTION_BYTES = 64
#: the loop emitter's block: 32 threads per warp x kWarpSchedulers = 4 (launch_dimensions.cc)
LOOP_THREADS_PER_BLOCK = 128
#: the fallback when no emitter sizes the launch (EstimateFusionLaunchDimensions)
FALLBACK_THREADS_PER_BLOCK = 128

# HloOpProfiles for sm_90 (xla/service/gpu/model/hlo_op_profiles_data.h): clock
# cycles per element by (opcode, element type). Missing pairs cost
# DEFAULT_FLOPS_PER_ELEMENT; the table has no BF16 rows and no logistic.
_F32 = {
    _H.ADD: 7, _H.SUBTRACT: 7, _H.MULTIPLY: 3, _H.DIVIDE: 19, _H.EXPONENTIAL: 79, _H.LOG: 166,
    _H.TANH: 467, _H.RSQRT: 75, _H.SQRT: 75, _H.POWER: 510, _H.SINE: 958, _H.COSINE: 958,
    _H.EXPONENTIAL_MINUS_ONE: 190, _H.LOG_PLUS_ONE: 229,
}
_F16 = {_H.ADD: 7, _H.SUBTRACT: 7, _H.MULTIPLY: 7, _H.DIVIDE: 43, _H.EXPONENTIAL: 102, _H.LOG: 182,
        _H.TANH: 502, _H.RSQRT: 95}
OP_PROFILE_SM90: dict[tuple[HloOpcode, PrimitiveType], int] = {
    **{(op, PrimitiveType.F32): c for op, c in _F32.items()},
    **{(op, PrimitiveType.F16): c for op, c in _F16.items()},
}

_ELEMENTWISE = ELEMENTWISE - {_H.COPY}
_PASS_THROUGH = frozenset({_H.TUPLE, _H.GET_TUPLE_ELEMENT})
_DOTS = frozenset({_H.DOT, _H.CONVOLUTION, _H.RAGGED_DOT, _H.SCALED_DOT})


@dataclass(frozen=True, slots=True)
class GpuFigures:
    """The device figures XLA's model reads beyond the roofline's (``Device.extra``
    may override each; defaults are XLA's sm_90 values, cited at the field)."""

    #: GpuTargetConfig ``fpus_per_core`` (../shared/gpu_specs/h100_sxm.txtpb: 128)
    fpus_per_core: int = 128
    #: DeviceDescription::memory_transactions_per_clock (hard-coded 32)
    memory_transactions_per_clock: int = 32
    #: DeviceDescription::l1_cache_size_per_SM (hard-coded 2 KiB)
    l1_bytes_per_sm: int = 2 * 1024
    #: threads_per_core_limit (h100_sxm.txtpb: 2048): the loop emitter unrolls only
    #: when the output has at least SMs x this many elements
    threads_per_sm: int = 2048

    @classmethod
    def of(cls, device: Device) -> "GpuFigures":
        e = device.extra or {}
        d = cls()
        return cls(int(e.get("fpus_per_core", d.fpus_per_core)),
                   int(e.get("memory_transactions_per_clock", d.memory_transactions_per_clock)),
                   int(e.get("l1_bytes_per_sm", d.l1_bytes_per_sm)),
                   int(e.get("threads_per_sm", d.threads_per_sm)))


@dataclass(frozen=True, slots=True)
class Launch:
    blocks: int
    threads_per_block: int


@dataclass(frozen=True, slots=True)
class OperandRead:
    """One operand's traffic: ``total`` bytes accessed (re-reads counted), ``net``
    distinct bytes (at most its size), element bytes and whether reads coalesce."""

    total: float
    net: float
    element_bytes: int
    coalesced: bool = True


@dataclass(frozen=True, slots=True)
class GpuKernelCost:
    """XLA's three times for one kernel (seconds, no launch) and what they came from."""

    compute_s: float
    memory_s: float
    exec_s: float
    flops: float
    launch: Launch
    read_s: float
    write_s: float


# -- the formulas ------------------------------------------------------------------------


def combine(compute_s: float, memory_s: float) -> float:
    """CombineComputeAndMemoryAccessTime: ``C + M - 0.95 min(C, M)``."""
    return compute_s + memory_s - MEMORY_COMPUTE_PARALLELISM * min(compute_s, memory_s)


def compute_seconds(flops: float, launch: Launch, device: Device, fig: GpuFigures | None = None) -> float:
    """ComputeTime: each active FPU (threads per block up to ``fpus_per_core``, on up
to one block per SM) does one FMA (2 flops) per clock."""
    fig = fig or GpuFigures.of(device)
    fpus = min(launch.threads_per_block, fig.fpus_per_core) * min(launch.blocks, device.sms)
    per_ns = device.clock_ghz * 2 * fpus
    return flops / per_ns * 1e-9 if per_ns > 0 else 0.0


def adjust_bandwidth(bandwidth: float, blocks: int, device: Device, fig: GpuFigures | None = None) -> float:
    """AdjustBandwidth: a block moves at most ``memory_transactions_per_clock`` bytes per clock."""
    fig = fig or GpuFigures.of(device)
    return min(bandwidth, max(blocks, 1) * device.clock_ghz * 1e9 * fig.memory_transactions_per_clock)


def read_seconds(op: OperandRead, blocks: int, device: Device, fig: GpuFigures | None = None) -> float:
    """ReadTimeWithDRAMHeuristic: the first read from DRAM (slowed by uncoalescing),
    re-reads from L2 (x2.5), from L1 as well (x8) when the distinct bytes fit 2 KiB
    per SM, from DRAM again when they do not fit L2."""
    fig = fig or GpuFigures.of(device)
    util = 1.0 if op.coalesced else op.element_bytes / DRAM_TO_L2_TRANSACTION_BYTES
    bw = device.memory_bandwidth
    dram = bw * util
    rest = bw
    if op.net < device.l2_bytes:
        rest *= L2_CACHE_SPEEDUP
        if op.net < fig.l1_bytes_per_sm * device.sms:
            rest *= L1_CACHE_SPEEDUP
    else:
        rest *= util
    dram = adjust_bandwidth(dram, blocks, device, fig)
    rest = adjust_bandwidth(rest, blocks, device, fig)
    first = min(op.net, op.total)
    return first / dram + (op.total - first) / rest


def write_seconds(bytes_written: float, device: Device) -> float:
    """WriteTime: output bytes at the DRAM bandwidth (no block cap)."""
    return bytes_written / device.memory_bandwidth


# -- flops -------------------------------------------------------------------------------


def _elements(shape: Shape) -> int:
    return shape.num_elements if shape.is_array else sum(s.num_elements for _, s in shape.leaves() if s.is_array)


def _element_bytes(shape: Shape) -> int:
    """Bytes per element as a tiled read counts them (4 for a tuple or an unsized type)."""
    et = shape.element_type if shape.is_array else None
    return max(et.byte_width if et is not None and et.bit_width else 4, 1)


def _bytes(shape: Shape) -> int:
    if shape.is_array:
        return shape.byte_size if all(d >= 0 for d in shape.dims) else 0
    return sum(s.byte_size for _, s in shape.leaves() if s.is_array)


def elementwise_flops_per_element(op: HloOpcode, element_type: PrimitiveType) -> int:
    return OP_PROFILE_SM90.get((op, element_type), DEFAULT_FLOPS_PER_ELEMENT)


def _computation_flops(comp: Computation | None) -> float:
    """Flops of a scalar computation (a reducer), every instruction once."""
    if comp is None:
        return 0.0
    return sum(instruction_flops(i) for i in comp)


def instruction_flops(instr: Instruction) -> float:
    """GpuHloCostAnalysis's flops of one instruction (clock cycles, HloOpProfiles)."""
    op = instr.opcode
    if op in _ELEMENTWISE:
        if not instr.shape.is_array:
            return 0.0
        return float(_elements(instr.shape) * elementwise_flops_per_element(op, instr.shape.element_type))
    if op is _H.REDUCE:
        out0 = instr.shape if instr.shape.is_array else instr.shape.tuple_shapes[0]
        count = _elements(instr.operands[0].shape) - _elements(out0)
        return _computation_flops(instr.to_apply) * max(count, 0)
    if op is _H.CONCATENATE:
        dims = instr.dimensions or (0,)
        dim = dims[0]
        per = 400 if dim > 0 and instr.operands[0].shape.dims[dim] % 32 else 6
        return float(per * _elements(instr.shape))
    if op in _DOTS and op is not _H.CONVOLUTION:
        return float(dot_flops(instr))  # the cost model's GetDotFlops
    if op is _H.FUSION and instr.fused_computation is not None:
        return fusion_utilization(instr).flops
    return 0.0


# -- utilization (GpuHloCostAnalysis::FusionCalculateUtilizations) -----------------------


def _operand_utilization(instr: Instruction, index: int) -> float:
    """How many times ``instr`` reads each element of operand ``index``, on average:
    1, less for what a slice keeps, and output / operand elements for a broadcast
    (XLA's fused emitter recomputes a broadcast's operand, a reduce included, for
    every output element: measured on XLA's estimates, e.g. a softmax loop fusion
    whose param is priced 33 times its size for 32-wide rows)."""
    op = instr.opcode
    src = instr.operands[index].shape
    n_src = _elements(src) if src.is_array else 0
    if not n_src:
        return 1.0
    if op is _H.BROADCAST:
        return _elements(instr.shape) / n_src
    if op in (_H.SLICE, _H.DYNAMIC_SLICE) and index == 0:
        return _elements(instr.shape) / n_src
    if op is _H.GATHER and index == 0:
        return min(1.0, _elements(instr.shape) / n_src)
    if op is _H.DYNAMIC_UPDATE_SLICE and index == 0 and _is_root(instr):
        return 0.0  # updated in place: the operand is not read
    return 1.0


def _is_root(instr: Instruction) -> bool:
    comp = instr.parent
    root = comp.root if comp is not None else None
    return root is instr or (root is not None and root.opcode is _H.TUPLE and instr in root.operands)


@dataclass(frozen=True, slots=True)
class Utilization:
    flops: float
    parameter: dict  # fused parameter number -> utilization


def fusion_utilization(fusion: Instruction) -> Utilization:
    """Utilization-weighted flops of a fusion and the utilization of each parameter:
    an instruction's utilization is the sum over its non-elementwise users of the
    fraction of it they read (elementwise users pass theirs through). Nested fusions
    are priced first, innermost first (fusion chains of any depth)."""
    comp = fusion.fused_computation
    shared = _UTILIZATION.get()
    if shared is not None and id(comp) in shared:
        return shared[id(comp)]
    memo: dict[int, Utilization] = shared if shared is not None else {}
    for c in (*comp.make_embedded_computations_post_order(via=_fused), comp):
        if id(c) not in memo:
            memo[id(c)] = _utilization(c, memo)
    return memo[id(comp)]


_UTILIZATION: contextvars.ContextVar[dict[int, Utilization] | None] = contextvars.ContextVar(
    "hlo_fusion_utilization", default=None)


@contextlib.contextmanager
def utilization_memo() -> Iterator[None]:
    """Within the block each fused computation's utilization is computed once (a
    kernel's flops and its operand reads both ask for it): for walks that price a
    module without changing it (the roofline)."""
    token = _UTILIZATION.set({})
    try:
        yield
    finally:
        _UTILIZATION.reset(token)


def _fused(instr: Instruction) -> tuple[Computation, ...]:
    return (instr.fused_computation,) if instr.opcode is _H.FUSION and instr.fused_computation is not None else ()


def _utilization(comp: Computation, nested: dict[int, Utilization]) -> Utilization:
    """``fusion_utilization`` of one fused computation, its nested fusions' in ``nested``."""
    order = list(comp)  # post order (operands first)
    root = comp.root
    root_util: dict[int, float] = {id(root): 1.0}
    use_roots: dict[int, set[int]] = {id(root): {id(root)}}
    util: dict[int, float] = {}
    flops = 0.0
    params: dict[int, float] = {}
    for instr in reversed(order):
        u = sum(root_util.get(r, 0.0) for r in use_roots.get(id(instr), ()))
        util[id(instr)] = u
        if instr.opcode is _H.FUSION and instr.fused_computation is not None:
            flops += u * nested[id(instr.fused_computation)].flops
        else:
            flops += u * instruction_flops(instr)
        if instr.opcode is _H.PARAMETER:
            params[instr.parameter_number] = u
        for idx, operand in enumerate(instr.operands):
            if instr.opcode in _ELEMENTWISE or instr.opcode in _PASS_THROUGH:
                use_roots.setdefault(id(operand), set()).update(use_roots.get(id(instr), ()))
            else:
                use_roots.setdefault(id(operand), set()).add(id(operand))
                ou = u * _operand_utilization(instr, idx)
                n = _elements(operand.shape)
                ou = math.ceil(ou * n) / n if n else 0.0
                root_util[id(operand)] = root_util.get(id(operand), 0.0) + ou
    return Utilization(flops, params)


# -- launch dimensions -------------------------------------------------------------------


def _triton_launch(config: dict) -> Launch | None:
    fbc = config.get("fusion_backend_config") or {}
    blc = fbc.get("block_level_fusion_config")
    if not blc:
        return None
    return Launch(0, int(blc.get("num_warps", 4)) * 32)


def _loop_launch(elements: int, unroll: int, device: Device) -> Launch:
    """CalculateLaunchDimensions: one thread per ``unroll`` elements, 128 a block."""
    if elements <= 1:
        return Launch(1, 1)
    n = math.ceil(elements / unroll)
    threads = min(LOOP_THREADS_PER_BLOCK, n)
    return Launch(math.ceil(n / threads), threads)


def _loop_unroll(fusion: Instruction, shape: Shape, device: Device, fig: GpuFigures) -> int:
    """ComputeLoopFusionConfig: unroll 4 (or 2) when the output fills the GPU, and
    enough that a thread writes whole bytes."""
    n = _elements(shape)
    unroll = 1
    if n >= fig.threads_per_sm * device.sms:
        unroll = next((u for u in (4, 2) if n % u == 0), 1)
    bits = min((s.element_type.bit_width for _, s in fusion.shape.leaves() if s.is_array), default=8) or 8
    return max(unroll, math.ceil(8 / bits))


def physical_dims(shape: Shape) -> list[tuple[int, int]]:
    """(logical dim, size) from major to minor."""
    m2m = shape.layout.minor_to_major if shape.layout and shape.layout.minor_to_major else tuple(range(shape.rank - 1, -1, -1))
    return [(d, shape.dims[d]) for d in reversed(m2m)]


def _reduction_launch(reduce: Instruction, device: Device) -> Launch:
    """The reduction emitters' launch, approximately: a row reduction (minor dim
    reduced) gives each row up to 512 threads, 16 elements each (rows share a block
    up to 256 threads); a column reduction tiles 32 x 32."""
    src = reduce.operands[0].shape
    reduced = set(reduce.dimensions or ())
    phys = physical_dims(src)
    minor_reduced = 1
    i = len(phys) - 1
    while i >= 0 and phys[i][0] in reduced:
        minor_reduced *= phys[i][1]
        i -= 1
    kept = math.prod(s for d, s in phys if d not in reduced)
    if minor_reduced > 1 or not phys:
        threads_reduced = min(512, _round_up(math.ceil(minor_reduced / 16), 32))
        if minor_reduced <= 16 and kept > 1:  # several rows per warp
            rows_per_warp = max(1, 32 // max(minor_reduced, 1))
            threads = 256 if kept * 32 // rows_per_warp >= 256 else max(32, _round_up(kept * 32 // rows_per_warp, 32))
            rows_per_block = threads // 32 * rows_per_warp
            return Launch(max(1, math.ceil(kept / rows_per_block)), threads)
        threads_kept = 1
        if threads_reduced * 2 <= 256:
            threads_kept = kept if kept * threads_reduced <= 256 else 256 // threads_reduced
        return Launch(max(1, math.ceil(kept / threads_kept)), threads_kept * threads_reduced)
    # column reduction: the kept minor dimension in tiles of 32, 32 x 32 threads
    minor_kept = 1
    while i >= 0 and phys[i][0] not in reduced:
        minor_kept *= phys[i][1]
        i -= 1
    major_kept = max(1, kept // max(minor_kept, 1))
    # each thread reads a vector of 2 (32-bit) or 4 (narrower) kept elements: a
    # block covers 64 or 128 kept columns (fitted to XLA's estimates: an f32
    # [2048,2304] column sum is priced on 36 blocks, a pred [2048,2048] on 16)
    bits = src.element_type.bit_width or 32
    vector = 1 if bits > 32 else (2 if bits == 32 else 4)
    return Launch(major_kept * max(1, math.ceil(minor_kept / (32 * vector))), 32 * 32)


def _round_up(x: int, m: int) -> int:
    return max(m, math.ceil(x / m) * m)


def launch_dimensions(kernel: Instruction, device: Device, fig: GpuFigures | None = None) -> Launch:
    """The launch XLA's emitter would choose for ``kernel`` (see the module docstring)."""
    fig = fig or GpuFigures.of(device)
    config = kernel.backend_config if "backend_config" in kernel.attributes else None
    if isinstance(config, dict):
        tl = _triton_launch(config)
        if tl is not None:
            blc = config["fusion_backend_config"]["block_level_fusion_config"]
            tiles = blc.get("output_tiles") or []
            shape = kernel.shape if kernel.shape.is_array else kernel.shape.tuple_shapes[0]
            blocks = 1
            if tiles:
                sizes = [int(s) for s in tiles[0].get("sizes", [])]
                root = _first_root(kernel)
                dims = root.shape.dims if root is not None and root.shape.is_array else shape.dims
                if len(sizes) == len(dims):
                    blocks = math.prod(math.ceil(d / t) for d, t in zip(dims, sizes) if t > 0)
                else:
                    blocks = math.ceil(_elements(shape) / max(1, math.prod(sizes)))
            return Launch(max(1, blocks), tl.threads_per_block)
    body = kernel.fused_computation if kernel.opcode is _H.FUSION else None
    if body is None:
        shape = kernel.shape if kernel.shape.is_array else (kernel.shape.tuple_shapes[0] if kernel.shape.tuple_shapes else kernel.shape)
        if kernel.opcode is _H.REDUCE:
            return _reduction_launch(kernel, device)
        return _loop_launch(_elements(shape), _loop_unroll(kernel, shape, device, fig), device)
    roots = output_roots(body)
    reduces = [h for h in map(_hero, roots) if h.opcode is _H.REDUCE]
    if reduces:
        return _reduction_launch(reduces[0], device)
    root = roots[0]
    if root.opcode is _H.DYNAMIC_UPDATE_SLICE:
        return _loop_launch(_elements(root.operands[1].shape), 1, device)
    if root.opcode is _H.SCATTER:
        n = (len(root.operands) - 1) // 2
        return _loop_launch(_elements(root.operands[n + 1].shape), 1, device)
    hero = transpose_hero(kernel)
    if hero is not None:
        shape = hero.shape
        phys = physical_dims(shape)
        minor = phys[-1][1] if phys else 1
        rest = math.prod(s for _, s in phys[:-1]) if len(phys) > 1 else 1
        return Launch(max(1, math.ceil(minor / 32) * math.ceil(rest / 32)), 128)
    shape = root.shape
    hero = _hero(root)
    if hero.opcode is _H.CONCATENATE:  # the concatenate emitter: one thread per element of the largest operand
        shape = max((o.shape for o in hero.operands), key=_elements)
    return _loop_launch(_elements(shape), _loop_unroll(kernel, shape, device, fig), device)


def _hero(root: Instruction) -> Instruction:
    """The op that decides the emitter: the root, under unary elementwise ops."""
    while root.opcode in _ELEMENTWISE and len(root.operands) == 1:
        root = root.operands[0]
    return root


def _row_major(shape: Shape) -> bool:
    """Are the non-unit dimensions of ``shape`` laid out in logical order?"""
    order = [d for d, s in physical_dims(shape) if s > 1]
    return order == sorted(order)


def _intermediate(instr: Instruction, operands: int) -> bool:
    """IsIntermediate: an op the hero walk passes through, with 1 to ``operands``
    operands: elementwise (a copy only when it keeps the layout), a bitcast, or a
    reshape or transpose that only relabels memory."""
    if not 1 <= len(instr.operands) <= operands:
        return False
    op = instr.opcode
    if op is _H.COPY:
        return instr.shape == instr.operand(0).shape
    if op in _ELEMENTWISE or op is _H.BITCAST:
        return True
    if op is _H.RESHAPE:
        src, dst = instr.operand(0).shape, instr.shape
        return src.is_array and dst.is_array and _row_major(src) and _row_major(dst)
    return op is _H.TRANSPOSE and transpose_is_bitcast(instr)


def _unique_hero(start: Instruction, wanted: Callable[[Instruction], bool]) -> Instruction | None:
    """The one instruction ``wanted`` accepts among those reached from ``start``
    through intermediate ops, if no op but intermediate ones (and the tuple) reads
    it; None when there are none or several (FindNonTrivialHero's search)."""
    found: Instruction | None = None
    queue, seen = [start], {id(start)}
    while queue:
        node = queue.pop(0)
        if wanted(node):
            if found is not None:
                return None
            found = node
            continue
        if not _intermediate(node, 3):
            continue
        for o in node.operands:
            if id(o) not in seen and o.opcode is not _H.PARAMETER:
                seen.add(id(o))
                queue.append(o)
    if found is None:
        return None
    users, seen = list(found.users), set()
    while users:
        u = users.pop()
        if id(u) in seen:
            continue
        seen.add(id(u))
        if u.opcode is not _H.TUPLE and not _intermediate(u, 3):
            return None
        users.extend(u.users)
    return found


def non_trivial_hero(root: Instruction, tiled: Callable[[Instruction], bool] | None = None) -> Instruction:
    """FindNonTrivialHero for one output of a fused computation: the op whose
    emitter XLA:GPU uses for it. Up the unary intermediate ops from ``root``; then
    the one tiled transpose (``tiled``, default ``tiled_transpose``) or concatenate
    reached through elementwise ops that only elementwise ops read; else a reduce;
    else ``root`` (the loop emitter). A transpose under a slice is no hero: that
    fusion is a loop reading it uncoalesced."""
    hero = root
    while _intermediate(hero, 1) and hero.operand(0).opcode is not _H.PARAMETER:
        hero = hero.operand(0)
    for wanted in (tiled or tiled_transpose, lambda i: i.opcode is _H.CONCATENATE):
        found = _unique_hero(hero, wanted)
        if found is not None:
            return found
    return hero if hero.opcode is _H.REDUCE else root


def output_roots(body: Computation) -> list[Instruction]:
    """The values a fused computation writes: its root, or each element of a tuple root."""
    root = body.root
    return list(root.operands) if root.opcode is _H.TUPLE else [root]


def _first_root(kernel: Instruction) -> Instruction | None:
    body = kernel.fused_computation
    return output_roots(body)[0] if body is not None else None


# -- coalescing --------------------------------------------------------------------------


def transposes_minor(instr: Instruction) -> bool:
    """TransposesMinorDimension: a transpose or a layout-changing copy that moves the
    physically minor dimension."""
    if instr.opcode not in (_H.TRANSPOSE, _H.COPY) or not instr.shape.is_array or not instr.operands:
        return False
    src, dst = instr.operands[0].shape, instr.shape
    if not src.is_array or src.rank < 2:
        return False
    src_phys = [d for d, s in physical_dims(src) if s > 1]
    dst_phys = [d for d, s in physical_dims(dst) if s > 1]
    if instr.opcode is _H.TRANSPOSE:
        perm = instr.dimensions or ()
        dst_phys = [perm[d] for d in dst_phys] if perm else dst_phys
    return bool(src_phys) and bool(dst_phys) and src_phys[-1] != dst_phys[-1]


#: When XLA:GPU's transpose emitter takes a transpose, by the two physically
#: minor dimensions it swaps (unit dimensions dropped): both at least
#: ``MIN_TILED_DIM`` with ``MIN_TILED_TOTAL`` elements between them; or, for an
#: element type narrower than 32 bits, a narrow side of 8 elements, or of one
#: 32-bit word (the packed transpose of recent XLA), against a wide side of at
#: least ``MIN_PACKED_WIDE``.  Calibrated on XLA:GPU's own labels (jaxlib 0.12,
#: H100) of the corpus's fusions whose hero is a transpose: 97% agree
#: (tests/test_fusion_kind.py); XLA's rule changes between versions
#: (ir_emission_utils.cc, GetDescriptionForTiledTransposeEmitter).
MIN_TILED_DIM, MIN_TILED_TOTAL, MIN_PACKED_WIDE = 16, 16 * 16, 1024


def _minor_size(shape) -> int:
    """The size of the physically minor dimension, unit dimensions dropped."""
    sizes = [s for _, s in physical_dims(shape) if s > 1]
    return sizes[-1] if sizes else 1


def tiled_transpose(instr: Instruction) -> bool:
    """A transpose of the physically minor dimension that XLA:GPU's transpose
    emitter takes (``MIN_TILED_DIM``)."""
    if not transposes_minor(instr):
        return False
    a, b = _minor_size(instr.operand(0).shape), _minor_size(instr.shape)
    narrow, wide = min(a, b), max(a, b)
    if narrow >= MIN_TILED_DIM and narrow * wide >= MIN_TILED_TOTAL:
        return True
    bits = instr.shape.element_type.bit_width
    return bits < 32 and wide >= MIN_PACKED_WIDE and (narrow >= 8 or narrow * bits == 32)


def transpose_emitter(kernel: Instruction) -> bool:
    """Does XLA:GPU emit fusion ``kernel`` with its transpose emitter (tiles through
    shared memory: reads and writes coalesced)?  When a root's hero
    (``non_trivial_hero``) is a tiled transpose and none is a reduce: XLA picks the
    emitter from the roots' heroes (HloFusionAnalysis), not the label. A
    multi-output fusion of a loop output and a transpose keeps its kLoop label
    (Qwen3-MoE's Adam update, writing the parameter and its transpose: 31.3 ms
    priced as uncoalesced loop reads, 1.5 ms by XLA's own estimate); a kInput one
    whose transpose feeds a slice is a loop (Qwen3-MoE's expert GEMM transposed
    into its SiLU consumers). A kInput label vouches for the tiling (XLA's own
    threshold, which ``tiled_transpose`` only approximates), not for the hero."""
    return transpose_hero(kernel) is not None


def transpose_hero(kernel: Instruction) -> Instruction | None:
    """The transpose a transpose-emitter kernel tiles (``transpose_emitter``), else
    None. As XLA's FindConsistentTransposeHero, a root without a transpose hero must
    be as large as the transpose's input (the emitter writes it at the input's
    index): a multi-output fusion of a transpose and a loop over its slices is a loop."""
    body = kernel.fused_computation if kernel.opcode is _H.FUSION else None
    if body is None:
        return None
    tiled = transposes_minor if kernel.fusion_kind == "kInput" else tiled_transpose
    if not any(tiled(i) for i in body):
        return None  # no transpose to head it: the hero walks (every kernel priced, twice) are skipped
    heroes = [(r, non_trivial_hero(r, tiled)) for r in output_roots(body)]
    if any(h.opcode is _H.REDUCE for _, h in heroes):
        return None
    hero = next((h for _, h in heroes if tiled(h)), None)
    if hero is None:
        return None
    size = _elements(hero.operand(0).shape)
    if any(not tiled(h) and r.shape.is_array and _elements(r.shape) != size for r, h in heroes):
        return None
    return hero


def coalesced(kernel: Instruction) -> bool:
    """IsReadCoalescedHeuristic: a fusion that is not a transpose emitter and holds a
    transpose of the minor dimension (not of a broadcast) reads uncoalesced."""
    body = kernel.fused_computation if kernel.opcode is _H.FUSION else None
    if body is None:
        return not transposes_minor(kernel)
    if transpose_emitter(kernel):
        return True  # the transpose emitter tiles through shared memory
    for i in body:
        if transposes_minor(i) and i.operands[0].opcode is not _H.BROADCAST:
            return False
    return True


# -- operands ----------------------------------------------------------------------------


def operand_reads(kernel: Instruction) -> list[OperandRead]:
    """Each operand's bytes: for a fusion, its parameter's utilization times its size
    (a parameter read by two broadcasts is read twice; a slice reads what it keeps)."""
    co = coalesced(kernel)
    out = []
    body = kernel.fused_computation if kernel.opcode is _H.FUSION else None
    util = fusion_utilization(kernel).parameter if body is not None else {}
    for idx, operand in enumerate(kernel.operands):
        size = _bytes(operand.shape)
        if body is not None:
            total = round(size * util.get(idx, 0.0))
        else:
            total = size * _operand_utilization(kernel, idx)
        et = operand.shape.element_type if operand.shape.is_array else None
        eb = et.byte_width if et is not None and et.bit_width else 4
        out.append(OperandRead(float(total), float(min(size, total)), max(eb, 1), co))
    return out


def output_bytes(kernel: Instruction) -> float:
    """Bytes written: the outputs, a dynamic-update-slice root only its update."""
    body = kernel.fused_computation if kernel.opcode is _H.FUSION else None
    if body is None:
        if kernel.opcode is _H.DYNAMIC_UPDATE_SLICE:
            return float(_bytes(kernel.operands[1].shape))
        return float(_bytes(kernel.shape))
    total = 0.0
    for r, leaf in zip(output_roots(body), kernel.shape.tuple_shapes if kernel.shape.is_tuple else [kernel.shape]):
        total += _bytes(r.operands[1].shape) if r.opcode is _H.DYNAMIC_UPDATE_SLICE else _bytes(leaf)
    return total


def triton_kind(kernel: Instruction) -> str | None:
    """The backend kind of a Triton fusion (``__triton``, ``__triton_gemm``,
    ``__triton_nested_gemm_fusion``...), None for any other kernel."""
    if kernel.opcode is not _H.FUSION or "backend_config" not in kernel.attributes:
        return None
    config = kernel.backend_config
    kind = ((config.get("fusion_backend_config") or {}).get("kind") if isinstance(config, dict) else None) or ""
    return kind if kind.startswith("__triton") else None


def tiled_cost(kernel: Instruction, device: Device, launch: Launch, fig: GpuFigures) -> GpuKernelCost:
    """A Triton fusion (not a GEMM) as XLA's tiled model prices it
    (``GpuPerformanceModelWithIndexingAnalysis::EstimateRunTimeForTiledFusion``,
    the ``indexing-cost-model`` estimate): every instruction computed once per
    element of its tile, tiles padded to their power-of-two sizes; each parameter
    read once per tile that needs it (a parameter smaller than the output, such as
    a broadcast weight, by every tile); the output written tile by tile.  Tile
    shapes per parameter come from indexing maps in XLA; here, from the output
    tile's padding, a documented approximation."""
    body = kernel.fused_computation
    out_elements = max(1, _elements(kernel.shape))
    sizes = output_tile_sizes(kernel)
    pad = max(1.0, launch.blocks * math.prod(sizes) / out_elements) if sizes else 1.0
    tiles = instruction_tiles(body, sizes) if sizes and len(sizes) == len(kernel.shape.dims) else {}
    flops = 0.0
    for i in body:
        if i.opcode is _H.PARAMETER:
            continue
        tile = tiles.get(id(i))
        elements = _elements(i.shape)
        if tile is None or not elements:
            flops += pad * instruction_flops(i)
        else:  # XLA: FlopsPerElement times the padded tile, in every block
            flops += instruction_flops(i) / elements * launch.blocks * padded_tile_size(tile)
    reads = []
    params = {p.parameter_number: p for p in body.parameters}
    for index, operand in enumerate(kernel.operands):
        size = _bytes(operand.shape)
        eb = _element_bytes(operand.shape)
        tile = _broadcast_tile(params.get(index), kernel.shape, sizes)
        if tile is not None:  # XLA's indexing map: the output tile's broadcast dimensions, once per tile
            total = float(launch.blocks * tile * eb)
        else:
            n = max(1, _elements(operand.shape))
            copies = min(launch.blocks, max(1.0, out_elements / n)) if n < out_elements else 1.0
            total = float(size * pad * copies)
        reads.append(OperandRead(total, float(size), eb, True))
    c = compute_seconds(flops, launch, device, fig)
    read = sum(read_seconds(r, launch.blocks, device, fig) for r in reads)
    write = write_seconds(output_bytes(kernel) * pad, device)
    return GpuKernelCost(c, read + write, combine(c, read + write), flops, launch, read, write)


def output_tile_sizes(kernel: Instruction) -> list[int]:
    """A Triton fusion's output tile (its first root's), from its block-level config."""
    blc = ((kernel.backend_config.get("fusion_backend_config") or {}).get("block_level_fusion_config") or {})
    return [int(t) for t in (blc.get("output_tiles") or [{}])[0].get("sizes", [])]


def padded_tile_size(sizes: Iterable[int]) -> int:
    """XLA's GetPaddedTileSize: Triton pads every tile dimension to a power of two."""
    return math.prod(1 << max(0, int(n) - 1).bit_length() for n in sizes)


def instruction_tiles(body: Computation, out_tile: list[int]) -> dict[int, list[int]]:
    """Each instruction's tile when the root's is ``out_tile``, propagated from users
    to operands as XLA's symbolic tile analysis does for the shapes Triton fuses: a
    broadcast's operand takes the tile's sizes in the broadcast's dimensions, a reduce's
    operand the whole reduced dimensions, a transpose's its permutation, a bitcast or reshape
    the tile that reads the same elements (``reshaped_tile``); anything else keeps the
    tile's size.  An instruction several users read takes the largest tile.  Why it matters:
    XLA's tiled model computes every instruction once per block, so a value a kernel
    broadcasts (a mask over heads) is recomputed in each block that reads it."""
    return _propagated_tiles(body, out_tile)[0]


def tiles_every_instruction(body: Computation, out_tile: list[int]) -> bool:
    """Does ``instruction_tiles`` keep track of every instruction's tile, dimension by
    dimension (no approximation by size)?  What a fusion needs before it is made a
    Triton fusion of its own: XLA's emitter tiles every instruction so."""
    tiles, lost = _propagated_tiles(body, out_tile)
    return not any(id(i) in lost or id(i) not in tiles
                   for i in body if (i.shape.is_array and i.users) or i is body.root)


def _propagated_tiles(body: Computation, out_tile: list[int]) -> tuple[dict[int, list[int]], set[int]]:
    """``instruction_tiles``, and the instructions whose tile is only approximated by
    its size (or read by one that is)."""
    tiles: dict[int, list[int]] = {id(body.root): list(out_tile)}
    lost: set[int] = set()
    for instr in reversed(list(body)):
        tile = tiles.get(id(instr))
        if tile is None:
            continue
        for index, o in enumerate(instr.operands):
            if not o.shape.is_array:
                continue
            t = _operand_tile(instr, index, tile if id(instr) not in lost else None)
            if t is None:
                t = [min(math.prod(tile), _elements(o.shape))]  # a tile this approximation lost track of: its size only
                lost.add(id(o))
            old = tiles.get(id(o))
            if old is None or math.prod(t) > math.prod(old):
                tiles[id(o)] = t
    return tiles, lost


def _operand_tile(instr: Instruction, index: int, tile: list[int] | None) -> list[int] | None:
    """The tile of ``instr``'s operand ``index`` when ``instr``'s is ``tile``; None where
    it is not one tile of the operand's dimensions (or ``tile`` is not known)."""
    o = instr.operands[index].shape
    op = instr.opcode
    if tile is None or not instr.shape.is_array or len(tile) != len(instr.shape.dims):
        return None
    if op is _H.BROADCAST:
        return [tile[d] for d in instr.dimensions or ()]
    if op is _H.REDUCE:
        if index >= len(instr.operands) // 2:
            return [1] * len(o.dims)  # the init value
        reduced = set(instr.dimensions or ())
        kept = iter(tile)
        return [o.dims[d] if d in reduced else next(kept, 1) for d in range(len(o.dims))]
    if op is _H.TRANSPOSE:
        out = [1] * len(o.dims)
        for i, d in enumerate(instr.dimensions or ()):
            out[d] = tile[i]
        return out
    if op is _H.BITCAST or op is _H.RESHAPE:
        return reshaped_tile(list(instr.shape.dims), tile, list(o.dims))
    if len(o.dims) == len(tile):
        return [min(t, d) for t, d in zip(tile, o.dims)]
    return None


def reshaped_tile(out: list[int], tile: list[int], operand: list[int]) -> list[int] | None:
    """The operand's tile of a bitcast or reshape from ``operand`` to ``out`` whose
    output tile is ``tile``, or None where no one tile of the operand reads exactly
    it.  The dimensions are taken in groups of equal products, unit dimensions
    aside (tile 1).  A group of one dimension on each side keeps its size; output
    dimensions that split one operand dimension make one tile of it when the tile is
    contiguous (whole dimensions minor of one, ones major of it: [1, 16, 128] of
    [1024, 32, 128] reads [1, 2048] of [1024, 4096], the Q/K norm's prologue); an
    output dimension that merges operand dimensions is split over them, minor first,
    the same way.  Groups of several dimensions on both sides are not followed, as
    XLA's symbolic tile analysis does not tile them."""
    big_out = [(d, min(t, d)) for d, t in zip(out, tile) if d != 1]
    big_in = [i for i, d in enumerate(operand) if d != 1]
    result = [1] * len(operand)
    a = b = 0
    while a < len(big_out) and b < len(big_in):
        dims_out, dims_in = [big_out[a]], [big_in[b]]
        size_out, size_in = big_out[a][0], operand[big_in[b]]  # the group's products, kept as it grows
        a, b = a + 1, b + 1
        while size_out != size_in:
            if size_out < size_in:
                if a == len(big_out):
                    return None
                dims_out.append(big_out[a])
                size_out *= big_out[a][0]
                a += 1
            else:
                if b == len(big_in):
                    return None
                dims_in.append(big_in[b])
                size_in *= operand[big_in[b]]
                b += 1
        if len(dims_in) == 1:  # output dimensions splitting one operand dimension
            sizes = [t for _, t in dims_out]
            first = next((k for k, t in enumerate(sizes) if t != 1), len(sizes))
            if any(t != d for d, t in dims_out[first + 1:]):
                return None  # not contiguous
            result[dims_in[0]] = math.prod(sizes)
        elif len(dims_out) == 1:  # one output dimension merging operand dimensions
            left = dims_out[0][1]
            for i in reversed(dims_in):
                d = operand[i]
                if left % d == 0:
                    result[i], left = d, left // d
                elif left < d:
                    result[i], left = left, 1
                else:
                    return None
        else:
            return None
    if a != len(big_out) or b != len(big_in):
        return None
    return result


def recompute_in_tiles_pays(kernel: Instruction, value: Instruction, flops: float, dims: Iterable[int],
                            device: Device, joined_flops: float = 0.0) -> bool:
    """Would Triton fusion ``kernel``, which broadcasts ``value`` along its output
    dimensions ``dims``, be no slower by XLA's tiled model recomputing ``value``
    (``flops`` for all of it) in every block than reading it once per block?
    Recomputed, each block computes its tile of the value (``instruction_tiles``);
    read, each block loads that tile and the value's own kernel writes it once.
    ``joined_flops``: the work of the kernels that will join this one (a softmax's
    exp and its sum-divide half), whose compute the recomputation then adds to."""
    config = kernel.backend_config if "backend_config" in kernel.attributes else None
    if not isinstance(config, dict) or _triton_launch(config) is None or not value.shape.is_array:
        return True
    fig = GpuFigures.of(device)
    launch = launch_dimensions(kernel, device, fig)
    sizes = output_tile_sizes(kernel)
    tile = [sizes[d] for d in dims if d < len(sizes)]
    if launch.blocks * math.prod(tile) <= _elements(value.shape):
        return True  # each element in one block: computed once either way
    base = tiled_cost(kernel, device, launch, fig)
    compute = base.compute_s + compute_seconds(joined_flops, launch, device, fig)
    eb = _element_bytes(value.shape)
    per_element = flops / max(1, _elements(value.shape))
    extra = compute_seconds(per_element * launch.blocks * padded_tile_size(tile), launch, device, fig)
    read = read_seconds(OperandRead(float(launch.blocks * math.prod(tile) * eb), float(_bytes(value.shape)), eb, True),
                        launch.blocks, device, fig)
    apart = combine(compute, base.memory_s + read) + write_seconds(_bytes(value.shape), device)
    return combine(compute + extra, base.memory_s) <= apart


def _broadcast_tile(param: Instruction | None, out: Shape, sizes: list[int]) -> int | None:
    """Elements of ``param``'s tile when its every user broadcasts it to the output's
    shape (a mask, a norm's weight): the output tile's sizes in the broadcast's
    dimensions.  None otherwise (the caller's approximation applies)."""
    if param is None or not param.users or not sizes or not out.is_array or len(sizes) != len(out.dims):
        return None
    if any(u.opcode is not _H.BROADCAST or not u.shape.is_array or list(u.shape.dims) != list(out.dims) for u in param.users):
        return None
    dims = {tuple(u.dimensions or ()) for u in param.users}
    if len(dims) != 1:
        return None
    return math.prod(sizes[d] for d in dims.pop())


def kernel_cost(kernel: Instruction, device: Device, *, flops: float | None = None,
                reads: Iterable[OperandRead] | None = None, written: float | None = None,
                compute_s: float | None = None) -> GpuKernelCost:
    """XLA:GPU's model of one kernel on ``device``. ``compute_s`` replaces the
    CUDA-core compute time (the roofline passes a dot's tensor-core time).  A
    Triton fusion that is not a GEMM is priced by the tiled model (``tiled_cost``)."""
    fig = GpuFigures.of(device)
    launch = launch_dimensions(kernel, device, fig)
    if (compute_s is None and flops is None and reads is None and triton_kind(kernel) == "__triton"
            and _triton_launch(kernel.backend_config) is not None):  # tiled: a pass dump before the autotuner has no tiles
        return tiled_cost(kernel, device, launch, fig)
    f = instruction_flops(kernel) if flops is None else flops
    c = compute_seconds(f, launch, device, fig) if compute_s is None else compute_s
    rs = list(operand_reads(kernel) if reads is None else reads)
    read = sum(read_seconds(r, launch.blocks, device, fig) for r in rs)
    write = write_seconds(output_bytes(kernel) if written is None else written, device)
    m = read + write
    return GpuKernelCost(c, m, combine(c, m), f, launch, read, write)
