"""Pattern matchers in the spirit of XLA's ``m::`` (xla/service/pattern_matcher.h).
The rewriter and the greedy worklist driver they feed are ``hlo_tools.rewriter``.

    from hlo_tools import pattern as m
    p = m.add(m.op("x"), m.broadcast(m.constant_scalar(0)))
    found = m.match(instr, p)          # Match or None
    found["x"]                          # the captured instruction
    m.match(instr, p, explain=True)     # says which sub-pattern failed, and why

Patterns compose: ``m.<opcode>(*operands)`` for every opcode (``m.get_tuple_element``,
``m.dynamic_slice``...), ``m.op()`` matches anything, and predicates chain:
``m.op("y").with_dtype("f32").with_rank(2).single_user()``.
"""

from __future__ import annotations

import builtins
import keyword
import re
from dataclasses import dataclass
from typing import Callable

from .ir import Instruction
from .opcode import HloOpcode
from .shape import PRIMITIVE_TYPES, Shape, parse_shape


class Pattern:
    """Something an instruction can match; captures bind names to instructions."""

    def __init__(self, capture: str | None = None):
        self.capture = capture
        self._preds: list[tuple[str, Callable[[Instruction], bool]]] = []

    # -- predicates -----------------------------------------------------------
    def where(self, pred: Callable[[Instruction], bool], description: str = "a custom predicate") -> "Pattern":
        self._preds.append((description, pred))
        return self

    def with_shape(self, shape: Shape | str) -> "Pattern":
        want = parse_shape(shape) if isinstance(shape, str) else shape
        return self.where(lambda i: i.shape.compatible(want), f"shape {want.to_text(False)}")

    def with_dtype(self, dtype: str) -> "Pattern":
        et = PRIMITIVE_TYPES[dtype]
        return self.where(lambda i: i.shape.element_type is et, f"element type {dtype}")

    def with_rank(self, rank: int) -> "Pattern":
        return self.where(lambda i: i.shape.is_array and i.shape.rank == rank, f"rank {rank}")

    def scalar(self) -> "Pattern":
        return self.where(lambda i: i.shape.is_scalar, "a scalar")

    def single_user(self) -> "Pattern":
        return self.where(lambda i: i.user_count == 1, "exactly one user")

    # -- matching ---------------------------------------------------------------
    def _match_self(self, instr: Instruction, ctx: "_Ctx", path: str) -> bool:
        raise NotImplementedError

    def _match(self, instr: Instruction, ctx: "_Ctx", path: str) -> bool:
        if not self._match_self(instr, ctx, path):
            return False
        for description, pred in self._preds:
            if not pred(instr):
                return ctx.fail(path, f"expected {description}", instr)
        if self.capture is not None:
            prev = ctx.captures.get(self.capture)
            if prev is not None and prev is not instr:
                return ctx.fail(path, f"capture '{self.capture}' is already %{prev.name}", instr)
            ctx.captures[self.capture] = instr
        return True

    def describe(self) -> str:
        return "op"


class _Ctx:
    def __init__(self, explain: bool):
        self.captures: dict[str, Instruction] = {}
        self.explain = explain
        self.reasons: list[str] = []

    def fail(self, path: str, expected: str, found: Instruction) -> bool:
        if self.explain:
            self.reasons.append(f"{path}: {expected}, found %{found.name} = {found.shape.to_text(False)} {found.opcode_text}(...)")
        return False


class AnyOp(Pattern):
    def _match_self(self, instr, ctx, path):
        return True

    def describe(self) -> str:
        return "op" + (f"({self.capture!r})" if self.capture else "")


class OpcodePattern(Pattern):
    """An opcode with operand sub-patterns (all operands must be given, or none)."""

    def __init__(self, opcode: HloOpcode, operands: tuple[Pattern, ...], capture: str | None, commutative: bool):
        super().__init__(capture)
        self.opcode = opcode
        self.operands = operands
        self.commutative = commutative

    def _match_self(self, instr, ctx, path):
        if instr.opcode is not self.opcode:
            return ctx.fail(path, f"expected {self.opcode.value}", instr)
        if not self.operands:
            return True
        if instr.operand_count != len(self.operands):
            return ctx.fail(path, f"expected {len(self.operands)} operands", instr)
        saved = dict(ctx.captures)
        if self._operands_match(instr.operands, ctx, path):
            return True
        if self.commutative and len(self.operands) == 2:
            ctx.captures = saved
            if self._operands_match(tuple(reversed(instr.operands)), ctx, path + " (swapped)"):
                return True
        return False

    def _operands_match(self, operands, ctx, path) -> bool:
        for i, (op, sub) in enumerate(zip(operands, self.operands)):
            if not sub._match(op, ctx, f"{path} -> operand {i}"):
                return False
        return True

    def describe(self) -> str:
        inner = ", ".join(o.describe() for o in self.operands)
        return f"{self.opcode.value}({inner})"


