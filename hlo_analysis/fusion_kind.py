"""The kind of a fusion (XLA's ``HloInstruction::FusionKind``), from one rule.

The kind tells XLA's emitter how to walk the fusion: ``kLoop`` over the output's
index space, ``kInput`` over a reduction's input, ``kOutput`` around a dot or
convolution whose epilogue was fused in, ``kCustom`` a library call or a custom
emitter. Every pass that outlines a fusion and every analysis that prices one
asks ``fusion_kind`` (or ``loop_kind``, XLA:CPU's answer) instead of deciding it.
"""

from __future__ import annotations

from typing import Sequence

from hlo_tools.ir import Instruction
from hlo_tools.opcode import HloOpcode

from .gpu_kernel_model import tiled_transpose

LOOP, INPUT, OUTPUT, CUSTOM = "kLoop", "kInput", "kOutput", "kCustom"
KINDS = frozenset({LOOP, INPUT, OUTPUT, CUSTOM})

_REDUCTIONS = frozenset({HloOpcode.REDUCE, HloOpcode.REDUCE_WINDOW})
_CONTRACTIONS = frozenset({HloOpcode.DOT, HloOpcode.CONVOLUTION})


def fusion_kind(region: Sequence[Instruction], outputs: Sequence[Instruction], *,
                input_fusion: bool = True, output_fusion: bool = True) -> str:
    """The kind of a fusion of ``region`` whose results are ``outputs``: kInput
    when an output is a reduction, kOutput when the region holds a dot or a
    convolution, else kLoop.

    ``output_fusion=False`` never answers kOutput (``kernels.fused_region``, which
    prices a region, keeps a dot's region kLoop); ``input_fusion=False`` never
    kInput. Both off is ``loop_kind``."""
    if input_fusion and any(o.opcode in _REDUCTIONS for o in outputs):
        return INPUT
    if output_fusion and any(i.opcode in _CONTRACTIONS for i in region):
        return OUTPUT
    return LOOP


def loop_kind(region: Sequence[Instruction], outputs: Sequence[Instruction]) -> str:
    """XLA:CPU's kind: it emits every fusion it forms as kLoop (reductions included)."""
    return fusion_kind(region, outputs, input_fusion=False, output_fusion=False)


def gpu_fusion_kind(region: Sequence[Instruction], outputs: Sequence[Instruction]) -> str:
    """XLA:GPU's label: kInput for its input-fusion emitters (a reduction output,
    or a transpose of the physically minor dimension inside: the transpose
    emitter tiles it through shared memory, as XLA labels such fusions), else
    kLoop. Dots stay in XLA's Triton GEMM fusions, never in ours."""
    def inner(i: Instruction) -> list[Instruction]:  # a member fusion counts by its body
        body = i.fused_computation
        return list(body) if body is not None else [i]

    def reduces(o: Instruction) -> bool:
        body = o.fused_computation
        if o.opcode is HloOpcode.GET_TUPLE_ELEMENT:  # an output of a member multi-output fusion
            source = o.operand(0).fused_computation
            return source is not None and source.root.opcode is HloOpcode.TUPLE and reduces(
                source.root.operand(o.tuple_index))
        return o.opcode in _REDUCTIONS or (body is not None and reduces(body.root)) or (
            o.opcode is HloOpcode.TUPLE and any(reduces(x) for x in o.operands))

    if any(reduces(o) for o in outputs) or any(tiled_transpose(x) for i in region for x in inner(i)):
        return INPUT
    return LOOP
