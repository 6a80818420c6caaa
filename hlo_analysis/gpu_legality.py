"""What XLA:GPU's emitters accept in one fusion, where XLA:CPU's rules differ.

XLA:CPU's loop emitter walks one index space, so every output of a multi-output
fusion must have the same dimensions (``legality.shape_key``). XLA:GPU picks its
emitter from the fusion's *heroes* (HloFusionAnalysis): a reduction hero is
emitted over the reduction's input, and the other outputs ride along when their
index space is that input. So XLA:GPU fuses siblings whose heroes agree
(``ShapesCompatibleForMultiOutputFusion`` in
xla/service/gpu/gpu_fusible.cc): the "hero shape" of a reduction is its input's
dimensions, of anything else its output's; reductions sharing a fusion must
reduce the same dimensions. That makes multi-output reductions (a LayerNorm's
sum and sum of squares, a softmax's max with its input's other consumers) legal
on GPU, where the CPU rule refuses them.

Fusions XLA's Triton rewriters made (``kCustom``: GEMMs, softmax) are XLA's:
``legality.fusible`` already refuses to fuse them or into them.
"""

from __future__ import annotations

from typing import Iterable

from hlo_tools.ir import Instruction
from hlo_tools.opcode import ELEMENTWISE, HloOpcode

from .gpu_kernel_model import output_roots
from .legality import ALLOW, Decision

_PASS_THROUGH = ELEMENTWISE | frozenset({HloOpcode.BITCAST, HloOpcode.CONVERT})


def _reduction_hero(value: Instruction) -> Instruction | None:
    """The reduce an output is computed from by elementwise code (XLA's
    FindNonTrivialHero for a reduction epilogue), or None."""
    seen = 0
    while seen < 64:
        if value.opcode is HloOpcode.REDUCE:
            return value
        if value.opcode not in _PASS_THROUGH or not value.operands:
            return None
        reduces = [o for o in value.operands if o.opcode is HloOpcode.REDUCE]
        value = reduces[0] if reduces else value.operands[0]
        seen += 1
    return None


def kernel_roots(instr: Instruction) -> list[Instruction]:
    """The values a kernel writes: a fusion's root (each element of a tuple root),
    or the instruction itself."""
    body = instr.fused_computation
    return [instr] if body is None else output_roots(body)


def hero_key(value: Instruction) -> tuple[tuple, tuple[int, ...] | None]:
    """((hero dimensions, layout), reduced dimensions or None) of one output value:
    what must agree for outputs to walk one index space (layout included, as the
    post-scheduler module has them)."""
    hero = _reduction_hero(value)
    shape = hero.operand(0).shape if hero is not None else value.shape
    if not shape.is_array:
        return (), None
    layout = tuple(shape.layout.minor_to_major) if shape.layout is not None and shape.layout.minor_to_major else None
    return (tuple(shape.dims), layout), (tuple(hero.dimensions) if hero is not None else None)


def gpu_outputs_compatible(outputs: Iterable[Instruction]) -> Decision:
    """May these kernels' outputs share one XLA:GPU fusion? Their heroes must
    walk the same index space, and their reductions reduce the same dimensions."""
    keys = {hero_key(v) for o in outputs for v in kernel_roots(o)
            if v.shape.is_array and v.opcode is not HloOpcode.PARAMETER}
    dims = {d for d, _ in keys}
    if len(dims) > 1:
        return Decision.forbid("heroes walk different index spaces: "
                               + ", ".join(sorted("[" + ",".join(map(str, d[0])) + "]" + (str(list(d[1])) if d[1] else "")
                                                  for d in dims if d)))
    reduced = {r for _, r in keys if r is not None}
    if len(reduced) > 1:
        return Decision.forbid("reductions over different dimensions")
    if reduced and any(r is None for _, r in keys):
        # XLA's emitter takes side outputs of the reduction's input shape, but a
        # reduction and a loop output merged at the post-scheduler hook crashed
        # XLA:GPU (measured, llama3-tiny-decode): only reductions share a kernel
        return Decision.forbid("a reduction and a loop output (only sibling reductions share a kernel)")
    return ALLOW


def holds_a_buffer_copy(producer: Instruction) -> Decision:
    """Refuses to fuse away a ``copy`` (alone, or the one op of a fusion XLA's
    fusion wrapper made) at the post-scheduler hook, where the GPU passes run:
    copy insertion put it there so that a buffer written in place (a donated KV
    cache) is read before it is overwritten; fused into its readers, it would
    vanish and they would read the buffer itself.  (XLA's own copy fusion keeps
    such a copy as an extra output of a fusion, never duplicates it.)"""
    body = producer.fused_computation
    inner = [i for i in body if i.opcode is not HloOpcode.PARAMETER] if body is not None else [producer]
    if inner and all(i.opcode is HloOpcode.COPY for i in inner):
        return Decision.forbid("copy: a buffer copy insertion made, not fused away")
    return ALLOW
