"""Which instructions must never be removed or merged, whatever their users say."""

from __future__ import annotations

import contextlib
import contextvars
from typing import Iterator

from .ir import Computation, Instruction
from .opcode import SIDE_EFFECTING, HloOpcode

#: Not side-effecting, but two of them are not the same value.
NON_DETERMINISTIC = frozenset({HloOpcode.RNG, HloOpcode.RNG_GET_AND_UPDATE_STATE, HloOpcode.RNG_BIT_GENERATOR})


class SideEffects:
    """Memoized ``has_side_effect``: like XLA's HloInstruction::HasSideEffect,
    an instruction has one if its opcode does, if it is a custom-call marked
    ``custom_call_has_side_effect=true``, or if a computation it calls does."""

    def __init__(self) -> None:
        self._comps: dict[int, bool] = {}
        self._held: list[Computation] = []  # the memo's keys stay alive: an id is never reused under it

    def instruction(self, instr: Instruction) -> bool:
        return self._own(instr) or any(self.computation(c) for c in instr.called_computations)

    @staticmethod
    def _own(instr: Instruction) -> bool:
        """The instruction's own side effect, its called computations aside."""
        op = instr.opcode
        if op in SIDE_EFFECTING:
            return True
        if op is HloOpcode.CUSTOM_CALL and instr.attribute("custom_call_has_side_effect") == "true":
            return True
        if op is HloOpcode.ASYNC_START or op is HloOpcode.ASYNC_DONE or op is HloOpcode.ASYNC_UPDATE:
            return instr.async_wrapped_opcode in SIDE_EFFECTING
        return False

    def computation(self, comp: Computation) -> bool:
        """Callees first, in ``make_embedded_computations_post_order``'s order: call
        and fusion chains of any depth (a call cycle, invalid HLO, counts as no side
        effect)."""
        if id(comp) not in self._comps:
            for c in (*comp.make_embedded_computations_post_order(known=self._comps), comp):
                if id(c) not in self._comps:
                    self._held.append(c)
                    self._comps[id(c)] = any(self._own(i) or any(self._comps.get(id(k), False) for k in i.called_computations)
                                             for i in c)
        return self._comps[id(comp)]


_SHARED: contextvars.ContextVar[SideEffects | None] = contextvars.ContextVar("hlo_side_effects", default=None)


@contextlib.contextmanager
def one_memo() -> Iterator[SideEffects]:
    """Within the block ``side_effects()`` answers from one memo, so a pass run asks
    about each computation of a call chain once, not once per caller. Safe across a
    pass's edits: outlining and inlining move instructions between a computation and
    its callees, and a computation's answer is the union over both."""
    token = _SHARED.set(SideEffects())
    try:
        yield _SHARED.get()
    finally:
        _SHARED.reset(token)


def side_effects() -> SideEffects:
    """The memo of the enclosing ``one_memo`` block, else a fresh one."""
    return _SHARED.get() or SideEffects()
