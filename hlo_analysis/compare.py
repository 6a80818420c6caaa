"""``compare_decisions``: XLA's fusion decisions vs ours, on the same device.

Both sides are optimized modules (XLA's stock output, e.g. a corpus
``gpu_h100_after_optimizations`` stage, and a pass pipeline's output). The
comparison is kernels, bytes and predicted time, overall and per category, and
the regions that differ: kernel shapes (a fusion's root-opcode chain, or the
opcode) that one side has more of than the other.

Not done yet: matching kernels one to one through metadata. Agreement with
XLA's priority-fusion log is ``hlo_lab.measured.xla_fusion_log``.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from hlo_tools.ir import Module

from .devices import Device
from .opportunities import _label
from .roofline import Roofline, roofline


@dataclass(frozen=True)
class SideSummary:
    name: str
    kernels: int
    bytes_accessed: float
    time_s: float
    by_category: dict[str, float]


@dataclass(frozen=True)
class DecisionComparison:
    """A (usually XLA) vs B (usually ours). ``differing`` lists kernel labels with
    the count on each side, largest difference first."""

    device: str
    a: SideSummary
    b: SideSummary
    differing: tuple[tuple[str, int, int], ...]

    @property
    def speedup_b_over_a(self) -> float:
        return self.a.time_s / self.b.time_s if self.b.time_s else float("inf")


def _summary(name: str, module: Module, r: Roofline) -> tuple[SideSummary, Counter]:
    comps = {c.name: c for c in module.computations}
    labels = Counter(_label(comps[k.computation].get_instruction(k.name)) for k in r.kernels)
    return SideSummary(name, len(r.kernels), sum(k.bytes_accessed for k in r.kernels), r.time_s,
                       {c: s.time_s for c, s in r.by_category().items()}), labels


def compare_decisions(xla_module: Module, our_module: Module, device: Device,
                      names: tuple[str, str] = ("xla", "ours")) -> DecisionComparison:
    a, la = _summary(names[0], xla_module, roofline(xla_module, device))
    b, lb = _summary(names[1], our_module, roofline(our_module, device))
    diff = [(k, la.get(k, 0), lb.get(k, 0)) for k in set(la) | set(lb) if la.get(k, 0) != lb.get(k, 0)]
    diff.sort(key=lambda t: (-abs(t[1] - t[2]), t[0]))
    return DecisionComparison(device.name, a, b, tuple(diff))
