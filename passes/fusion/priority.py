"""Priority fusion: a greedy max-benefit fusion queue, a Python prototype of
XLA:GPU's PriorityFusion (xla/service/gpu/transforms/priority_fusion.cc).

Why a queue, and how it decides: docs/fusion_passes.md#priority-fusion
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field
from functools import partial
from typing import Callable

from hlo_tools import Computation, HloOpcode, Instruction, Module
from hlo_tools.rewriter import Rewriter

from hlo_analysis import devices
from hlo_analysis.cost import bytes_saved, result_bytes, reread_bytes
from hlo_analysis.fusion_kind import gpu_fusion_kind, loop_kind
from hlo_analysis.legality import ALLOW, Decision, can_join, fits_in_budget, fusible, keeps_loop_state_order, shape_key
from passes.base import FusionPass
from passes.cse import CommonSubexpressionElimination
from passes.fuel import consume_fuel
from .clusters import Cluster, Clusters, fusible_computations
from .gpu_profile import FasterOn
from .producer_consumer import FusionLog
from .profitability import Profitability, default_profitability, priced_duplication
from .triton_elementwise import keeps_triton_joins


@dataclass(frozen=True)
class Candidate:
    """One queued fusion: ``producer`` (the value the producer cluster defines)
    fused into ``groups`` (per consumer cluster, the members that read it).
    ``duplicate``: the producer is copied into each group instead of moved;
    ``keeps_original``: some users (or the root) still need the original;
    ``multi_output``: the producer cluster moves into the one consumer cluster
    and stays an output of it (a multi-output fusion, nothing duplicated).
    ``targets``: all members of each group's cluster, and ``roots`` each one's
    single output (None when it has several), for costs that price whole
    kernels (``gpu_profile.FasterOn.benefit``)."""

    producer: Instruction
    members: tuple[Instruction, ...]
    groups: tuple[tuple[Instruction, ...], ...]
    duplicate: bool
    keeps_original: bool
    multi_output: bool = False
    targets: tuple[tuple[Instruction, ...], ...] = ()
    roots: tuple[Instruction | None, ...] = ()

    @property
    def consumers(self) -> tuple[Instruction, ...]:
        return tuple(m for g in self.groups for m in g)


#: A cost function: the benefit of a candidate (positive means worth fusing).
Cost = Callable[[Candidate], float]

#: A further check on fusing a producer cluster into a consumer cluster (its members,
#: then the consumer's members and outputs), as ``triton_elementwise.keeps_triton_joins``.
JoinCheck = Callable[[list[Instruction], list[Instruction], list[Instruction]], Decision]


def _lone_bitcast(members) -> bool:
    """A cluster of one bitcast (XLA:GPU's bitcast rules treat it apart)."""
    return len(members) == 1 and members[0].opcode is HloOpcode.BITCAST


def default_cost(c: Candidate) -> float:
    """Bytes of memory traffic saved: ``bytes_saved`` (the producer's result is
    no longer written and read back), minus the duplication cost: every copy
    beyond the first reads the producer's operands again. When the last user is
    covered the original is gone, so a full duplication saves its write too.
    A multi-output merge saves the reads of the consumers it joins; the result
    is still written for the other users."""
    if c.multi_output:
        return result_bytes(c.producer) * len(c.consumers)
    saved = bytes_saved(c.producer, c.consumers, c.keeps_original)
    if c.duplicate:
        # bytes_saved charged (or, moving the producer, did not need to charge)
        # one copy's operand reads; each further copy reads them again
        saved -= (len(c.groups) - 1) * reread_bytes(c.producer, wrapped_broadcast=True)
    return saved


@dataclass(frozen=True)
class PriorityLog(FusionLog):
    """``FusionLog`` (final decision per (producer, consumer) pair) plus the
    fusion steps in the order the queue took them: (producer, consumers, benefit,
    "merge" or "duplicate")."""

    steps: list[tuple[str, tuple[str, ...], float, str]] = field(default_factory=list)


class PriorityQueueFusion:
    """The planning half of the pass on one computation: fills ``clusters``."""

    def __init__(self, comp: Computation, cost: Cost = default_cost, profitable: Profitability = default_profitability,
                 max_operands: int = 0, multi_output: bool = False, duplicate_clusters: bool = False,
                 xla_bitcasts: bool = False, join_check: JoinCheck | None = None, expensive_reuse: bool = True):
        self.comp = comp
        self.expensive_reuse = expensive_reuse
        self.join_check = join_check
        self.xla_bitcasts = xla_bitcasts
        self.clusters = Clusters(comp)
        self.cost = cost
        self.profitable = profitable
        self.max_operands = max_operands
        self.multi_output = multi_output
        self.duplicate_clusters = duplicate_clusters
        self._version: dict[int, int] = {}
        self._heap: list[tuple[float, int, int, int, Cluster]] = []
        self._tie = 0
        # final decision per (producer, consumer) names; fused pairs never revert
        self.decisions: dict[tuple[str, str], Decision] = {}
        self.steps: list[tuple[str, tuple[str, ...], float, str]] = []

    # -- evaluating a producer -------------------------------------------------------
    def _refuse(self, producer: Instruction, consumer: Instruction, reason: str) -> None:
        key = (producer.name, consumer.name)
        if self.decisions.get(key, Decision.forbid("")).ok:
            return
        self.decisions[key] = Decision.forbid(reason)

    def _alive(self, c: Cluster) -> bool:
        return bool(c.members) and self.clusters.of(c.members[0]) is c

    def candidate(self, pc: Cluster) -> Candidate | None:
        """The fusion of ``pc`` into its user clusters, or None (refusals logged)."""
        clusters = self.clusters
        outputs = clusters.outputs(pc)
        if len(outputs) != 1:
            return None  # multi-output producers (and dead code) are not moved
        prod = outputs[0]
        if prod.opcode in (HloOpcode.PARAMETER, HloOpcode.TUPLE, HloOpcode.GET_TUPLE_ELEMENT):
            return None
        d = fusible(prod)
        if not d:
            for u in prod.users:
                self._refuse(prod, u, f"producer {d.reason}")
            return None
        groups: list[tuple[Instruction, ...]] = []
        blocked = False
        grown = len(pc.members) > 1
        for uc in clusters.users(pc):
            if not clusters.outputs(uc):
                continue  # a producer duplicated into all its users: dead, removed at the end
            if self.xla_bitcasts and _lone_bitcast(uc.members):
                self._refuse(prod, uc.members[0], "consumer is a lone bitcast: XLA:GPU keeps reading the producer")
                blocked = True
                continue
            group = tuple(m for m in uc.members if prod in m.operands)
            d = self._group_legal(pc, prod, uc, group)
            if d:
                groups.append(group)
            else:
                blocked = True
        if not groups:
            return None
        keeps = blocked or prod is self.comp.root
        duplicate = keeps or len(groups) > 1
        consumers = tuple(m for g in groups for m in g)
        if duplicate:
            if grown and not self.duplicate_clusters:
                d = Decision.forbid("producer cluster has several users: only single instructions are duplicated")
            elif grown and any(m.shape.is_tuple for m in pc.members):
                d = Decision.forbid("producer cluster has a multi-output member: not duplicated")
            elif any(m.has_control_dependencies for m in pc.members) and any(
                    clusters.would_cycle(pc, clusters.of(g[0])) for g in groups):
                d = Decision.forbid("producer has control edges that a copy in its consumer would break")
            else:
                d = ALLOW
            for m in pc.members if d else ():
                d = self.profitable(m, consumers, True)
                for g in groups if d else ():
                    d = keeps_loop_state_order(m, clusters.of(g[0]).members, moved=False,
                                               writers=clusters.loop_state_writers)
                    if not d:
                        break
                if not d:
                    break
            if not d and self.multi_output and prod is not self.comp.root:
                for m in consumers:
                    self._refuse(prod, m, d.reason)
                return self._multi_output_candidate(pc, prod, groups)
        else:
            uc = clusters.of(groups[0][0])
            d = Decision.forbid("would create a cycle") if clusters.would_cycle(pc, uc) else self.profitable(prod, consumers, False)
            if d:
                d = self._moves_in_order(pc, uc)
        if not d:
            for m in consumers:
                self._refuse(prod, m, d.reason)
            return None
        return Candidate(prod, tuple(pc.members), tuple(groups), duplicate, keeps, **self._targets(groups))

    def _targets(self, groups) -> dict[str, tuple]:
        """``Candidate.targets`` and ``roots`` of ``groups``."""
        ucs = [self.clusters.of(g[0]) for g in groups]
        outs = [self.clusters.outputs(uc) for uc in ucs]
        return {"targets": tuple(tuple(uc.members) for uc in ucs),
                "roots": tuple(o[0] if len(o) == 1 else None for o in outs)}

    def _multi_output_candidate(self, pc: Cluster, prod: Instruction,
                                groups: list[tuple[Instruction, ...]]) -> Candidate | None:
        """Instead of duplicating, move ``pc`` into the consumer cluster that reads
        ``prod`` most and keep ``prod`` as an extra output (XLA:CPU's multi-output
        loop fusion needs every output with the same dimensions and layout)."""

        key = shape_key(prod)
        for group in sorted(groups, key=len, reverse=True):  # the most reads saved first
            uc = self.clusters.of(group[0])
            other = next((o for o in self.clusters.outputs(uc) if shape_key(o) != key), None)
            if other is not None:
                d = Decision.forbid(f"shape mismatch: multi-output with %{other.name} needs equal dimensions")
            elif self.clusters.would_cycle(pc, uc):
                d = Decision.forbid("would create a cycle")
            else:
                d = self._moves_in_order(pc, uc)
                if d:
                    return Candidate(prod, tuple(pc.members), (group,), False, True, multi_output=True,
                                     **self._targets([group]))
            for m in group:
                self._refuse(prod, m, d.reason)
        return None

    def _moves_in_order(self, pc: Cluster, uc: Cluster) -> Decision:
        """``keeps_loop_state_order`` for every member of ``pc`` moved into ``uc``
        (a writer moved along with its readers is fine)."""
        both = [*uc.members, *pc.members]
        for m in pc.members:
            d = keeps_loop_state_order(m, both, moved=True, writers=self.clusters.loop_state_writers)
            if not d:
                return d
        return ALLOW

    def _group_legal(self, pc: Cluster, prod: Instruction, uc: Cluster, group: tuple[Instruction, ...]) -> Decision:
        """May ``prod`` (with its cluster ``pc``) join ``uc``? (refusal logged)"""
        d = can_join(prod, uc.members, producer_region=pc.members, reuse=self.expensive_reuse)
        if d:
            d = fits_in_budget(pc.members, uc.members, self.max_operands)
        if d and self.join_check is not None:
            d = self.join_check(pc.members, uc.members, self.clusters.outputs(uc))
        if not d:
            self._refuse(prod, d.consumer or group[0], d.reason)
        return d

    def _benefit(self, cand: Candidate) -> float:
        """``cost``; under ``xla_bitcasts`` a lone bitcast goes first, as XLA:GPU's
        ``CalculateProducerPriority`` queues it (a bitcast costs nothing wherever it lands)."""
        if self.xla_bitcasts and _lone_bitcast(cand.members):
            return math.inf
        return self.cost(cand)

    def _push(self, pc: Cluster) -> None:
        v = self._version.get(id(pc), 0) + 1
        self._version[id(pc)] = v
        cand = self.candidate(pc)
        if cand is None:
            return
        benefit = self._benefit(cand)
        if benefit <= 0:
            for m in cand.consumers:
                self._refuse(cand.producer, m, f"cost: benefit {benefit:g} <= 0")
            return
        self._tie += 1
        # max-benefit first; ties: earlier clusters first (deterministic)
        heapq.heappush(self._heap, (-benefit, pc.index, self._tie, v, pc))

    # -- the loop ----------------------------------------------------------------
    def run(self) -> Clusters:
        clusters = self.clusters
        for c in sorted(clusters, key=lambda c: c.index):
            self._push(c)
        while self._heap:
            neg, _, _, v, pc = heapq.heappop(self._heap)
            if not self._alive(pc) or self._version.get(id(pc)) != v:
                continue  # stale: recomputed or merged since it was queued
            cand = self.candidate(pc)
            if cand is None:
                continue
            benefit = self._benefit(cand)
            if benefit <= 0:
                continue
            if not consume_fuel(lambda: f"fuse %{cand.producer.name} into "
                                        + ", ".join("%" + m.name for m in cand.consumers)):
                continue  # out of fuel: this candidate is dropped, as XLA's PriorityFusion does
            touched = self._fuse(pc, cand, benefit)
            for c in touched:
                if self._alive(c):
                    self._push(c)
        return clusters

    def _fuse(self, pc: Cluster, cand: Candidate, benefit: float) -> list[Cluster]:
        clusters = self.clusters
        prod = cand.producer
        for m in cand.consumers:
            self.decisions[(prod.name, m.name)] = ALLOW
        self.steps.append((prod.name, tuple(m.name for m in cand.consumers), benefit,
                           "duplicate" if cand.duplicate else "multi-output" if cand.multi_output else "merge"))
        if not cand.duplicate:
            merged = clusters.merge(clusters.of(cand.groups[0][0]), pc)
            touched = [merged, *clusters.operands(merged)]
            if cand.multi_output:  # the producer's other users now read the merged cluster
                touched.extend(clusters.users(merged))
            return touched
        touched: list[Cluster] = [pc]
        for group in cand.groups:
            uc = clusters.of(group[0])
            clusters.duplicate_cluster_into(pc, uc)
            touched.append(uc)
            touched.extend(clusters.operands(uc))
        return touched

    def log_into(self, log: FusionLog) -> None:
        for (p, c), d in self.decisions.items():
            log.entries.append((p, c, d))
        if isinstance(log, PriorityLog):
            log.steps.extend(self.steps)


@dataclass(frozen=True)
class PriorityFusion(FusionPass):
    """Greedy max-benefit producer-into-consumers fusion (XLA:GPU's PriorityFusion),
    with a pluggable cost (``cost``) and duplication rule (``profitable``)."""

    name = "priority-fusion"
    cost: Callable = default_cost
    profitable: Callable = default_profitability
    kind: Callable = loop_kind
    log: FusionLog | None = None
    max_operands: int = 0  # 0: unbounded
    #: merge producers that may not be duplicated into one consumer as an extra output
    multi_output: bool = False
    #: duplicate a producer that is already a fusion of several instructions (XLA:GPU does)
    duplicate_clusters: bool = False
    #: XLA:GPU's bitcast rules: a lone bitcast fuses first, nothing fuses into a lone bitcast
    xla_bitcasts: bool = False
    #: refuse an expensive producer where the fusion reads its elements more than once
    #: (off where ``cost`` prices the recomputation, as XLA:GPU's priority fusion does)
    expensive_reuse: bool = True

    def run(self, module: Module) -> bool:
        rewriter = Rewriter()
        cost = self.run_cost()
        for comp in fusible_computations(module):
            planner = PriorityQueueFusion(comp, cost, self.profitable, self.max_operands, self.multi_output,
                                          self.duplicate_clusters, self.xla_bitcasts, self.run_join_check(),
                                          self.expensive_reuse)
            clusters = planner.run()
            if self.log is not None:
                planner.log_into(self.log)
            for fusion in clusters.apply(kind=self.kind, name="priority_fusion", rewriter=rewriter):
                # a producer copied into two clusters that later merged is in the body twice
                CommonSubexpressionElimination().run_on_computation(fusion.fused_computation)
        return rewriter.changed

    def run_cost(self) -> Cost:
        """The cost of one run (a cost that memoizes is made fresh per run)."""
        return self.cost

    def run_join_check(self) -> JoinCheck | None:
        """A further check on each producer-consumer join of one run, if any."""
        return None


@dataclass(frozen=True)
class GpuPriorityFusion(PriorityFusion):
    """Priority fusion under the XLA:GPU profile, as XLA:GPU decides: a producer
    goes into all its consumers at once (duplicated where it has several), priced
    by the GPU roofline of ``target`` on the kernels apart against the kernels it
    makes (``gpu_profile.FasterOn.benefit``), the largest time saved first.  A
    producer with several consumers leaves its own kernel only when every one of
    them takes it, which fusing consumer by consumer never sees (softmax's
    ``exp(x - max)`` read by its sum and its divide)."""

    name = "gpu-priority-fusion"
    profitable: Callable = priced_duplication
    kind: Callable = gpu_fusion_kind
    duplicate_clusters: bool = True
    xla_bitcasts: bool = True
    expensive_reuse: bool = False
    #: leave out of a Triton fusion's prologue and epilogue what stock leaves out (``keeps_triton_joins``)
    triton_joins: bool = True
    target: str = "h100"

    def run_cost(self) -> Cost:
        return FasterOn(self.target).benefit

    def run_join_check(self) -> JoinCheck | None:
        return partial(keeps_triton_joins, device=devices.load(self.target)) if self.triton_joins else None
