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


for _code in HloOpcode:
    globals()[_public_name(_code)] = _factory(_code)
