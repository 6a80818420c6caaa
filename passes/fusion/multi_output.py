"""Sibling (multi-output) fusion: consumers that read the same value become one
fusion, so the value is read once and one kernel runs instead of two, like the
sibling half of XLA's multi-output fusion (xla/service/gpu/transforms/multi_output_fusion.cc).

The merge rules: docs/fusion_passes.md#multi-output-fusion
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from hlo_tools import HloOpcode, Instruction, Module
from hlo_tools.opcode import ELEMENTWISE
from hlo_tools.rewriter import Rewriter

from hlo_analysis.fusion_kind import gpu_fusion_kind, loop_kind
from hlo_analysis.gpu_legality import gpu_outputs_compatible, hero_key, kernel_roots
from hlo_analysis.legality import ALLOW, Decision, fits_in_budget, fusible, shape_key

from passes.base import FusionPass
from passes.fuel import consume_fuel

from .clusters import Cluster, Clusters, fusible_computations
from .gpu_profile import FasterOn
from .producer_consumer import FusionLog

#: A sibling profitability: (shared value, cluster a, cluster b, clusters) -> Decision.
SiblingProfitability = Callable[[Instruction, Cluster, Cluster, Clusters], Decision]

#: XLA's fusions stop growing at a bounded operand count (kMaxOperandsAndOutputsPerFusion
#: on GPU); more parameters than this costs more than the kernel saved.
MAX_OPERANDS = 16


@dataclass(frozen=True)
class SiblingBound:
    """Sibling profitability: merge while the fusion keeps at most
    ``max_operands`` operands, small enough to emit well."""

    max_operands: int = MAX_OPERANDS

    def __call__(self, shared: Instruction, a: Cluster, b: Cluster, clusters: Clusters) -> Decision:
        return fits_in_budget(a.members, b.members, self.max_operands)


#: The default: XLA's bound.
default_sibling_profitability = SiblingBound()


def _members_fusible(c: Cluster) -> Decision:
    for m in c.members:
        if m.opcode is HloOpcode.GET_TUPLE_ELEMENT:
            continue
        d = fusible(m)
        if not d:
            return Decision.forbid(f"%{m.name} {d.reason}")
        if _has_dus(m):
            return Decision.forbid(f"%{m.name} is an in-place dynamic-update-slice")
    return ALLOW


def _has_dus(instr: Instruction) -> bool:
    body = instr.fused_computation
    inner = list(body) if body is not None else [instr]
    return any(i.opcode is HloOpcode.DYNAMIC_UPDATE_SLICE for i in inner)


def _output_keys(clusters: Clusters, c: Cluster) -> set[tuple]:
    return {shape_key(o) for o in clusters.outputs(c) if o.shape.is_array}


def can_fuse_siblings(clusters: Clusters, a: Cluster, b: Cluster, *, backend: str = "cpu") -> Decision:
    """The legality half: may clusters ``a`` and ``b`` become one multi-output fusion
    on ``backend``? (XLA:CPU: outputs of one shape; XLA:GPU: heroes that agree,
    ``gpu_legality.gpu_outputs_compatible``.)"""
    for side, c in (("first", a), ("second", b)):
        d = _members_fusible(c)
        if not d:
            return Decision.forbid(f"{side} sibling: {d.reason}")
    if b in clusters.users(a) or a in clusters.users(b):
        return Decision.forbid("one sibling uses the other (producer-consumer fusion decides that)")
    if backend == "gpu":
        d = gpu_outputs_compatible(clusters.outputs(a) + clusters.outputs(b))
        if not d:
            return d
    else:
        keys = _output_keys(clusters, a) | _output_keys(clusters, b)
        if len(keys) > 1:
            return Decision.forbid("outputs have different shapes: "
                                   + ", ".join(sorted("[" + ",".join(map(str, d)) + "]" + ("{" + ",".join(map(str, l)) + "}" if l else "")
                                                      for d, l in keys)))
    if clusters.would_cycle(a, b):
        return Decision.forbid("would create a cycle")
    return ALLOW


def _loop_users(clusters: Clusters, value: Instruction) -> list[Cluster]:
    """The clusters reading ``value`` (tuples and get-tuple-elements are plumbing)."""
    out: dict[int, Cluster] = {}
    for u in value.users:
        if u.opcode in (HloOpcode.GET_TUPLE_ELEMENT, HloOpcode.TUPLE):
            continue
        c = clusters.of(u)
        out.setdefault(id(c), c)
    return list(out.values())


def fuse_siblings(clusters: Clusters, profitable: SiblingProfitability = default_sibling_profitability,
                  log: FusionLog | None = None, backend: str = "cpu") -> int:
    """Merges sibling clusters of ``clusters.comp`` in place; returns the merges done.
    Per shared value, the first consumer takes every sibling it may; the ones it
    refused try again among themselves."""
    merges = 0
    for value in clusters.comp.post_order():
        if value.opcode is HloOpcode.CONSTANT and value.shape.is_array and value.shape.num_elements == 1:
            continue
        pending = _loop_users(clusters, value)
        while len(pending) >= 2:
            base, refused = pending[0], []
            for other in pending[1:]:
                d = can_fuse_siblings(clusters, base, other, backend=backend)
                if d:
                    d = profitable(value, base, other, clusters)
                if d and not consume_fuel(lambda: f"fuse siblings %{_head(clusters, base).name} and "
                                                  f"%{_head(clusters, other).name} (users of %{value.name})"):
                    d = Decision.forbid("out of fuel")
                if log is not None:
                    log.record(_head(clusters, base), _head(clusters, other), d)
                if d:
                    base = clusters.merge(base, other)
                    merges += 1
                else:
                    refused.append(other)
            pending = refused
    return merges


def _reads_elementwise(reader: Instruction, value: Instruction) -> bool:
    """Does ``reader`` use ``value`` element for element (so a fusion of the two
    computes each element of ``value`` once)? Inside a fusion: every use of the
    parameter ``value`` feeds is elementwise or a bitcast, at ``value``'s size."""
    body = reader.fused_computation
    if body is None:
        uses = [reader]
    else:
        params = [body.parameter(i) for i, o in enumerate(reader.operands) if o is value]
        uses = [u for p in params for u in p.users]
    n = value.shape.num_elements if value.shape.is_array else -1
    return all((u.opcode in ELEMENTWISE or u.opcode is HloOpcode.BITCAST)
               and u.shape.is_array and u.shape.num_elements == n for u in uses)


