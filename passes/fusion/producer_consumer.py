"""Producer-consumer (loop) fusion, a Python prototype of XLA's InstructionFusion
(xla/service/instruction_fusion.cc with the CPU rules of
xla/service/cpu/cpu_instruction_fusion.cc).

Consumers are visited in reverse post order (users before operands); each one's
cluster then absorbs its producers while they are legal (``legality.can_join``, ``fits_in_budget``)
and profitable (the pluggable ``profitable``). A producer whose users all sit in
the cluster moves in; one with other users is duplicated into the cluster when
cheap, like XLA does, so the memory round-trip disappears for this consumer.
Every decision is recorded in ``log`` (when given) so tests and users can see
what was fused and what was refused, and why.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from hlo_tools import Computation, HloOpcode, Instruction, Module
from hlo_tools.rewriter import Rewriter

from hlo_analysis.fusion_kind import gpu_fusion_kind, loop_kind
from hlo_analysis.legality import ALLOW, Decision, can_join, fits_in_budget, fusible, keeps_loop_state_order

from passes.base import FusionPass
from passes.fuel import consume_fuel

from .clusters import Cluster, Clusters, fusible_computations
from .gpu_profile import FasterOn
from .profitability import ForcedEdges, Profitability, default_profitability, gpu_profitability


@dataclass(frozen=True)
class FusionLog:
    """What a fusion pass decided: (producer, consumer, decision) triples."""

    entries: list[tuple[str, str, Decision]] = field(default_factory=list)

    def record(self, producer: Instruction, consumer: Instruction, decision: Decision) -> None:
        self.entries.append((producer.name, consumer.name, decision))

    def refused(self) -> dict[tuple[str, str], str]:
        return {(p, c): d.reason for p, c, d in self.entries if not d}

    def fused(self) -> list[tuple[str, str]]:
        return [(p, c) for p, c, d in self.entries if d]


#: A profitability that sees the whole cluster: (clusters, cluster, producer, duplicate) -> Decision
#: (``gpu_profile.FasterOn.producer`` prices the cluster with and without the producer).
ClusterProfitability = Callable[[Clusters, Cluster, Instruction, bool], Decision]


def grow(clusters: Clusters, cluster: Cluster, profitable: Profitability, log: FusionLog | None,
         max_operands: int = 0, priced: ClusterProfitability | None = None) -> bool:
    """Absorbs producers into ``cluster`` until none qualifies; True if it grew.
    ``priced``, when given, must agree too (after ``profitable``)."""
    grew = False
    refused: set[int] = set()
    while True:
        candidates = [
            o for o in clusters.external_operands(cluster) if id(o) not in refused and len(clusters.of(o)) == 1
        ]
        progress = False
        for producer in candidates:
            consumer = next(m for m in cluster.members if producer in m.operands)
            decision = can_join(producer, cluster.members)
            if decision:
                decision = fits_in_budget(cluster.members, (producer,), max_operands)
            duplicate = False
            if decision:
                others = [u for u in producer.users if clusters.of(u) is not cluster]
                duplicate = bool(others) or producer is clusters.comp.root
                users = tuple(m for m in cluster.members if producer in m.operands)
                decision = keeps_loop_state_order(producer, cluster.members, moved=not duplicate,
                                                  writers=clusters.loop_state_writers)
                # moved, a producer without control edges leaves no path out (every user is in the cluster)
                if decision and producer.has_control_dependencies and clusters.would_cycle(cluster, clusters.of(producer)):
                    decision = Decision.forbid("would create a cycle")  # through a control edge, or one it cannot keep
                if decision:
                    decision = profitable(producer, users, duplicate)
                if decision and priced is not None:
                    decision = priced(clusters, cluster, producer, duplicate)
                if decision and not consume_fuel(lambda: f"fuse %{producer.name} into %{consumer.name}"
                                                 + (" (duplicated)" if duplicate else "")):
                    decision = Decision.forbid("out of fuel")
            if log is not None:
                log.record(producer, consumer, decision)
            if not decision:
                refused.add(id(producer))
                continue
            if duplicate:
                clusters.duplicate_into(producer, cluster)
            else:
                clusters.merge(cluster, clusters.of(producer))
            grew = progress = True
            break  # the operand list changed
        if not progress:
            return grew


def _alone(cluster: Cluster, instr: Instruction) -> bool:
    """``instr`` has not joined a fusion yet (a multi-output fusion's
    get-tuple-elements belong to it and do not count)."""
    return all(m is instr or m.opcode is HloOpcode.GET_TUPLE_ELEMENT for m in cluster.members)


def fuse_producers_into_consumers(
    comp: Computation, profitable: Profitability = default_profitability, log: FusionLog | None = None,
    max_operands: int = 0, priced: ClusterProfitability | None = None,
) -> Clusters:
    """The planning half of the pass: clusters of ``comp`` after loop fusion."""
    clusters = Clusters(comp)
    for consumer in reversed(comp.post_order()):
        if consumer.parent is not comp or not _alone(clusters.of(consumer), consumer) or not fusible(consumer):
            continue
        if consumer.opcode is HloOpcode.CONSTANT:
            continue
        grow(clusters, clusters.of(consumer), profitable, log, max_operands, priced)
    return clusters


@dataclass(frozen=True)
class ProducerConsumerFusion(FusionPass):
    """Loop fusion of producers into consumers (XLA's InstructionFusion)."""

    name = "producer-consumer-fusion"
    profitable: Callable = default_profitability
    kind: Callable = loop_kind
    log: FusionLog | None = None
    max_operands: int = 0  # 0: unbounded
    decided: ForcedEdges | None = None  # edges whose decision is fixed (a replayed decision set)

    def run(self, module: Module) -> bool:
        rewriter = Rewriter()
        profitable, priced = self.profitable, self.cluster_profitability()
        if self.decided is not None:
            profitable, priced = _forced(self.decided, profitable, priced)
        for comp in fusible_computations(module):
            clusters = fuse_producers_into_consumers(comp, profitable, self.log, self.max_operands, priced)
            clusters.apply(kind=self.kind, name="loop_fusion", rewriter=rewriter)
        return rewriter.changed

    def cluster_profitability(self) -> ClusterProfitability | None:
        """A check of each decision against the whole cluster, made fresh per run (None: none)."""
        return None


def _forced(decided: ForcedEdges, profitable: Profitability,
            priced: ClusterProfitability | None) -> tuple[Profitability, ClusterProfitability | None]:
    """``profitable`` and ``priced`` with ``decided``'s edges answered first: a
    forced fusion skips both, a forced "apart" refuses in the first."""

    def first(producer: Instruction, users, duplicate: bool) -> Decision:
        d = decided.decide(producer, users)
        return d if d is not None else profitable(producer, users, duplicate)

    def then(clusters: Clusters, cluster: Cluster, producer: Instruction, duplicate: bool) -> Decision:
        users = [m for m in cluster.members if producer in m.operands]
        if decided.decide(producer, users) is not None:
            return ALLOW
        return priced(clusters, cluster, producer, duplicate)

    return first, (then if priced is not None else None)


@dataclass(frozen=True)
class GpuProducerConsumerFusion(ProducerConsumerFusion):
    """Producer-consumer fusion under the XLA:GPU profile (``gpu_profile``): a
    producer joins its consumers only when the GPU roofline of ``target``
    predicts the fusion faster than the kernels apart; fusions are kInput when a
    reduction is their hero, as XLA:GPU writes them."""

    name = "gpu-producer-consumer-fusion"
    profitable: Callable = gpu_profitability
    kind: Callable = gpu_fusion_kind
    target: str = "h100"

    def cluster_profitability(self) -> ClusterProfitability:
        return FasterOn(self.target).producer
