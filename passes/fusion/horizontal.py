"""Horizontal fusion: batch small independent kernels into one multi-output loop
fusion, like XLA:GPU's HorizontalLoopFusion
(xla/service/gpu/transforms/horizontal_loop_fusion.cc).

Why, and what is batched within which limits: docs/fusion_passes.md#horizontal-fusion
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Protocol, Sequence

from hlo_tools import Computation, HloOpcode, Instruction, Module
from hlo_tools.opcode import NO_KERNEL
from hlo_tools.rewriter import Rewriter

from hlo_analysis.fusion_kind import loop_kind
from hlo_analysis.legality import ALLOW, Decision, fits_in_budget, fusible, fusion_operands, shape_key

from passes.base import FusionPass
from passes.fuel import consume_fuel

from .clusters import Cluster, Clusters, fusible_computations

#: Default bound on a member's output size: 64 KiB (16K f32 elements), about
#: where a loop's run time stops being dominated by its dispatch on XLA:CPU.
MAX_BYTES = 64 * 1024
MAX_MEMBERS = 16
MAX_OPERANDS = 64


class HorizontalProfitability(Protocol):
    def __call__(self, members: Sequence[Instruction], operands: int) -> Decision: ...


def default_horizontal_profitability(members: Sequence[Instruction], operands: int) -> Decision:
    """Kernels saved vs. operands: batching ``len(members)`` kernels saves
    ``len(members) - 1`` dispatches; refuse when the batch would read more than
    4 operands per member on average (a wide argument list costs more per call
    than the dispatch it saves)."""
    if len(members) < 2:
        return Decision.forbid("cost: a batch of one saves no kernel")
    if operands > 4 * len(members):
        return Decision.forbid(f"cost: {operands} operands for {len(members)} kernels")
    return ALLOW


@dataclass(frozen=True)
class HorizontalLog:
    """What the pass decided. ``entries``: (candidate, group leader, decision), the
    leader being the group's first member ("" when the instruction was no
    candidate at all); ``batches``: the member names of each batch formed."""

    entries: list[tuple[str, str, Decision]] = field(default_factory=list)
    batches: list[list[str]] = field(default_factory=list)

    def record(self, candidate: Instruction, group: str, decision: Decision) -> None:
        self.entries.append((candidate.name, group, decision))

    def refused(self) -> dict[tuple[str, str], str]:
        return {(c, g): d.reason for c, g, d in self.entries if not d}


def _candidate(clusters: Clusters, instr: Instruction, max_bytes: int) -> Decision:
    if instr.opcode in NO_KERNEL:
        return Decision.forbid(f"is a {instr.opcode.value}")  # no kernel to save
    if instr is clusters.comp.root:
        return Decision.forbid("is the root")
    if instr.opcode is HloOpcode.FUSION and instr.fusion_kind != "kLoop":
        return Decision.forbid(f"is a {instr.fusion_kind} fusion")
    d = fusible(instr)
    if not d:
        return d
    if not instr.shape.is_array:
        return Decision.forbid("is tuple-shaped (a multi-output fusion)")
    if not instr.users:
        return Decision.forbid("is dead")
    if instr.shape.byte_size > max_bytes:
        return Decision.forbid(f"too large: {instr.shape.byte_size} bytes > {max_bytes}")
    return ALLOW


class _Group:
    __slots__ = ("cluster", "leader", "key", "members")

    def __init__(self, cluster: Cluster, leader: Instruction, key: tuple):
        self.cluster = cluster
        self.leader = leader
        self.key = key
        self.members = [leader]


def plan_horizontal(comp: Computation, *, max_bytes: int = MAX_BYTES, max_members: int = MAX_MEMBERS,
                    max_operands: int = MAX_OPERANDS,
                    profitable: HorizontalProfitability = default_horizontal_profitability,
                    log: HorizontalLog | None = None) -> tuple[Clusters, list[list[Instruction]]]:
    """The planning half of the pass: clusters of ``comp`` with the batches
    merged, and the batches (first fit, in post order, into open groups)."""
    clusters = Clusters(comp)
    groups: list[_Group] = []
    open_by_key: dict[tuple, list[_Group]] = {}
    full_by_key: dict[tuple, _Group] = {}
    for instr in comp.post_order():
        if len(clusters.of(instr)) != 1:
            continue
        d = _candidate(clusters, instr, max_bytes)
        if not d:
            if log is not None and instr.opcode not in NO_KERNEL:
                log.record(instr, "", d)
            continue
        key = shape_key(instr)
        joined = None
        for g in open_by_key.get(key, ()):
            d = _try_join(clusters, g, instr, max_members, max_operands, profitable)
            if log is not None:
                log.record(instr, g.leader.name, d)
            if d:
                joined = g
                break
        if joined is None:
            if log is not None and key in full_by_key:  # why it did not join the latest full group
                log.record(instr, full_by_key[key].leader.name,
                           Decision.forbid(f"cap: group has {max_members} members"))
            elif log is not None:
                other = next((g for g in reversed(groups) if g.key != key and len(g.members) < max_members), None)
                if other is not None:  # why it did not join the latest group of another shape
                    log.record(instr, other.leader.name, Decision.forbid(
                        f"shape mismatch: {_shape_text(instr)} vs {_shape_text(other.leader)}"))
            g = _Group(clusters.of(instr), instr, key)
            groups.append(g)
            open_by_key.setdefault(key, []).append(g)
            if log is not None:
                log.record(instr, instr.name, ALLOW)
        elif len(joined.members) >= max_members:
            open_by_key[key].remove(joined)
            full_by_key[key] = joined
    batches = [g.members for g in groups if len(g.members) > 1]
    if log is not None:
        log.batches.extend([m.name for m in b] for b in batches)
    return clusters, batches


def _shape_text(instr: Instruction) -> str:
    key = shape_key(instr)
    return f"{list(key[0])}" + (f"{{{','.join(map(str, key[1]))}}}" if key[1] is not None else "")


def _try_join(clusters: Clusters, g: _Group, instr: Instruction, max_members: int, max_operands: int,
              profitable: HorizontalProfitability) -> Decision:
    c = clusters.of(instr)
    if len(g.members) >= max_members:
        return Decision.forbid(f"cap: group has {max_members} members")
    if c in clusters.users(g.cluster) or g.cluster in clusters.users(c):
        return Decision.forbid("dependent: uses or feeds a member")
    if clusters.control_joined(g.cluster, c):
        # a horizontal kernel runs its members' elements on different threads: an
        # edge's reader and in-place writer would race there
        return Decision.forbid("dependent: a control edge joins it to a member")
    d = fits_in_budget(g.cluster.members, c.members, max_operands)
    if not d:
        return d
    d = profitable([*g.members, instr], fusion_operands(g.cluster.members, c.members))
    if not d:
        return d
    if clusters.would_cycle(g.cluster, c):
        return Decision.forbid("would create a cycle: a path leads from one member to another")
    if not consume_fuel(lambda: f"batch %{instr.name} with %{g.members[0].name} horizontally"):
        return Decision.forbid("out of fuel")
    g.cluster = clusters.merge(g.cluster, c)
    g.members.append(instr)
    return ALLOW


@dataclass(frozen=True)
class HorizontalFusion(FusionPass):
    """Batches small independent same-shape kernels into multi-output kLoop fusions."""

    name = "horizontal-fusion"
    max_bytes: int = MAX_BYTES
    max_members: int = MAX_MEMBERS
    max_operands: int = MAX_OPERANDS
    profitable: Callable = default_horizontal_profitability
    log: HorizontalLog | None = None

    def run(self, module: Module) -> bool:
        rewriter = Rewriter()
        for comp in fusible_computations(module):
            clusters, batches = plan_horizontal(
                comp, max_bytes=self.max_bytes, max_members=self.max_members, max_operands=self.max_operands,
                profitable=self.profitable, log=self.log)
            if batches:
                clusters.apply(kind=loop_kind, name="horizontal_fusion", rewriter=rewriter)
        return rewriter.changed
