"""How much async work a schedule hides behind independent compute, under a
simple cost model (the one latency-hiding schedulers use in spirit:
xla/service/latency_hiding_scheduler.cc's ApproximateLatencyEstimator gives an
async pair a fixed latency and compute a per-instruction cost).

Compute time of an instruction is its roofline without a launch
(``cost.KernelTime`` of ``cost.element_flops`` at the peak and
``cost.unfused_bytes`` at the bandwidth); an async pair (``*-start`` ...
``*-done``) takes ``latency + bytes / link bandwidth``. The rates default to
``devices.SCHEDULING_H100``.  The overlap of a pair is the compute time scheduled
strictly between its start and its done, capped at the pair's own time.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Sequence

from hlo_tools import Computation, HloOpcode, Instruction
from hlo_tools.opcode import NO_KERNEL

from .cost import KernelTime, element_flops, unfused_bytes
from .devices import SCHEDULING_H100

#: start opcode -> done opcode (XLA's async collective and copy pairs).
ASYNC_PAIRS = {
    HloOpcode.ALL_GATHER_START: HloOpcode.ALL_GATHER_DONE,
    HloOpcode.ALL_REDUCE_START: HloOpcode.ALL_REDUCE_DONE,
    HloOpcode.COLLECTIVE_PERMUTE_START: HloOpcode.COLLECTIVE_PERMUTE_DONE,
    HloOpcode.COPY_START: HloOpcode.COPY_DONE,
    HloOpcode.SEND: HloOpcode.SEND_DONE,
    HloOpcode.RECV: HloOpcode.RECV_DONE,
    HloOpcode.ASYNC_START: HloOpcode.ASYNC_DONE,
}
ASYNC_STARTS = frozenset(ASYNC_PAIRS)
ASYNC_DONES = frozenset(ASYNC_PAIRS.values())
#: Cost no compute time in a schedule: what runs no kernel, except add-dependency,
#: domain and opt-barrier, which this model charges their bytes as if they ran
#: (kept so that schedules do not change; ``cost.is_kernel`` says they run nothing).
_FREE = NO_KERNEL - {HloOpcode.ADD_DEPENDENCY, HloOpcode.DOMAIN, HloOpcode.OPTIMIZATION_BARRIER}


@dataclass(frozen=True)
class CostModel:
    """The scheduler's rates (defaults: ``devices.SCHEDULING_H100``); only ratios matter."""

    flops_per_s: float = SCHEDULING_H100.vector_flops
    bytes_per_s: float = SCHEDULING_H100.memory_bandwidth
    link_bytes_per_s: float = SCHEDULING_H100.collective_bandwidth
    async_latency_s: float = SCHEDULING_H100.collective_overhead_s

    def compute_seconds(self, instr: Instruction) -> float:
        if instr.opcode in _FREE or instr.opcode in ASYNC_STARTS or instr.opcode in ASYNC_DONES:
            return 0.0
        return KernelTime(element_flops(instr) / self.flops_per_s, unfused_bytes(instr) / self.bytes_per_s).time_s

    def async_seconds(self, start: Instruction) -> float:
        moved = max((leaf.byte_size for _, leaf in start.shape.leaves()), default=0)
        return self.async_latency_s + moved / self.link_bytes_per_s


@dataclass(frozen=True)
class TableCostModel(CostModel):
    """Per-instruction times from a richer model, keyed by ``id(instruction)``:
    ``compute`` (the roofline's kernel time, a sync collective's price) and
    ``transfers`` (an async start's collective price, ``collective_time.price``),
    in place of the flat rates; an instruction in neither table falls back to them.
    Ids stay valid while a scheduler reorders the same instructions."""

    compute: Mapping[int, float] = field(default_factory=dict)
    transfers: Mapping[int, float] = field(default_factory=dict)

    def compute_seconds(self, instr: Instruction) -> float:
        t = self.compute.get(id(instr))
        return super().compute_seconds(instr) if t is None else t

    def async_seconds(self, start: Instruction) -> float:
        t = self.transfers.get(id(start))
        return super().async_seconds(start) if t is None else t


def is_async_start(instr: Instruction) -> bool:
    return instr.opcode in ASYNC_STARTS


def matching_done(start: Instruction) -> Instruction | None:
    """The done that consumes ``start`` (send/recv pairs and async chains
    through ``async-update`` included)."""
    want = ASYNC_PAIRS[start.opcode]
    todo = list(start.users)
    while todo:
        u = todo.pop()
        if u.opcode is want:
            return u
        if u.opcode is HloOpcode.ASYNC_UPDATE:
            todo.extend(u.users)
    return None


@dataclass(frozen=True)
class PairOverlap:
    start: str
    done: str
    async_s: float
    covered_s: float


@dataclass(frozen=True)
class OverlapReport:
    """Async time hidden behind compute in one computation's order."""

    computation: str
    pairs: tuple[PairOverlap, ...]
    compute_s: float

    @property
    def async_s(self) -> float:
        return sum(p.async_s for p in self.pairs)

    @property
    def covered_s(self) -> float:
        return sum(p.covered_s for p in self.pairs)

    @property
    def fraction(self) -> float:
        """Share of async time hidden (1.0 when there is none to hide)."""
        return self.covered_s / self.async_s if self.async_s else 1.0

    @property
    def exposed_s(self) -> float:
        return self.async_s - self.covered_s

    def __str__(self) -> str:
        return (f"%{self.computation}: {len(self.pairs)} async pairs, {self.async_s * 1e6:.1f} us async, "
                f"{self.covered_s * 1e6:.1f} us hidden ({self.fraction:.0%})")


def overlap(comp: Computation, order: Sequence[Instruction] | None = None, cost: CostModel | None = None) -> OverlapReport:
    """The overlap each async pair of ``comp`` gets in ``order`` (default: the
    instruction order, i.e. the schedule of a scheduled module)."""
    cost = cost or CostModel()
    order = list(comp) if order is None else list(order)
    t = [cost.compute_seconds(i) for i in order]
    prefix = [0.0]
    for x in t:
        prefix.append(prefix[-1] + x)
    pos = {id(i): k for k, i in enumerate(order)}
    pairs = []
    for k, instr in enumerate(order):
        if not is_async_start(instr):
            continue
        done = matching_done(instr)
        if done is None or id(done) not in pos:
            continue
        a = cost.async_seconds(instr)
        between = prefix[pos[id(done)]] - prefix[k + 1]
        pairs.append(PairOverlap(instr.name, done.name, a, min(a, max(0.0, between))))
    return OverlapReport(comp.name, tuple(pairs), prefix[-1])
