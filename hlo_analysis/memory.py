"""Peak live bytes of a sequential schedule, like XLA's HeapSimulator over a
sequence (xla/service/heap_simulator/heap_simulator.cc), simplified.

Model: every instruction defines one buffer per array leaf of its shape, except
the ops XLA's alias analysis treats as views (``bitcast``, ``get-tuple-element``,
``tuple``), which forward their operand's buffers.  A buffer is live from its
defining step to its last use (the root's buffers to the end).  Entry parameters
are caller-owned and live regardless of the schedule, so they are left out by
default.  A ``while``/``call``/``conditional`` adds its callees' own peak at its
step (XLA simulates called computations at their call site); fusion bodies are
never materialised and count nothing.  Two orders of one module are compared
under the same model, which is what a scheduler needs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Sequence

from hlo_tools import Computation, HloOpcode, Instruction

#: Ops that define no buffer: they alias (part of) their operands.
ALIASING = frozenset({HloOpcode.BITCAST, HloOpcode.GET_TUPLE_ELEMENT, HloOpcode.TUPLE})

Buffer = tuple[int, tuple[int, ...]]  # (id of the defining instruction, shape index)


@dataclass(frozen=True)
class MemoryProfile:
    """Peak live bytes of one computation under one order."""

    computation: str
    peak_bytes: int
    peak_at: str            # the instruction at which the peak is reached
    steps: int
    parameters_included: bool

    def __str__(self) -> str:
        return f"%{self.computation}: peak {self.peak_bytes:,} B at %{self.peak_at} over {self.steps} steps"


class BufferModel:
    """Which buffers each instruction defines and which it reads, memoised
    per instruction (shared by the scheduler and the profile)."""

    def __init__(self) -> None:
        self._leaves: dict[int, dict[tuple[int, ...], Buffer]] = {}
        self.sizes: dict[Buffer, int] = {}
        self._callee_peak: dict[int, int] = {}

    def leaves(self, instr: Instruction) -> dict[tuple[int, ...], Buffer]:
        """Shape index -> buffer holding that leaf of ``instr``'s value."""
        key = id(instr)
        got = self._leaves.get(key)
        if got is not None:
            return got
        op = instr.opcode
        out: dict[tuple[int, ...], Buffer] = {}
        if op is HloOpcode.BITCAST:
            out = dict(self.leaves(instr.operand(0)))
        elif op is HloOpcode.TUPLE:
            for i, o in enumerate(instr.operands):
                for idx, b in self.leaves(o).items():
                    out[(i, *idx)] = b
        elif op is HloOpcode.GET_TUPLE_ELEMENT:
            k = instr.tuple_index
            src = self.leaves(instr.operand(0))
            out = {idx[1:]: b for idx, b in src.items() if idx and idx[0] == k}
            if not out:  # an opaque tuple producer: alias the whole operand
                out = dict(src)
        else:
            for idx, leaf in instr.shape.leaves():
                b = (key, idx)
                out[idx] = b
                self.sizes[b] = leaf.byte_size
        self._leaves[key] = out
        return out

    def defined(self, instr: Instruction) -> list[Buffer]:
        """Buffers ``instr`` allocates (none for aliasing ops)."""
        if instr.opcode in ALIASING:
            return []
        return list(self.leaves(instr).values())

    def used(self, instr: Instruction) -> set[Buffer]:
        """Buffers ``instr`` reads (through views)."""
        out: set[Buffer] = set()
        for o in instr.operands:
            out.update(self.leaves(o).values())
        return out

    def callee_peak(self, instr: Instruction) -> int:
        """Extra bytes live while ``instr`` runs its called computations."""
        if instr.opcode is HloOpcode.FUSION or not instr.called_computations:
            return 0
        if instr.opcode not in _RUNS_CALLEES:
            return 0  # to_apply reducers etc. are scalar code
        total = 0
        for comp in instr.called_computations:
            if id(comp) not in self._callee_peak:
                self._profile_callees_first(comp)
            total = max(total, self._callee_peak[id(comp)])
        return total

    def _profile_callees_first(self, comp: Computation) -> None:
        """Profiles ``comp`` and the computations it runs (loops, calls, branches),
        deepest first, so each profile finds its callees' peaks memoized: a call
        chain of any depth without recursion."""
        for c in (*comp.make_embedded_computations_post_order(known=self._callee_peak, via=_runs), comp):
            if id(c) not in self._callee_peak:
                self._callee_peak[id(c)] = 0  # a call cycle (invalid HLO) counts as nothing
                self._callee_peak[id(c)] = profile(c, model=self).peak_bytes


#: The instructions whose called computations run while they do (a reducer's
#: ``to_apply`` is scalar code; a fusion's body is the fusion itself).
_RUNS_CALLEES = (HloOpcode.WHILE, HloOpcode.CALL, HloOpcode.CONDITIONAL, HloOpcode.ASYNC_START)


def _runs(instr: Instruction) -> tuple[Computation, ...]:
    return tuple(instr.called_computations) if instr.opcode in _RUNS_CALLEES else ()


def profile(comp: Computation, order: Sequence[Instruction] | None = None, *, include_parameters: bool = False,
            model: BufferModel | None = None) -> MemoryProfile:
    """Peak live bytes of ``comp`` run in ``order`` (default: its instruction
    order, which is its schedule when the module ``is_scheduled``)."""
    model = model or BufferModel()
    order = list(comp) if order is None else list(order)
    step = {id(i): n for n, i in enumerate(order)}
    n = len(order)
    start: dict[Buffer, int] = {}
    end: dict[Buffer, int] = {}
    for k, instr in enumerate(order):
        for b in model.defined(instr):
            start[b] = k
            end[b] = k
        for b in model.used(instr):
            if b in end and end[b] < k:
                end[b] = k
    root = comp.root
    if root is not None:
        for b in model.leaves(root).values():
            if b in end:
                end[b] = n - 1
    delta = [0] * (n + 1)
    for b, s in start.items():
        instr_is_param = order[s].opcode is HloOpcode.PARAMETER
        if instr_is_param and not include_parameters:
            continue
        size = model.sizes.get(b, 0)
        delta[s] += size
        delta[end[b] + 1] -= size
    live, peak, at = 0, 0, 0
    for k in range(n):
        live += delta[k]
        here = live + model.callee_peak(order[k])
        if here > peak:
            peak, at = here, k
    del step
    return MemoryProfile(comp.name, peak, order[at].name if order else "", n, include_parameters)


def lower_bound(comp: Computation, *, model: BufferModel | None = None) -> int:
    """No order can peak below this: the largest instruction's operands plus
    results plus callee peak (entry parameters excluded, as in ``profile``)."""
    model = model or BufferModel()
    params = {id(i) for i in comp if i.opcode is HloOpcode.PARAMETER}
    best = 0
    for instr in comp:
        bufs = set(model.defined(instr)) | model.used(instr)
        live = sum(model.sizes.get(b, 0) for b in bufs if b[0] not in params)
        best = max(best, live + model.callee_peak(instr))
    return best
