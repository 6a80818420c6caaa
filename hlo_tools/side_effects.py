"""Which instructions must never be removed or merged, whatever their users say."""

from __future__ import annotations

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

    def instruction(self, instr: Instruction) -> bool:
        op = instr.opcode
        if op in SIDE_EFFECTING:
            return True
        if op is HloOpcode.CUSTOM_CALL and instr.attribute("custom_call_has_side_effect") == "true":
            return True
        if op is HloOpcode.ASYNC_START or op is HloOpcode.ASYNC_DONE or op is HloOpcode.ASYNC_UPDATE:
            if instr.async_wrapped_opcode in SIDE_EFFECTING:
                return True
        return any(self.computation(c) for c in instr.called_computations)

    def computation(self, comp: Computation) -> bool:
        key = id(comp)
        if key not in self._comps:
            self._comps[key] = False  # recursion guard
            self._comps[key] = any(self.instruction(i) for i in comp)
        return self._comps[key]
