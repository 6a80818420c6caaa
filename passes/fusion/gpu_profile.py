"""The XLA:GPU fusion profile: a fusion is done only when the GPU roofline predicts
it faster, launches counted.

XLA:CPU fuses whatever is legal; on a GPU a fusion can be slower than the kernels
it replaces: a reduction fused under a broadcast is recomputed per output element,
and a merged kernel can launch fewer blocks than its parts. XLA:GPU's priority
fusion prices every decision with its GpuPerformanceModel (``us_fused`` against
``us_unfused``, each kernel launch 1 us). Our GPU roofline
(``hlo_analysis.gpu_kernel_model``) follows that model per kernel (rho 0.996
against XLA's own estimates over the corpus, docs/analysis.md), so the
same rule here: price the kernels apart and the would-be fusion
(``kernels.fused_region``) on the target, and fuse when it saves time.

``FasterOn(target)`` is that check, for producer-consumer fusion
(``GpuProducerConsumerFusion.cluster_profitability``) and sibling fusion
(``GpuMultiOutputFusion.sibling_profitability``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from hlo_tools import Instruction
from hlo_tools.opcode import HloOpcode

from hlo_analysis import devices
from hlo_analysis.cost import is_kernel
from hlo_analysis.fusion_kind import gpu_fusion_kind
from hlo_analysis.kernels import fused_region
from hlo_analysis.legality import ALLOW, Decision
from hlo_analysis.roofline import roofline

from .clusters import Cluster, Clusters

#: Relative slack within which a fusion predicted as fast as its parts is still done
#: (a bitcast or a constant joining a kernel changes nothing but its text).
TIE = 1e-9


def _one_kernel(members: Sequence[Instruction]) -> Instruction | None:
    """The fusion ``members`` are, alone or with its own get-tuple-elements (a
    cluster of a multi-output kernel): priced with the label XLA gave it."""
    head = members[0]
    if head.fused_computation is None or any(
            m is not head and not (m.opcode is HloOpcode.GET_TUPLE_ELEMENT and m.operand(0) is head) for m in members):
        return None
    return head


@dataclass(eq=False)
class FasterOn:
    """Fuse when the roofline of ``target`` predicts the fusion faster than its
    parts apart (each kernel with its launch).  Remembers the regions it priced."""

    target: str = "h100"
    _times: dict[tuple[int, ...], float] = field(default_factory=dict, repr=False)

    def time_s(self, members: Sequence[Instruction], root: Instruction | None = None) -> float:
        """Predicted time of ``members`` run as one kernel (launch included); 0 for
        a lone instruction that runs no kernel (a bitcast, a constant)."""
        if len(members) == 1 and not is_kernel(members[0]):
            return 0.0
        key = tuple(sorted(id(m) for m in members)) + ((id(root),) if root is not None else ())
        if key not in self._times:
            alone = _one_kernel(members)
            # a kernel XLA already made is priced as itself, a would-be one with XLA:GPU's rule
            region = (fused_region([alone], kind=alone.fusion_kind) if alone is not None and root in (None, alone)
                      else fused_region(members, root=root, kind=gpu_fusion_kind))
            self._times[key] = roofline(region, devices.load(self.target)).time_s
        return self._times[key]

    def saving(self, before: float, after: float, what: str) -> Decision:
        """Allow when ``after`` (fused) is predicted no slower than ``before`` (apart)."""
        if after <= before * (1 + TIE):
            return ALLOW
        return Decision.forbid(f"cost: {what} predicted {after * 1e6:.2f} us fused vs {before * 1e6:.2f} us apart "
                               f"on {self.target}")

    def producer(self, clusters: Clusters, cluster: Cluster, producer: Instruction, duplicate: bool) -> Decision:
        """Absorbing ``producer`` into ``cluster``.  Duplicated, it still runs for its
        other users, so only the cluster's own time counts; otherwise its kernel
        (and launch) goes away."""
        members = [m for m in cluster.members if m is not producer]
        outputs = clusters.outputs(cluster)
        root = outputs[0] if duplicate and len(outputs) == 1 else None
        apart = self.time_s(members) + (0.0 if duplicate else self.time_s([producer]))
        fused = self.time_s(members + [producer], root=root)
        return self.saving(apart, fused, f"%{producer.name} into its consumers")

    def benefit(self, c) -> float:
        """Seconds saved by a priority-fusion ``Candidate`` (``priority.Candidate``):
        the producer's kernel and its consumers' apart, against the kernels the
        fusion makes (the producer's own still runs where ``keeps_original``).  A
        tie counts as a saving of ``TIE`` (a bitcast joining changes nothing but
        the text); a duplicate into a kernel with several outputs is not priced
        (-inf)."""
        alone = self.time_s(list(c.members))
        apart = alone + sum(self.time_s(list(t)) for t in c.targets)
        if not c.duplicate:  # moved into the one consumer (kept as an output when multi_output)
            fused = self.time_s([*c.targets[0], *c.members])
        elif None in c.roots:
            return float("-inf")
        else:
            fused = (alone if c.keeps_original else 0.0) + sum(
                self.time_s([*t, *c.members], root=r) for t, r in zip(c.targets, c.roots))
        return apart - fused + TIE * apart

    def siblings(self, shared: Instruction, a: Cluster, b: Cluster, clusters: Clusters) -> Decision:
        """Merging sibling clusters ``a`` and ``b`` (both read ``shared``)."""
        return self._merged(a, b, f"siblings reading %{shared.name}")

    def multi_output(self, value: Instruction, producer: Cluster, consumer: Cluster, clusters: Clusters) -> Decision:
        """Merging ``producer`` (which defines ``value``) into ``consumer``, kept as an output."""
        return self._merged(producer, consumer, f"%{value.name} into its consumer as an extra output")

    def _merged(self, a: Cluster, b: Cluster, what: str) -> Decision:
        apart = self.time_s(a.members) + self.time_s(b.members)
        fused = self.time_s(a.members + b.members)
        return self.saving(apart, fused, what)
