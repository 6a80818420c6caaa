"""HLO opcodes, spelled as XLA prints them (``HloOpcode`` in hlo_opcode.h)."""

from __future__ import annotations

import enum


class HloOpcode(enum.Enum):
    """An opcode; the value is XLA's spelling in HLO text."""

    # Members are singletons: identity hashing, not Enum's hash of the name in
    # Python (opcode sets and dicts are asked millions of times per analysis).
    __hash__ = object.__hash__

    ABS = "abs"
    ACOS = "acos"
    ACOSH = "acosh"
    ADD = "add"
    ADD_DEPENDENCY = "add-dependency"
    AFTER_ALL = "after-all"
    ALL_GATHER = "all-gather"
    ALL_GATHER_DONE = "all-gather-done"
    ALL_GATHER_START = "all-gather-start"
    ALL_REDUCE = "all-reduce"
    ALL_REDUCE_DONE = "all-reduce-done"
    ALL_REDUCE_START = "all-reduce-start"
    ALL_TO_ALL = "all-to-all"
    AND = "and"
    ASIN = "asin"
    ASINH = "asinh"
    ASYNC_DONE = "async-done"
    ASYNC_START = "async-start"
    ASYNC_UPDATE = "async-update"
    ATAN2 = "atan2"
    ATANH = "atanh"
    BATCH_NORM_GRAD = "batch-norm-grad"
    BATCH_NORM_INFERENCE = "batch-norm-inference"
    BATCH_NORM_TRAINING = "batch-norm-training"
    BITCAST = "bitcast"
    BITCAST_CONVERT = "bitcast-convert"
    BROADCAST = "broadcast"
    CALL = "call"
    CBRT = "cbrt"
    CEIL = "ceil"
    CHOLESKY = "cholesky"
    CLAMP = "clamp"
    CLZ = "count-leading-zeros"
    COLLECTIVE_BROADCAST = "collective-broadcast"
    COLLECTIVE_PERMUTE = "collective-permute"
    COLLECTIVE_PERMUTE_DONE = "collective-permute-done"
    COLLECTIVE_PERMUTE_START = "collective-permute-start"
    COLLECTIVE_REDUCE = "collective-reduce"
    COMPARE = "compare"
    COMPLEX = "complex"
    CONCATENATE = "concatenate"
    CONDITIONAL = "conditional"
    CONSTANT = "constant"
    CONVERT = "convert"
    CONVOLUTION = "convolution"
    COPY = "copy"
    COPY_DONE = "copy-done"
    COPY_START = "copy-start"
    COSINE = "cosine"
    COSH = "cosh"
    CUSTOM_CALL = "custom-call"
    DIVIDE = "divide"
    DOMAIN = "domain"
    DOT = "dot"
    DYNAMIC_RESHAPE = "dynamic-reshape"
    DYNAMIC_SLICE = "dynamic-slice"
    DYNAMIC_UPDATE_SLICE = "dynamic-update-slice"
    ERF = "erf"
    EXPONENTIAL = "exponential"
    EXPONENTIAL_MINUS_ONE = "exponential-minus-one"
    FFT = "fft"
    FLOOR = "floor"
    FMA = "fma"  # a*b+c rounded once (jax.lax.fma, jaxlib >= 0.12.1)
    FUSION = "fusion"
    GATHER = "gather"
    GET_DIMENSION_SIZE = "get-dimension-size"
    GET_TUPLE_ELEMENT = "get-tuple-element"
    IMAG = "imag"
    INFEED = "infeed"
    IOTA = "iota"
    IS_FINITE = "is-finite"
    LOG = "log"
    LOG_PLUS_ONE = "log-plus-one"
    LOGISTIC = "logistic"
    MAP = "map"
    MAXIMUM = "maximum"
    MINIMUM = "minimum"
    MULHI = "mulhi"
    MULTIPLY = "multiply"
    NEGATE = "negate"
    NOT = "not"
    OPTIMIZATION_BARRIER = "opt-barrier"
    OR = "or"
    OUTFEED = "outfeed"
    PAD = "pad"
    PARAMETER = "parameter"
    PARTITION_ID = "partition-id"
    POPCNT = "popcnt"
    POWER = "power"
    RAGGED_ALL_TO_ALL = "ragged-all-to-all"
    RAGGED_DOT = "ragged-dot"
    REAL = "real"
    RECV = "recv"
    RECV_DONE = "recv-done"
    REDUCE = "reduce"
    REDUCE_PRECISION = "reduce-precision"
    REDUCE_SCATTER = "reduce-scatter"
    REDUCE_WINDOW = "reduce-window"
    REMAINDER = "remainder"
    REPLICA_ID = "replica-id"
    RESHAPE = "reshape"
    REVERSE = "reverse"
    RNG = "rng"
    RNG_BIT_GENERATOR = "rng-bit-generator"
    RNG_GET_AND_UPDATE_STATE = "rng-get-and-update-state"
    ROUND_NEAREST_AFZ = "round-nearest-afz"
    ROUND_NEAREST_EVEN = "round-nearest-even"
    RSQRT = "rsqrt"
    SCALED_DOT = "scaled-dot"
    SCAN = "scan"
    SCATTER = "scatter"
    SELECT = "select"
    SELECT_AND_SCATTER = "select-and-scatter"
    SEND = "send"
    SEND_DONE = "send-done"
    SET_DIMENSION_SIZE = "set-dimension-size"
    SHIFT_LEFT = "shift-left"
    SHIFT_RIGHT_ARITHMETIC = "shift-right-arithmetic"
    SHIFT_RIGHT_LOGICAL = "shift-right-logical"
    SHUFFLE = "shuffle"
    SIGN = "sign"
    SINE = "sine"
    SINH = "sinh"
    SLICE = "slice"
    SORT = "sort"
    SQRT = "sqrt"
    STOCHASTIC_CONVERT = "stochastic-convert"
    SUBTRACT = "subtract"
    TAN = "tan"
    TANH = "tanh"
    TOP_K = "topk"
    TRANSPOSE = "transpose"
    TRIANGULAR_SOLVE = "triangular-solve"
    TUPLE = "tuple"
    WHILE = "while"
    XOR = "xor"


