"""Profitability: is a legal fusion worth doing? A pluggable callable per pass.

A profitability function takes the producer, the consumer-side instructions it
would join, and whether it would be duplicated, and returns a ``Decision``. Swap
it to try another heuristic or a cost model::

    ProducerConsumerFusion(profitable=lambda p, users, duplicate: Decision(not duplicate, "no duplication"))

``bytes_saved`` (from ``hlo_analysis.cost``, the one cost model) is the
memory-traffic model ``min_bytes_saved`` and the priority pass share: fusing a
producer removes one write and one read of its result per consumer, and a
duplicated producer re-reads its own operands.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping, Protocol, Sequence

from hlo_tools import HloOpcode, Instruction

from hlo_analysis.cost import bytes_saved
from hlo_analysis.gpu_legality import holds_a_buffer_copy
from hlo_analysis.legality import ALLOW, Decision, is_expensive_producer


class Profitability(Protocol):
    def __call__(self, producer: Instruction, consumers: Sequence[Instruction], duplicate: bool) -> Decision: ...


#: XLA's FusionNodeIndexingEvaluation refuses fusions whose code duplication is
#: too high; we bound the users a duplicated producer may have the same way.
MAX_DUPLICATED_USERS = 16


#: The users a priced duplication may have: a bound on the pricing work (each copy
#: is a would-be kernel priced on its own), far above the corpus's (a mask shared
#: by every layer's attention: 78 on Gemma-2 2B).
MAX_PRICED_COPIES = 1000


#: Producers that recompute bit-identically: pure data movement and constants.
_MOVEMENT = frozenset(
    {HloOpcode.BROADCAST, HloOpcode.IOTA, HloOpcode.CONSTANT, HloOpcode.BITCAST, HloOpcode.RESHAPE,
     HloOpcode.SLICE, HloOpcode.TRANSPOSE, HloOpcode.PARAMETER, HloOpcode.CONVERT}
)


def is_data_movement(instr: Instruction) -> bool:
    """Only moves or converts data (a fusion: only such ops inside)."""
    body = instr.fused_computation
    inner = list(body) if body is not None else [instr]
    return all(i.opcode in _MOVEMENT for i in inner)


def default_profitability(producer: Instruction, consumers: Sequence[Instruction], duplicate: bool) -> Decision:
    """XLA:CPU-like: fuse whenever legal; duplicate only producers that are cheap
    (instruction_fusion.cc: expensive ones are computed once), not into too many
    users, and only data movement: a duplicated multiply/add may be contracted
    into an FMA differently in each copy, and values that must agree (a softmax's
    max and the shift by it) then differ by an ulp, which exp() turns into
    inf/NaN (cpu_instruction_fusion.cc, ComputeGloballyUnfusible). Measured:
    duplicating arithmetic gave NaNs on the corpus train steps."""
    if duplicate:
        if is_expensive_producer(producer):
            return Decision.forbid("cost: expensive producer would be duplicated")
        if producer.user_count > MAX_DUPLICATED_USERS:
            return Decision.forbid(f"cost: producer has {producer.user_count} users, duplication too high")
        if not is_data_movement(producer):
            return Decision.forbid("cost: duplicated arithmetic may not recompute bit-identically")
    return ALLOW


def gpu_profitability(producer: Instruction, consumers: Sequence[Instruction], duplicate: bool) -> Decision:
    """XLA:GPU-like: like XLA:GPU's priority fusion, cheap arithmetic may be
    duplicated into consumers (each GPU kernel recomputes it rather than read it
    back); expensive producers and producers with too many users are not.  The
    time check is the GPU profile's (``gpu_profile.FasterOn``).  A buffer copy is
    never fused away (``gpu_legality.holds_a_buffer_copy``)."""
    if not (d := holds_a_buffer_copy(producer)):
        return d
    if duplicate:
        if is_expensive_producer(producer):
            return Decision.forbid("cost: expensive producer would be duplicated")
        if producer.user_count > MAX_DUPLICATED_USERS:
            return Decision.forbid(f"cost: producer has {producer.user_count} users, duplication too high")
    return ALLOW


def priced_duplication(producer: Instruction, consumers: Sequence[Instruction], duplicate: bool) -> Decision:
    """XLA:GPU's priority fusion: any producer may be duplicated, an ``exp`` too,
    when the time saved is priced with the recomputation in it
    (``gpu_profile.FasterOn.benefit``); only the users are bounded, since each
    copy is priced (``MAX_PRICED_COPIES``); a buffer copy is never fused away
    (``gpu_legality.holds_a_buffer_copy``)."""
    if not (d := holds_a_buffer_copy(producer)):
        return d
    if duplicate and producer.user_count > MAX_PRICED_COPIES:
        return Decision.forbid(f"cost: producer has {producer.user_count} users, duplication too high")
    return ALLOW


def never_duplicate(producer: Instruction, consumers: Sequence[Instruction], duplicate: bool) -> Decision:
    """Fuse only producers whose every user is in the fusion."""
    return Decision.forbid("cost: duplication disabled") if duplicate else ALLOW


def min_bytes_saved(threshold: int) -> Callable[[Instruction, Sequence[Instruction], bool], Decision]:
    """A profitability that asks ``bytes_saved`` to reach ``threshold`` bytes."""

    def decide(producer: Instruction, consumers: Sequence[Instruction], duplicate: bool) -> Decision:
        base = default_profitability(producer, consumers, duplicate)
        if not base:
            return base
        saved = bytes_saved(producer, consumers, duplicate)
        return ALLOW if saved >= threshold else Decision.forbid(f"cost: saves {saved} bytes < {threshold}")

    return decide


#: The reason a forced "keep apart" gives (``ForcedEdges``); a search flips it back.
KEPT_APART = "decided: kept apart by the decision set"


@dataclass(frozen=True)
class ForcedEdges:
    """Fusion decisions fixed per edge, ``(producer name, consumer name) -> fuse?``,
    in front of a pass's own profitability: how a tuned decision set
    (``passes.fusion.decisions``) is replayed.  Legality is still checked first,
    so forcing an illegal fusion does nothing; an edge not listed falls through
    to the pass's rule."""

    edges: Mapping[tuple[str, str], bool]

    def decide(self, producer: Instruction, consumers: Sequence[Instruction]) -> Decision | None:
        """The forced decision for fusing ``producer`` into ``consumers`` (the
        first listed edge wins), or None when none of its edges is listed."""
        for c in consumers:
            fuse = self.edges.get((producer.name, c.name))
            if fuse is not None:
                return ALLOW if fuse else Decision.forbid(KEPT_APART)
        return None