def can_fuse_producer_consumer(clusters: Clusters, producer: Cluster, consumer: Cluster) -> Decision:
    """The legality half of a producer-consumer multi-output fusion on XLA:GPU: may
    ``producer`` move into ``consumer`` and stay an output of it for its other
    users? Both loops (no reduction hero: XLA emits a reduction's side outputs only
    at its input's shape), every output on one index space, the producer's values
    read element for element (nothing recomputed), and no path between the two
    through a third kernel."""
    for side, c in (("producer", producer), ("consumer", consumer)):
        d = _members_fusible(c)
        if not d:
            return Decision.forbid(f"{side}: {d.reason}")
    outputs = clusters.outputs(producer) + clusters.outputs(consumer)
    if any(hero_key(v)[1] is not None for o in outputs for v in kernel_roots(o)):
        return Decision.forbid("a reduction: only loops share a kernel as producer and consumer")
    d = gpu_outputs_compatible(outputs)
    if not d:
        return d
    inside = {id(m) for m in producer.members}
    for m in consumer.members:
        for o in m.operands:
            if id(o) in inside and not _reads_elementwise(m, o):
                return Decision.forbid(f"%{m.name} does not read %{o.name} element for element")
    if clusters.would_cycle(producer, consumer):
        return Decision.forbid("would create a cycle")
    return ALLOW