OPCODES: dict[str, HloOpcode] = {op.value: op for op in HloOpcode}

_ASYNC_SUFFIXES = {"-start": HloOpcode.ASYNC_START, "-update": HloOpcode.ASYNC_UPDATE, "-done": HloOpcode.ASYNC_DONE}

UNARY_ELEMENTWISE = frozenset(
    HloOpcode[n]
    for n in (
        "ABS ACOS ACOSH ASIN ASINH ATANH CBRT CEIL CLZ CONVERT BITCAST_CONVERT COPY COSINE COSH ERF EXPONENTIAL EXPONENTIAL_MINUS_ONE FLOOR IMAG "
        "IS_FINITE LOG LOG_PLUS_ONE LOGISTIC NEGATE NOT POPCNT REAL REDUCE_PRECISION ROUND_NEAREST_AFZ "
        "ROUND_NEAREST_EVEN RSQRT SIGN SINE SINH SQRT TAN TANH"
    ).split()
)
BINARY_ELEMENTWISE = frozenset(
    HloOpcode[n]
    for n in (
        "ADD ATAN2 AND COMPARE COMPLEX DIVIDE MAXIMUM MINIMUM MULHI MULTIPLY OR POWER REMAINDER SHIFT_LEFT "
        "SHIFT_RIGHT_ARITHMETIC SHIFT_RIGHT_LOGICAL STOCHASTIC_CONVERT SUBTRACT XOR"
    ).split()
)
TERNARY_ELEMENTWISE = frozenset({HloOpcode.SELECT, HloOpcode.CLAMP, HloOpcode.FMA})
ELEMENTWISE = UNARY_ELEMENTWISE | BINARY_ELEMENTWISE | TERNARY_ELEMENTWISE

COLLECTIVES = frozenset(
    HloOpcode[n]
    for n in (
        "ALL_GATHER ALL_GATHER_START ALL_GATHER_DONE ALL_REDUCE ALL_REDUCE_START ALL_REDUCE_DONE ALL_TO_ALL "
        "COLLECTIVE_BROADCAST COLLECTIVE_PERMUTE COLLECTIVE_PERMUTE_START COLLECTIVE_PERMUTE_DONE COLLECTIVE_REDUCE "
        "RAGGED_ALL_TO_ALL REDUCE_SCATTER"
    ).split()
)

#: Opcodes whose instructions have effects beyond their result; never dead.
SIDE_EFFECTING = frozenset(
    HloOpcode[n]
    for n in (
        "AFTER_ALL INFEED OUTFEED SEND SEND_DONE RECV RECV_DONE RNG RNG_GET_AND_UPDATE_STATE "
        "DOMAIN ADD_DEPENDENCY OPTIMIZATION_BARRIER"
    ).split()
) | COLLECTIVES


#: Opcodes XLA emits no kernel for: values already in memory (parameter,
#: constant), views of other buffers (bitcast, get-tuple-element, tuple), ordering
#: and scheduling markers (after-all, add-dependency, domain, opt-barrier), and the
#: partition and replica ids (a constant per device). The one "runs no kernel" rule:
#: ``hlo_analysis.cost.is_kernel`` and every kernel count start from it.
NO_KERNEL = frozenset(
    HloOpcode[n]
    for n in (
        "PARAMETER CONSTANT TUPLE GET_TUPLE_ELEMENT BITCAST AFTER_ALL ADD_DEPENDENCY DOMAIN OPTIMIZATION_BARRIER "
        "PARTITION_ID REPLICA_ID"
    ).split()
)


def parse_opcode(text: str) -> tuple[HloOpcode, HloOpcode | None]:
    """Returns (opcode, wrapped opcode) for an opcode spelling.

    ``custom-call-start`` is XLA's sugar for an ``async-start`` wrapping a
    custom-call; the wrapped opcode is returned so the sugar prints back.
    Raises KeyError for an unknown spelling.
    """
    op = OPCODES.get(text)
    if op is not None:
        return op, None
    for suffix, async_op in _ASYNC_SUFFIXES.items():
        if text.endswith(suffix):
            wrapped = OPCODES.get(text[: -len(suffix)])
            if wrapped is not None:
                return async_op, wrapped
    raise KeyError(text)
