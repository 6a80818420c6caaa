"""Reduction input fusion: a sum reduction absorbs the elementwise chain that
feeds it, even when the chain's value has other users, by recomputing the chain
inside the reduction (XLA's input fusion; softmax, RMSNorm/LayerNorm and
cross-entropy are the patterns it is for).

Why only sums, and the rules: docs/fusion_passes.md#reduction-epilogue-fusion
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from hlo_tools import HloOpcode, Instruction, Module
from hlo_tools.opcode import ELEMENTWISE
from hlo_tools.rewriter import Rewriter

from hlo_analysis.fusion_kind import loop_kind
from hlo_analysis.legality import ALLOW, Decision

from passes.base import FusionPass

from .clusters import Clusters, fusible_computations
from .producer_consumer import FusionLog, grow
from .profitability import default_profitability

#: Users a duplicated producer may have (each keeps a copy of the chain).
MAX_USERS = 4

_MOVEMENT = frozenset({HloOpcode.BROADCAST, HloOpcode.BITCAST, HloOpcode.RESHAPE, HloOpcode.CONVERT,
                       HloOpcode.CONSTANT, HloOpcode.IOTA, HloOpcode.SLICE, HloOpcode.TRANSPOSE})


def _inner(instr: Instruction) -> list[Instruction]:
    body = instr.fused_computation
    return [i for i in body if i.opcode is not HloOpcode.PARAMETER] if body is not None else [instr]


def is_add_reduce(instr: Instruction) -> bool:
    """A reduce whose reducer adds its two parameters (a sum)."""
    if instr.opcode is not HloOpcode.REDUCE or instr.operand_count != 2:
        return False
    reducer = instr.called_computations[0]
    root = reducer.root
    return root.opcode is HloOpcode.ADD and all(o.opcode is HloOpcode.PARAMETER for o in root.operands)


def sums_only(instrs: Sequence[Instruction]) -> bool:
    """Holds an add-reduction and no other kind of reduction."""
    reduces = [i for m in instrs for i in _inner(m) if i.opcode in (HloOpcode.REDUCE, HloOpcode.REDUCE_WINDOW)]
    return bool(reduces) and all(is_add_reduce(r) for r in reduces)


def recomputable(instr: Instruction) -> bool:
    """Elementwise or data movement only: recomputing it per use reads each input element once."""
    return all(i.opcode in ELEMENTWISE or i.opcode in _MOVEMENT for i in _inner(instr))


@dataclass
class _Budget:
    """The profitability of one reduction's growth: duplication allowed, up to a budget."""

    left: int

    def __call__(self, producer: Instruction, consumers: Sequence[Instruction], duplicate: bool) -> Decision:
        if not duplicate:
            return ALLOW
        plain = default_profitability(producer, consumers, duplicate)
        if plain:
            cost = 0  # data movement: what producer-consumer fusion would duplicate anyway
        elif not recomputable(producer):
            return Decision.forbid("cost: only elementwise producers are recomputed in a reduction")
        elif producer.user_count > MAX_USERS:
            return Decision.forbid(f"cost: producer has {producer.user_count} users > {MAX_USERS}")
        else:
            cost = len(_inner(producer))
        if cost > self.left:
            return Decision.forbid("cost: recomputation budget of this reduction spent")
        self.left -= cost
        return ALLOW


@dataclass(frozen=True)
class ReductionEpilogueFusion(FusionPass):
    """Sum reductions absorb (recompute) their elementwise producer chains."""

    name = "reduction-epilogue-fusion"
    max_duplicated: int = 8
    log: FusionLog | None = None

    def run(self, module: Module) -> bool:
        rewriter = Rewriter()
        for comp in fusible_computations(module):
            clusters = Clusters(comp)
            grew = False
            for consumer in reversed(comp.post_order()):
                if consumer.parent is not comp or len(clusters.of(consumer)) != 1 or not sums_only([consumer]):
                    continue
                grew |= grow(clusters, clusters.of(consumer), _Budget(self.max_duplicated), self.log)
            if grew:
                clusters.apply(kind=loop_kind, name="reduction_fusion", rewriter=rewriter)
        return rewriter.changed