def fuse_producers_into_consumers(clusters: Clusters, profitable: SiblingProfitability,
                                  log: FusionLog | None = None) -> int:
    """XLA:GPU's producer-consumer multi-output fusion on ``clusters.comp``: a loop
    kernel whose value also has other users joins a consumer kernel and stays an
    output of it, so its value is not read back (Adam's new moments and the
    parameter update they feed: one kernel with three outputs). Producers are
    taken last first, each into its first user that is legal and profitable;
    returns the merges done."""
    merges = 0
    for value in reversed(clusters.comp.post_order()):
        pc = clusters.of(value)
        if value is not _head(clusters, pc) or not clusters.outputs(pc):
            continue
        for uc in clusters.users(pc):
            if any(m.opcode in (HloOpcode.TUPLE, HloOpcode.GET_TUPLE_ELEMENT) for m in uc.members):
                continue
            d = can_fuse_producer_consumer(clusters, pc, uc)
            if d:
                d = profitable(value, pc, uc, clusters)
            if d and not consume_fuel(lambda: f"fuse %{value.name} into %{_head(clusters, uc).name} as a multi-output fusion"):
                d = Decision.forbid("out of fuel")
            if log is not None:
                log.record(value, _head(clusters, uc), d)
            if d:
                clusters.merge(uc, pc)
                merges += 1
                break
    return merges


def _head(clusters: Clusters, c: Cluster) -> Instruction:
    outs = clusters.outputs(c)
    return outs[0] if outs else c.members[0]


@dataclass(frozen=True)
class MultiOutputFusion(FusionPass):
    """Sibling fusion: consumers of a shared value fused into one multi-output loop fusion."""

    name = "multi-output-fusion"
    profitable: SiblingProfitability = default_sibling_profitability
    log: FusionLog | None = None
    backend: str = "cpu"  # whose emitter rules the outputs follow (see can_fuse_siblings)
    kind: Callable | None = None  # the fusions' label rule; None: the backend's (loop_kind, gpu_fusion_kind)

    def run(self, module: Module) -> bool:
        rewriter = Rewriter()
        for comp in fusible_computations(module):
            clusters = Clusters(comp)
            if self.plan(clusters):
                clusters.apply(kind=self.kind or (loop_kind if self.backend == "cpu" else gpu_fusion_kind), name="multi_output_fusion",
                               rewriter=rewriter)
        return rewriter.changed


    def plan(self, clusters: Clusters) -> int:
        """Merges the clusters of one computation; returns the merges done."""
        return fuse_siblings(clusters, self.sibling_profitability(), self.log, self.backend)

    def sibling_profitability(self) -> SiblingProfitability:
        """The profitability of one run (``profitable``; the GPU pass adds its model check)."""
        return self.profitable


@dataclass(frozen=True)
class GpuMultiOutputFusion(MultiOutputFusion):
    """XLA:GPU's multi-output fusion, each merge only when the GPU roofline of
    ``target`` predicts it faster (``gpu_profile``): siblings whose heroes agree,
    reductions included (a LayerNorm's two sums become one kernel); then, with
    ``producer_consumer``, a loop producer into a loop consumer, kept as an output
    for its other users (``fuse_producers_into_consumers``)."""

    name = "gpu-multi-output-fusion"
    backend: str = "gpu"
    target: str = "h100"
    producer_consumer: bool = True

    def plan(self, clusters: Clusters) -> int:
        merges = super().plan(clusters)
        if self.producer_consumer:
            merges += fuse_producers_into_consumers(clusters, FasterOn(self.target).multi_output, self.log)
        return merges

    def sibling_profitability(self) -> SiblingProfitability:
        faster, base = FasterOn(self.target), self.profitable

        def decide(shared: Instruction, a: Cluster, b: Cluster, clusters: Clusters) -> Decision:
            d = base(shared, a, b, clusters)
            return faster.siblings(shared, a, b, clusters) if d else d

        return decide
