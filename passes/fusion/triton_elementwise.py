"""Elementwise kernels joined to XLA:GPU's Triton fusions, as XLA:GPU's priority
fusion joins them on stock XLA.

XLA:GPU rewrites a normalization (RMSNorm, softmax) into a Triton fusion
(``kCustom``, backend kind ``__triton``: one block computes a tile of rows) before
its priority fusion runs; on stock XLA the priority fusion then fuses the
elementwise work around it into it: the convert of a GEMM's bf16 output feeding
the norm, the weight multiply and the convert back after it.  With XLA's fusion
off (the ``replace`` mode) that work stays as kernels of their own: on Gemma-2 2B
prefill 77 converts and about 100 weight multiplies, each writing and reading
back a full activation.

This pass does what priority fusion does there: a producer that only the Triton
fusion reads, made of elementwise ops, broadcasts, iotas and converts (a causal
mask), becomes its prologue; a consumer that is the Triton fusion's only user
and has its output's dimensions, likewise, its epilogue, and so does a second
Triton fusion with the same output tiles (a softmax XLA split into its max-exp
and its sum-divide halves: one kernel again, as on stock).  A Triton fusion that
others read too is duplicated into the next when that moves fewer bytes: Gemma-2's
sandwich norms (post-attention norm and residual add, then the next norm) become
stock's two kernels of two reductions each.  All keep the fusion's tiling valid (the
output tile covers the same dimensions; a broadcast operand is tiled as XLA
tiles it), so the fusion keeps its backend config (tile sizes, warps) and XLA's
Triton emitter compiles it as it is.  Each merge removes a kernel launch and an
activation's write and read back, so it is done when legal; the GPU roofline
prices the merged fusion with XLA's tiled model (``gpu_kernel_model.tiled_cost``).
Once every join is made, a joined fusion's output tile is picked again as XLA picks
a new fusion's, by the tiled model over the tilings that fit in registers
(``_retile``): the halves' one-row tiles are not the whole softmax's best.

XLA's priority fusion also fuses a Triton fusion into its only user when that is a
loop or reduction fusion of other dimensions, which makes a generic Triton fusion
(``_consumer``), and any such fusion Triton emits into the Triton fusion that alone
reads it (a split-K GEMM's partial sums into the softmax after it; Qwen3's q/k heads
sliced and bitcast from the QKV GEMM's output into their norm, ``_prologue``): it does so
when its symbolic tile analysis tiles every instruction of the result and the
tiled model prices the one kernel faster than the two (``_one_kernel_pays``).  Mixtral's router (top-2
weights' normalization, their one-hot and transpose, the experts' weighted sum and
the residual add) is so one kernel per layer on stock, and here, tiled afresh over
every dimension (``_best_tiling(free=True)``); so is Qwen3-MoE's (top 8 of 128 experts).

Our priority fusion runs before these joins, so it leaves out of other kernels what
they would take (``keeps_triton_joins``): what Triton cannot emit stays out of a
prologue, and the end of a Triton fusion's epilogue stays out of its consumers when the
Triton fusion writes more bytes than that end (Qwen3's q/k norm writes f32, its weight
multiply bf16): the order XLA's priority fusion, largest saving first, fuses them in.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

from hlo_tools import Computation, HloOpcode, Instruction, Module
from hlo_tools.attributes import format_backend_config
from hlo_tools.opcode import ELEMENTWISE
from hlo_tools.outline import inline_fusion, outline_fusion, remove_uncalled, restore_topological_order
from hlo_tools.rewriter import Rewriter

from hlo_analysis.cost import operand_bytes
from hlo_analysis.legality import ALLOW, Decision
from hlo_analysis import devices
from hlo_analysis.devices import Device
from hlo_analysis.gpu_kernel_model import (instruction_flops, kernel_cost, output_tile_sizes, padded_tile_size,
                                          recompute_in_tiles_pays, tiles_every_instruction, triton_kind)
from hlo_analysis.kernels import fused_region
from passes.base import FusionPass
from passes.fuel import consume_fuel

from .clusters import fusible_computations

_H = HloOpcode

#: What a prologue or epilogue may hold besides elementwise ops: ops the Triton emitter
#: tiles like the output (not a copy: at the post-scheduler hook a copy is a buffer
#: copy insertion made, ``gpu_legality.holds_a_buffer_copy``).
_TILED_AS_OUTPUT = {_H.BROADCAST, _H.CONSTANT, _H.PARAMETER, _H.IOTA}

#: The elementwise ops XLA's Triton emitter supports (xla/backends/gpu/codegen/triton/
#: support.cc): on any type but pred, on pred, on integers and on f32/bf16/f64 only.  Not
#: shifts, whatever the type: Mixtral's router shifts s32 (XLA: "Unsupported elementwise
#: operation"), then masks the result with ``and``, which stock puts in a Triton fusion.
_TRITON_ANY = {_H.CONVERT, _H.ABS, _H.NEGATE, _H.ADD, _H.COMPARE, _H.MAXIMUM, _H.MINIMUM, _H.MULTIPLY, _H.SUBTRACT,
               _H.SELECT, _H.CLAMP}
_TRITON_PRED = {_H.CONVERT, _H.NOT, _H.AND, _H.OR, _H.XOR, _H.COMPARE, _H.SELECT}
_TRITON_INT = _TRITON_ANY | {_H.NOT, _H.AND, _H.OR, _H.XOR}
_TRITON_FLOAT = _TRITON_ANY | {_H.COSINE, _H.EXPONENTIAL, _H.EXPONENTIAL_MINUS_ONE, _H.FLOOR, _H.CEIL, _H.LOG,
                               _H.LOG_PLUS_ONE, _H.RSQRT, _H.SINE, _H.SQRT, _H.CBRT, _H.TAN, _H.TANH, _H.ERF,
                               _H.ATAN2, _H.DIVIDE, _H.POWER}
_FLOAT_TYPES = {"f32", "bf16", "f64"}
_INT_TYPES = {"s8", "s16", "s32", "s64"}

#: The parts of a Triton fusion's backend config that describe how it is emitted
#: (XLA's own cost estimates of the old fusion are dropped).
_KEPT_CONFIG = ("operation_queue_id", "fusion_backend_config")


def _elementwise_kernel(instr: Instruction) -> bool:
    """A loop fusion (or a lone op XLA's fusion wrapper did not wrap) of tileable
    ops only, with one array result."""
    if not instr.shape.is_array:
        return False
    if instr.opcode is HloOpcode.FUSION:
        body = instr.fused_computation
        return instr.fusion_kind == "kLoop" and body is not None and all(_tileable(i) for i in body)
    return _triton_elementwise(instr)


def _tileable(instr: Instruction) -> bool:
    """Tiled like the output: an elementwise op Triton emits, a broadcast, constant,
    parameter or iota, or a bitcast that only drops or adds dimensions of size 1
    (Llama's embedding, bf16[1024,1,4096], read by the first norm)."""
    if instr.opcode is HloOpcode.BITCAST:
        return [d for d in instr.shape.dims if d != 1] == [d for d in instr.operands[0].shape.dims if d != 1]
    return instr.opcode in _TILED_AS_OUTPUT or _triton_elementwise(instr)


def _triton_elementwise(instr: Instruction) -> bool:
    """An elementwise op XLA's Triton emitter supports on its operands' type."""
    if instr.opcode not in ELEMENTWISE:
        return False
    kind = (instr.operands[-1] if instr.operands else instr).shape.element_type.value  # select: its values' type
    allowed = (_TRITON_PRED if kind == "pred" else _TRITON_FLOAT if kind in _FLOAT_TYPES
               else _TRITON_INT if kind in _INT_TYPES else _TRITON_ANY)
    return instr.opcode in allowed


def keeps_triton_joins(producer: list[Instruction], consumer: list[Instruction],
                       outputs: list[Instruction], *, device: Device) -> Decision:
    """May a producer cluster join ``consumer``, a cluster this pass would join to a
    Triton fusion as its prologue or its epilogue (``_triton_to_join``)?  Not when
    Triton cannot emit the producer.  XLA:GPU builds its Triton fusions before its
    priority fusion, which then fuses into one only what Triton emits: Llama's
    embedding gather stays a kernel of its own and the first norm takes the convert
    of it.  Our priority fusion runs first; a gather fused into that convert would
    keep the convert out of the norm, and the kernel would write f32 for the norm to
    read back.  (Into an epilogue it may go: one round trip is saved either way, the
    Triton fusion's output or the producer's.)  Nor, when the Triton fusion would
    broadcast a value the producer computes and others read, if XLA's tiled model
    prices recomputing it in every block slower than reading it
    (``recompute_in_tiles_pays``): Mistral's sliding-window mask and Llama's causal
    mask, each broadcast over 32 heads in every layer's softmax, stay one kernel, as
    on stock; so does Mixtral's, which its softmaxes apply before and after
    (``where(mask, probs, 0)``).  Nor may the tail of a Triton fusion's would-be
    epilogue (``_joined_chain``) join a consumer when the Triton fusion's output is
    the larger to write and read back (``_epilogue_tail``)."""
    if (tail := _epilogue_tail(producer)) is not None:
        t, last = tail
        return Decision.forbid(f"would keep %{last.name} out of Triton fusion %{t.name}'s epilogue, which saves "
                               f"a round trip of {t.shape.byte_size} bytes, not {last.shape.byte_size}")
    if not all(_emitted_by_triton(m) for m in consumer) or (t := _triton_to_join(consumer, outputs)) is None:
        return ALLOW
    kept = next((m for m in producer if not triton_emits(m)), None)
    if kept is not None and t in outputs[0].users:  # an epilogue saves a round trip either way
        return Decision.forbid(f"would keep %{outputs[0].name} out of Triton fusion %{t.name}: "
                               f"Triton does not emit {kept.opcode.value} %{kept.name}")
    members = (*producer, *consumer)
    inside = {id(m) for m in members}
    if not any(id(u) not in inside for m in producer for u in m.users):
        return ALLOW  # nothing computed twice
    spread = _broadcast_value(members, t)
    if spread is None:
        return ALLOW
    value, dims = spread
    ancestors, stack = set(), [value]
    while stack:  # the value's computation inside the would-be kernel, transitively
        v = stack.pop()
        if id(v) in inside and id(v) not in ancestors:
            ancestors.add(id(v))
            stack.extend(v.operands)
    flops = sum(instruction_flops(m) for m in members if id(m) in ancestors)
    joined = sum(instruction_flops(k) for k in (*_joined_before(t), *_joined_chain(t)))
    if recompute_in_tiles_pays(t, value, flops, dims, device, joined):
        return ALLOW
    return Decision.forbid(f"would recompute %{value.name} in every block of Triton fusion %{t.name}: "
                           f"slower than reading it, by XLA's tiled model")


def _epilogue_tail(producer: list[Instruction]) -> tuple[Instruction, Instruction] | None:
    """The Triton fusion whose epilogue chain (``_joined_chain``) ends in ``producer``,
    and that end, when the Triton fusion writes more bytes than the end.  Then joining
    the chain to it (one kernel writing the end) saves more than fusing the end into
    its consumers (the Triton fusion writing its own output): Qwen3's q/k norm writes
    f32 and its weight multiply converts to bf16 before RoPE reads it.  XLA's priority
    fusion, which makes the larger saving first, makes the epilogue; so does stock.
    Not when the end feeds another Triton fusion (``_feeds_triton``): Gemma-2's
    post-attention norm and residual add are then duplicated into the next norm
    (``_duplication_pays``), stock's one kernel of two reductions, which the end fused
    into its consumers leaves possible."""
    inside = {id(m) for m in producer}
    for t in dict.fromkeys(o for m in producer for o in m.operands if id(o) not in inside):
        if triton_kind(t) != "__triton" or t is t.parent.root:
            continue
        chain = _joined_chain(t)
        if (chain and id(chain[-1]) in inside and t.shape.byte_size > chain[-1].shape.byte_size
                and not any(_feeds_triton(u) for u in chain[-1].users)):
            return t, chain[-1]
    return None


def _feeds_triton(k: Instruction) -> bool:
    """Is ``k`` a Triton fusion, or the start of a chain of elementwise kernels, each
    the next's only reader, that a Triton fusion reads (a prologue it may take)?"""
    while triton_kind(k) != "__triton":
        if not _elementwise_kernel(k) or (k := _only_user(k)) is None:
            return False
    return True


def _triton_to_join(consumer: list[Instruction], outputs: list[Instruction]) -> Instruction | None:
    """The Triton fusion a cluster of one output will join: the one that alone reads
    that output (the cluster is its prologue), or one the cluster alone reads, with
    the output's dimensions (its epilogue)."""
    if len(outputs) != 1:
        return None
    readers = set(outputs[0].users)
    if len(readers) == 1 and triton_kind(t := readers.pop()) == "__triton":
        return t
    inside = {id(m) for m in consumer}
    return next((o for m in consumer for o in m.operands
                 if triton_kind(o) == "__triton" and o.shape.dims == outputs[0].shape.dims
                 and o is not o.parent.root and all(id(u) in inside for u in o.users)), None)


def _joined_before(t: Instruction) -> list[Instruction]:
    """The kernels this pass will join ``t`` to as its epilogue, one before another: a
    softmax's exp and its max half, when ``t`` is its sum-divide half."""
    before, k = [], t
    while (o := next((o for o in k.operands if _only_user(o) is k and (_elementwise_kernel(o) or _same_tiles(o, t))),
                     None)) is not None:
        before.append(o)
        k = o
    return before


def _joined_chain(t: Instruction) -> list[Instruction]:
    """The kernels this pass will join to ``t`` as its epilogues, one after another
    (``_joins_as_epilogue``: a softmax's exp, then its sum-divide half)."""
    chain, k = [], t
    while (u := _only_user(k)) is not None and _joins_as_epilogue(u, t):
        chain.append(u)
        k = u
    return chain


def _broadcast_value(members: tuple[Instruction, ...], t: Instruction) -> tuple[Instruction, tuple[int, ...]] | None:
    """A value computed among ``members`` (the producer and consumer clusters) that a
    broadcast among them spreads to ``t``'s output dimensions, and the broadcast's
    dimensions."""
    computed = {id(m) for m in members if m.opcode not in (_H.PARAMETER, _H.CONSTANT)}
    for m in members:
        b = _broadcast_in(m)
        if b is None or list(b.shape.dims) != list(t.shape.dims):
            continue
        value = m.operands[0] if m.operands else None
        if value is not None and id(value) in computed:
            return value, tuple(b.dimensions or ())
    return None


def _broadcast_in(instr: Instruction) -> Instruction | None:
    """``instr`` if it is a broadcast that adds elements, or that broadcast as the root of the
    loop fusion XLA's fusion wrapper made of one."""
    b = instr.fused_computation.root if instr.opcode is _H.FUSION and instr.fused_computation is not None else instr
    if b.opcode is _H.BROADCAST and b.shape.num_elements > b.operands[0].shape.num_elements:
        return b
    return None


#: Ops XLA's Triton emitter takes besides elementwise ones, reduces, pads and constants
#: (support.cc, ``IsTritonSupportedInstructionImpl``); not gathers, scatters, dynamic slices.
_TRITON_SHAPE_OPS = {_H.PARAMETER, _H.BITCAST, _H.BROADCAST, _H.RESHAPE, _H.SLICE, _H.TRANSPOSE, _H.IOTA}


def triton_emits(instr: Instruction) -> bool:
    """Could XLA's Triton emitter emit ``instr`` (a loop or reduction fusion: all of
    its body)?  Its support list, less the types: a reduce of one operand over one
    dimension (a split-K GEMM's partial sums; Qwen3's one-hot router weights summed
    over the top 8), a scalar constant, a pad at the high end."""
    op = instr.opcode
    if op is _H.FUSION:
        body = instr.fused_computation
        return instr.fusion_kind in ("kLoop", "kInput") and body is not None and all(triton_emits(i) for i in body)
    if op is _H.REDUCE:
        return len(instr.operands) == 2 and len(instr.dimensions or ()) == 1
    if op is _H.CONSTANT:
        return instr.shape.is_array and instr.shape.num_elements == 1
    if op is _H.PAD:
        return all(lo == 0 and interior == 0 for lo, _, interior in instr.padding or ())
    return op in _TRITON_SHAPE_OPS or _triton_elementwise(instr)


def _emitted_by_triton(instr: Instruction) -> bool:
    """A cluster member Triton can emit as part of a tile: a tileable op, or the loop
    fusion XLA's fusion wrapper made of one (``wrapped_convert``)."""
    return _elementwise_kernel(instr) if instr.opcode is HloOpcode.FUSION else _tileable(instr)


def _prologue(t: Instruction, device: Device) -> tuple[Instruction, bool] | None:
    """An operand of ``t`` that can become its prologue, and whether it must be
    duplicated: an elementwise kernel only ``t`` reads, any other loop fusion only
    ``t`` reads that XLA would fuse in (``_one_kernel_pays``: Mixtral's router
    logits, the reduce of a split-K GEMM's partial sums, in stock's router softmax),
    or a Triton fusion with ``t``'s dimensions and tiles (a norm whose output feeds
    the next norm: XLA:GPU puts both reductions in one kernel).  A Triton producer
    that others read too is duplicated into ``t`` when that moves fewer bytes
    (``_duplication_pays``)."""
    for o in dict.fromkeys(t.operands):
        only_t = all(u is t for u in o.users)
        if only_t and (_elementwise_kernel(o) or o.opcode is _H.FUSION and triton_emits(o)
                       and _one_kernel_pays(t, o, device, free=False)):
            return o, False
        if _same_tiles(o, t):
            if only_t:
                return o, False
            if o.parent.root is not o and _duplication_pays(o, t):
                return o, True
    return None


def _same_tiles(a: Instruction, b: Instruction) -> bool:
    return triton_kind(a) == "__triton" == triton_kind(b) and a.shape.dims == b.shape.dims and _tiles(a) == _tiles(b)


def _duplication_pays(producer: Instruction, t: Instruction) -> bool:
    """Does a copy of Triton fusion ``producer`` in ``t`` move fewer bytes?  When
    every user is a Triton fusion with the same tiles, each takes a copy and the
    producer goes: its n users read its operands (n * O) instead of its output
    (n * P), and nobody writes or reads it (O + P), so (n - 1) * O < (n + 1) * P
    (Gemma-2's post-attention norm and residual add, read by the next norm and the
    next residual add: stock's two kernels).  Otherwise the producer stays for the
    others, and the copy pays when it reads no more than ``t`` read of its output
    (the same norm reading a bf16 GEMM output and writing f32)."""
    operands, output = operand_bytes(producer), producer.shape.byte_size
    users = producer.users
    if all(_same_tiles(u, t) for u in users):
        return (len(users) - 1) * operands < (len(users) + 1) * output
    return operands <= output


def _epilogue(t: Instruction) -> Instruction | None:
    """``t``'s only user, when it can become ``t``'s epilogue (same dimensions)."""
    u = _only_user(t)
    return u if u is not None and _joins_as_epilogue(u, t) else None


def _only_user(k: Instruction) -> Instruction | None:
    """``k``'s one user in its computation, unless ``k`` is the root."""
    users = k.users
    if len(users) != 1 or users[0].parent is not k.parent or k is k.parent.root:
        return None
    return users[0]


def _joins_as_epilogue(u: Instruction, t: Instruction) -> bool:
    """Can ``u`` become Triton fusion ``t``'s epilogue: its dimensions, and elementwise
    or a Triton fusion with ``t``'s tiles."""
    return u.shape.dims == t.shape.dims and (_elementwise_kernel(u) or _same_tiles(u, t))


def _consumer(t: Instruction, device: Device) -> Instruction | None:
    """``t``'s only user when XLA:GPU's priority fusion would fuse it into ``t`` as a
    generic Triton fusion of new dimensions (``_one_kernel_pays``, tiled afresh): a
    loop fusion Triton emits.  Mixtral's router: the top-2 weights' normalization (a
    Triton softmax, [1024, 2]), their one-hot spread over 8 experts and transpose
    ([8, 1024]), the experts' weighted sum and the residual add ([1024, 4096]):
    stock's one kernel."""
    u = _only_user(t)
    if (u is None or not u.shape.is_array or u.shape.dims == t.shape.dims or u.opcode is not _H.FUSION
            or not triton_emits(u)):
        return None
    return u if _one_kernel_pays(t, u, device, free=True) else None


def _one_kernel_pays(t: Instruction, other: Instruction, device: Device, *, free: bool) -> bool:
    """Would Triton fusion ``t`` and ``other`` (its producer or its only user), made
    one Triton fusion (XLA: ``MergeFusionInstruction``), have every instruction tiled
    (XLA: ``SymbolicTileAnalysis``) and be faster by the tiled model than the two
    kernels?  At ``t``'s tiling, or (``free``: the fusion has new dimensions) at its
    best tiling over every dimension.  XLA's priority fusion asks the same of a
    producer-consumer pair with a Triton side."""
    producer, consumer = (other, t) if other in t.operands else (t, other)
    scratch = fused_region([producer, consumer], root=consumer, kind="kCustom", merge_custom=True).entry.root
    config = t.backend_config
    if free:  # its best tiling, among those that tile every instruction
        tiling = _best_tiling(scratch, device, free=True, config=config)
    else:
        tiling = config["fusion_backend_config"]["block_level_fusion_config"]
        if not tiles_every_instruction(scratch.fused_computation, output_tile_sizes(t)):
            return False
    if tiling is None:
        return False
    scratch.set_attribute("backend_config", _with_tiling(config, tiling))
    return kernel_cost(scratch, device).exec_s < kernel_cost(t, device).exec_s + kernel_cost(other, device).exec_s


def _copy_for(t: Instruction, producer: Instruction, rw: Rewriter) -> Instruction:
    """A copy of ``producer`` that ``t`` reads instead (its other users keep it)."""
    copy = rw.insert_before(t, producer.clone("dup"))
    for i, o in enumerate(t.operands):
        if o is producer:
            rw.replace_operand(t, i, copy, erase_dead=False)
    return copy


def _tiles(t: Instruction):
    """A Triton fusion's output tiles (its block-level config)."""
    return ((t.backend_config.get("fusion_backend_config") or {}).get("block_level_fusion_config") or {}).get("output_tiles")


def _merge(comp: Computation, triton: Instruction, other: Instruction, rw: Rewriter) -> Instruction:
    """One Triton fusion of ``triton`` and ``other``, with ``triton``'s tiling."""
    config = triton.backend_config
    kept = {k: v for k, v in config.items() if k in _KEPT_CONFIG}
    bodies, region = [], []
    for m in (other, triton):
        if m.opcode is HloOpcode.FUSION:
            bodies.append(m.fused_computation)
            region.extend(inline_fusion(m, rw, remove_body=False))
        else:
            region.append(m)
    merged = outline_fusion(comp, [r for r in region if r.parent is comp], kind="kCustom", name=triton.name,
                            computation_name="fused_computation", keep_order=False, rewriter=rw)
    rw.set_attribute(merged, "backend_config", format_backend_config(kept))
    remove_uncalled(comp.parent, bodies, rw)
    restore_topological_order(comp, rw)
    return merged


#: XLA's DoesTileFitsInRegisters: a tile of at most 0.4 of a block's 65536 registers.
_MAX_TILE = int(0.4 * 65536)


def _num_warps(tile: int) -> int:
    """XLA's GetNumWarps for the largest live tile (padded elements), as of November
    2024 (stock's softmaxes and norms: 16384-element tiles, 8 warps)."""
    for limit, warps in ((256, 1), (1024, 2), (4096, 4)):
        if tile <= limit:
            return warps
    return 8


def _retile(t: Instruction, device: Device, rw: Rewriter, *, free: bool = False) -> None:
    """A joined fusion is a new fusion, and XLA picks a new fusion's tiling by its
    tiled model over the tilings that fit in registers (``TryFindBestTilingForFusion``):
    so here, with ours (``_best_tiling``).  The joined fusion keeps the first half's
    tiling otherwise (Llama-3-8B's masked softmax: one head-row per block, [1, 1, 2048],
    where stock picks [8, 1, 2048] and reads the mask's row once per 8 heads)."""
    config = t.backend_config
    best = _best_tiling(t, device, free=free)
    if best is not None:
        rw.set_attribute(t, "backend_config", _with_tiling(config, best))


def _with_tiling(config: dict, tiling: dict) -> str:
    return format_backend_config(
        {**config, "fusion_backend_config": {**config["fusion_backend_config"], "block_level_fusion_config": tiling}})


def _best_tiling(t: Instruction, device: Device, *, free: bool, config: dict | None = None) -> dict | None:
    """The block-level config of Triton fusion ``t`` the tiled model prices fastest,
    among output tiles that fit in registers and take powers of two of each
    dimension; ``free``: of every dimension (a fusion of new dimensions), otherwise
    of the outer ones, keeping the row (and keeping the tiling as it is as a
    candidate).  None when no tiling keeps track of every instruction's tile
    (``tiles_every_instruction``).  ``config``: the backend config to start from, if
    not ``t``'s.  Leaves ``t``'s own attributes as they were."""
    had = t.attributes.get("backend_config")
    config = config or t.backend_config
    blc = config["fusion_backend_config"]["block_level_fusion_config"]
    dims = list(t.shape.dims)
    def powers_of_two(d: int) -> list[int]:  # 1, 2, 4... up to the first covering dimension d
        return [1 << k for k in range((d - 1).bit_length() + 1)]

    if free:
        sizes, options = [], [powers_of_two(d) for d in dims]
    elif not (sizes := output_tile_sizes(t)) or len(sizes) != len(dims):
        return None
    else:  # each outer dimension: its tile as it is, or any larger power of two up to the dimension
        options = [*([s, *(p for p in powers_of_two(d) if p > s)] for s, d in zip(sizes[:-1], dims)), [sizes[-1]]]
    best, best_time = None, math.inf
    for cand in map(list, itertools.product(*options)):
        padded = padded_tile_size(cand)
        if padded > _MAX_TILE and cand != sizes or free and not tiles_every_instruction(t.fused_computation, cand):
            continue
        warps = blc.get("num_warps") if cand == sizes else None
        trial = {**blc, "output_tiles": [{"sizes": [str(c) for c in cand]}], "num_warps": warps or str(_num_warps(padded))}
        t.set_attribute("backend_config", _with_tiling(config, trial))
        time = kernel_cost(t, device).exec_s
        if time < best_time:
            best, best_time = trial, time
    t.set_attribute("backend_config", had)
    return best


@dataclass(frozen=True)
class TritonElementwiseFusion(FusionPass):
    """Elementwise prologues and epilogues joined to XLA:GPU's Triton (non-GEMM)
    fusions, as XLA:GPU's priority fusion joins them (module docstring)."""

    name = "triton-elementwise-fusion"
    #: the GPU whose tiled model picks a joined fusion's tiling
    target: str = "h100"

    def run(self, module: Module) -> bool:
        rw = Rewriter()
        device = devices.load(self.target)
        for comp in fusible_computations(module):
            merged: dict[str, bool] = {}  # joined fusion -> of new dimensions
            for t in [i for i in comp if triton_kind(i) == "__triton"]:
                while t.parent is comp:  # not already joined to an earlier one as its epilogue
                    other, duplicate = _prologue(t, device) or (_epilogue(t), False)
                    new_dims = other is None and (other := _consumer(t, device)) is not None
                    if other is None or not consume_fuel(
                            lambda: f"join {'a copy of ' if duplicate else ''}%{other.name} to Triton fusion %{t.name}"):
                        break
                    t = _merge(comp, t, _copy_for(t, other, rw) if duplicate else other, rw)
                    merged[t.name] = merged.get(t.name, False) or new_dims
                    if new_dims:
                        _retile(t, device, rw, free=True)  # the next join matches tiles with these
            for t in [i for i in comp if i.name in merged and triton_kind(i) == "__triton"]:  # after all joins:
                _retile(t, device, rw, free=merged[t.name])  # the joins above match tiles as XLA made them
        return rw.changed
