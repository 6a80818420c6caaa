"""Opcode categories and colours for drawings, and small label helpers."""

from __future__ import annotations

import enum

from hlo_tools.ir import Instruction
from hlo_tools.opcode import COLLECTIVES, ELEMENTWISE, HloOpcode


class Category(enum.Enum):
    """What kind of work an instruction does, for colouring a graph."""

    MATMUL = "matmul"
    ELEMENTWISE = "elementwise"
    REDUCTION = "reduction"
    DATA_MOVEMENT = "data movement"
    COLLECTIVE = "collective"
    PARAMETER = "parameter"
    CONSTANT = "constant"
    FUSION = "fusion"
    CONTROL = "control flow"
    OTHER = "other"


#: Fill colours (light, so labels stay readable); one per category.
COLORS: dict[Category, str] = {
    Category.MATMUL: "#f4a582",
    Category.ELEMENTWISE: "#d1e5f0",
    Category.REDUCTION: "#b2df8a",
    Category.DATA_MOVEMENT: "#fff2ae",
    Category.COLLECTIVE: "#fb9a99",
    Category.PARAMETER: "#e0e0e0",
    Category.CONSTANT: "#f0f0f0",
    Category.FUSION: "#cab2d6",
    Category.CONTROL: "#fdbf6f",
    Category.OTHER: "#ffffff",
}

_MATMUL = frozenset({HloOpcode.DOT, HloOpcode.CONVOLUTION, HloOpcode.RAGGED_DOT, HloOpcode.SCALED_DOT})
_REDUCTION = frozenset({HloOpcode.REDUCE, HloOpcode.REDUCE_WINDOW, HloOpcode.SELECT_AND_SCATTER})
_DATA_MOVEMENT = frozenset(
    HloOpcode[n]
    for n in (
        "BROADCAST RESHAPE DYNAMIC_RESHAPE TRANSPOSE COPY COPY_START COPY_DONE SLICE DYNAMIC_SLICE DYNAMIC_UPDATE_SLICE "
        "CONCATENATE PAD GATHER SCATTER BITCAST GET_TUPLE_ELEMENT TUPLE REVERSE IOTA SORT"
    ).split()
)
_CONTROL = frozenset({HloOpcode.WHILE, HloOpcode.CONDITIONAL, HloOpcode.CALL, HloOpcode.ASYNC_START,
                      HloOpcode.ASYNC_UPDATE, HloOpcode.ASYNC_DONE, HloOpcode.OPTIMIZATION_BARRIER})
#: custom-call targets that are matrix multiplies (cuBLAS, oneDNN, XLA:CPU's runtime).
_GEMM_TARGET_WORDS = ("gemm", "matmul", "cublas", "onednn$matmul", "dot")


def category(instr: Instruction) -> Category:
    """The drawing category of an instruction (copy counts as data movement, not elementwise)."""
    op = instr.opcode
    if op is HloOpcode.PARAMETER:
        return Category.PARAMETER
    if op is HloOpcode.CONSTANT:
        return Category.CONSTANT
    if op is HloOpcode.FUSION:
        return Category.FUSION
    if op in _MATMUL:
        return Category.MATMUL
    if op in COLLECTIVES or (instr.async_wrapped_opcode in COLLECTIVES):
        return Category.COLLECTIVE
    if op in _REDUCTION:
        return Category.REDUCTION
    if op in _DATA_MOVEMENT:
        return Category.DATA_MOVEMENT
    if op in _CONTROL:
        return Category.CONTROL
    if op is HloOpcode.CUSTOM_CALL:
        target = (instr.custom_call_target or "").lower()
        return Category.MATMUL if any(w in target for w in _GEMM_TARGET_WORDS) else Category.OTHER
    if op in ELEMENTWISE:
        return Category.ELEMENTWISE
    return Category.OTHER


def shorten(text: str, limit: int = 48) -> str:
    """Cuts long text (tuple shapes, literals) in the middle with an ellipsis."""
    if len(text) <= limit:
        return text
    half = (limit - 1) // 2
    return text[:half] + "…" + text[-half:]