class ConstantScalar(Pattern):
    """A scalar constant, optionally with a given value (compared numerically)."""

    def __init__(self, value: float | int | bool | None, capture: str | None):
        super().__init__(capture)
        self.value = value

    def _match_self(self, instr, ctx, path):
        if instr.opcode is not HloOpcode.CONSTANT or not instr.shape.is_scalar:
            return ctx.fail(path, "expected a scalar constant", instr)
        if self.value is None:
            return True
        got = scalar_value(instr)
        if got is None or got != self.value:
            return ctx.fail(path, f"expected the constant {self.value}", instr)
        return True

    def describe(self) -> str:
        return f"constant_scalar({'' if self.value is None else self.value})"


def scalar_value(instr: Instruction) -> float | int | bool | None:
    """The value of a scalar constant's literal, or None if it is not a plain number."""
    text = (instr.literal or "").strip()
    if text in ("true", "false"):
        return text == "true"
    if re.fullmatch(r"-?\d+", text):
        return int(text)
    try:
        return float(text)
    except ValueError:
        return None


class AnyOf(Pattern):
    def __init__(self, alternatives: tuple[Pattern, ...], capture: str | None):
        super().__init__(capture)
        self.alternatives = alternatives

    def _match_self(self, instr, ctx, path):
        for alt in self.alternatives:
            saved = dict(ctx.captures)
            if alt._match(instr, ctx, path):
                return True
            ctx.captures = saved
        return ctx.fail(path, "expected one of " + " | ".join(a.describe() for a in self.alternatives), instr)


@dataclass
class Match:
    """A successful match: the root and the captured instructions."""

    root: Instruction
    captures: dict[str, Instruction]

    def __getitem__(self, name: str) -> Instruction:
        return self.captures[name]

    def get(self, name: str) -> Instruction | None:
        return self.captures.get(name)


@dataclass
class MatchExplanation:
    """Why a match failed: the deepest sub-pattern that did not hold."""

    pattern: str
    reasons: list[str]

    def __bool__(self) -> bool:
        return False

    def __str__(self) -> str:
        return f"no match for {self.pattern}:\n  " + "\n  ".join(self.reasons or ["(no reason recorded)"])


def match(instr: Instruction, pattern: Pattern, *, explain: bool = False) -> Match | MatchExplanation | None:
    """Matches ``pattern`` at ``instr``. Returns a Match, or None (or, with
    ``explain=True``, a falsy MatchExplanation saying what failed where)."""
    ctx = _Ctx(explain)
    if pattern._match(instr, ctx, "root"):
        return Match(instr, ctx.captures)
    if explain:
        return MatchExplanation(pattern.describe(), ctx.reasons)
    return None


# -- constructors ------------------------------------------------------------------
def op(capture: str | None = None) -> Pattern:
    """Any instruction."""
    return AnyOp(capture)


def opcode(code: HloOpcode | str, *operands: Pattern, capture: str | None = None, commutative: bool = False) -> Pattern:
    if isinstance(code, str):
        code = HloOpcode(code)
    return OpcodePattern(code, tuple(operands), capture, commutative)


def constant_scalar(value: float | int | bool | None = None, capture: str | None = None) -> Pattern:
    return ConstantScalar(value, capture)


def any_of(*alternatives: Pattern, capture: str | None = None) -> Pattern:
    return AnyOf(tuple(alternatives), capture)


def broadcast_of_scalar(value: float | int | bool | None = None, capture: str | None = None) -> Pattern:
    """A scalar constant, or a broadcast of one (what ``x + 0`` looks like in HLO)."""
    return any_of(constant_scalar(value), opcode(HloOpcode.BROADCAST, constant_scalar(value)), capture=capture)


_COMMUTATIVE = {HloOpcode.ADD, HloOpcode.MULTIPLY, HloOpcode.MAXIMUM, HloOpcode.MINIMUM, HloOpcode.AND, HloOpcode.OR, HloOpcode.XOR}


def _factory(code: HloOpcode) -> Callable[..., Pattern]:
    def make(*operands: Pattern, capture: str | None = None, commutative: bool | None = None) -> Pattern:
        comm = code in _COMMUTATIVE if commutative is None else commutative
        return OpcodePattern(code, tuple(operands), capture, comm)

    make.__name__ = code.name.lower()
    make.__doc__ = f"Matches ``{code.value}``{' (either operand order)' if code in _COMMUTATIVE else ''} with the given operand patterns."
    return make


def _public_name(code: HloOpcode) -> str:
    """``m.get_tuple_element``; names that are Python keywords or builtins get a
    trailing underscore (``m.tuple_``, ``m.and_``, ``m.while_``, ``m.abs_``)."""
    name = code.name.lower()
    return name + "_" if keyword.iskeyword(name) or hasattr(builtins, name) else name


# One matcher per opcode, written out rather than made in a loop, so that editors and
# type checkers see them (tests/test_matchers.py checks that every HloOpcode has one).
abs_ = _factory(HloOpcode.ABS)
acos = _factory(HloOpcode.ACOS)
acosh = _factory(HloOpcode.ACOSH)
add = _factory(HloOpcode.ADD)
add_dependency = _factory(HloOpcode.ADD_DEPENDENCY)
after_all = _factory(HloOpcode.AFTER_ALL)
all_gather = _factory(HloOpcode.ALL_GATHER)
all_gather_done = _factory(HloOpcode.ALL_GATHER_DONE)
all_gather_start = _factory(HloOpcode.ALL_GATHER_START)
all_reduce = _factory(HloOpcode.ALL_REDUCE)
all_reduce_done = _factory(HloOpcode.ALL_REDUCE_DONE)
all_reduce_start = _factory(HloOpcode.ALL_REDUCE_START)
all_to_all = _factory(HloOpcode.ALL_TO_ALL)
and_ = _factory(HloOpcode.AND)
asin = _factory(HloOpcode.ASIN)
asinh = _factory(HloOpcode.ASINH)
async_done = _factory(HloOpcode.ASYNC_DONE)
async_start = _factory(HloOpcode.ASYNC_START)
async_update = _factory(HloOpcode.ASYNC_UPDATE)
atan2 = _factory(HloOpcode.ATAN2)
atanh = _factory(HloOpcode.ATANH)
batch_norm_grad = _factory(HloOpcode.BATCH_NORM_GRAD)
batch_norm_inference = _factory(HloOpcode.BATCH_NORM_INFERENCE)
batch_norm_training = _factory(HloOpcode.BATCH_NORM_TRAINING)
bitcast = _factory(HloOpcode.BITCAST)
bitcast_convert = _factory(HloOpcode.BITCAST_CONVERT)
broadcast = _factory(HloOpcode.BROADCAST)
call = _factory(HloOpcode.CALL)
cbrt = _factory(HloOpcode.CBRT)
ceil = _factory(HloOpcode.CEIL)
cholesky = _factory(HloOpcode.CHOLESKY)
clamp = _factory(HloOpcode.CLAMP)
clz = _factory(HloOpcode.CLZ)
collective_broadcast = _factory(HloOpcode.COLLECTIVE_BROADCAST)
collective_permute = _factory(HloOpcode.COLLECTIVE_PERMUTE)
collective_permute_done = _factory(HloOpcode.COLLECTIVE_PERMUTE_DONE)
collective_permute_start = _factory(HloOpcode.COLLECTIVE_PERMUTE_START)
collective_reduce = _factory(HloOpcode.COLLECTIVE_REDUCE)
compare = _factory(HloOpcode.COMPARE)
complex_ = _factory(HloOpcode.COMPLEX)
concatenate = _factory(HloOpcode.CONCATENATE)
conditional = _factory(HloOpcode.CONDITIONAL)
constant = _factory(HloOpcode.CONSTANT)
convert = _factory(HloOpcode.CONVERT)
convolution = _factory(HloOpcode.CONVOLUTION)
copy = _factory(HloOpcode.COPY)
copy_done = _factory(HloOpcode.COPY_DONE)
copy_start = _factory(HloOpcode.COPY_START)
cosine = _factory(HloOpcode.COSINE)
cosh = _factory(HloOpcode.COSH)
custom_call = _factory(HloOpcode.CUSTOM_CALL)
divide = _factory(HloOpcode.DIVIDE)
domain = _factory(HloOpcode.DOMAIN)
dot = _factory(HloOpcode.DOT)
dynamic_reshape = _factory(HloOpcode.DYNAMIC_RESHAPE)
dynamic_slice = _factory(HloOpcode.DYNAMIC_SLICE)
dynamic_update_slice = _factory(HloOpcode.DYNAMIC_UPDATE_SLICE)
erf = _factory(HloOpcode.ERF)
exponential = _factory(HloOpcode.EXPONENTIAL)
exponential_minus_one = _factory(HloOpcode.EXPONENTIAL_MINUS_ONE)
fft = _factory(HloOpcode.FFT)
floor = _factory(HloOpcode.FLOOR)
fma = _factory(HloOpcode.FMA)
fusion = _factory(HloOpcode.FUSION)
gather = _factory(HloOpcode.GATHER)
get_dimension_size = _factory(HloOpcode.GET_DIMENSION_SIZE)
get_tuple_element = _factory(HloOpcode.GET_TUPLE_ELEMENT)
imag = _factory(HloOpcode.IMAG)
infeed = _factory(HloOpcode.INFEED)
iota = _factory(HloOpcode.IOTA)
is_finite = _factory(HloOpcode.IS_FINITE)
log = _factory(HloOpcode.LOG)
log_plus_one = _factory(HloOpcode.LOG_PLUS_ONE)
logistic = _factory(HloOpcode.LOGISTIC)
map_ = _factory(HloOpcode.MAP)
maximum = _factory(HloOpcode.MAXIMUM)
minimum = _factory(HloOpcode.MINIMUM)
mulhi = _factory(HloOpcode.MULHI)
multiply = _factory(HloOpcode.MULTIPLY)
negate = _factory(HloOpcode.NEGATE)
not_ = _factory(HloOpcode.NOT)
optimization_barrier = _factory(HloOpcode.OPTIMIZATION_BARRIER)
or_ = _factory(HloOpcode.OR)
outfeed = _factory(HloOpcode.OUTFEED)
pad = _factory(HloOpcode.PAD)
parameter = _factory(HloOpcode.PARAMETER)
partition_id = _factory(HloOpcode.PARTITION_ID)
popcnt = _factory(HloOpcode.POPCNT)
power = _factory(HloOpcode.POWER)
ragged_all_to_all = _factory(HloOpcode.RAGGED_ALL_TO_ALL)
ragged_dot = _factory(HloOpcode.RAGGED_DOT)
real = _factory(HloOpcode.REAL)
recv = _factory(HloOpcode.RECV)
recv_done = _factory(HloOpcode.RECV_DONE)
reduce = _factory(HloOpcode.REDUCE)
reduce_precision = _factory(HloOpcode.REDUCE_PRECISION)
reduce_scatter = _factory(HloOpcode.REDUCE_SCATTER)
reduce_window = _factory(HloOpcode.REDUCE_WINDOW)
remainder = _factory(HloOpcode.REMAINDER)
replica_id = _factory(HloOpcode.REPLICA_ID)
reshape = _factory(HloOpcode.RESHAPE)
reverse = _factory(HloOpcode.REVERSE)
rng = _factory(HloOpcode.RNG)
rng_bit_generator = _factory(HloOpcode.RNG_BIT_GENERATOR)
rng_get_and_update_state = _factory(HloOpcode.RNG_GET_AND_UPDATE_STATE)
round_nearest_afz = _factory(HloOpcode.ROUND_NEAREST_AFZ)
round_nearest_even = _factory(HloOpcode.ROUND_NEAREST_EVEN)
rsqrt = _factory(HloOpcode.RSQRT)
scaled_dot = _factory(HloOpcode.SCALED_DOT)
scan = _factory(HloOpcode.SCAN)
scatter = _factory(HloOpcode.SCATTER)
select = _factory(HloOpcode.SELECT)
select_and_scatter = _factory(HloOpcode.SELECT_AND_SCATTER)
send = _factory(HloOpcode.SEND)
send_done = _factory(HloOpcode.SEND_DONE)
set_dimension_size = _factory(HloOpcode.SET_DIMENSION_SIZE)
shift_left = _factory(HloOpcode.SHIFT_LEFT)
shift_right_arithmetic = _factory(HloOpcode.SHIFT_RIGHT_ARITHMETIC)
shift_right_logical = _factory(HloOpcode.SHIFT_RIGHT_LOGICAL)
shuffle = _factory(HloOpcode.SHUFFLE)
sign = _factory(HloOpcode.SIGN)
sine = _factory(HloOpcode.SINE)
sinh = _factory(HloOpcode.SINH)
slice_ = _factory(HloOpcode.SLICE)
sort = _factory(HloOpcode.SORT)
sqrt = _factory(HloOpcode.SQRT)
stochastic_convert = _factory(HloOpcode.STOCHASTIC_CONVERT)
subtract = _factory(HloOpcode.SUBTRACT)
tan = _factory(HloOpcode.TAN)
tanh = _factory(HloOpcode.TANH)
top_k = _factory(HloOpcode.TOP_K)
transpose = _factory(HloOpcode.TRANSPOSE)
triangular_solve = _factory(HloOpcode.TRIANGULAR_SOLVE)
tuple_ = _factory(HloOpcode.TUPLE)
while_ = _factory(HloOpcode.WHILE)
xor = _factory(HloOpcode.XOR)
