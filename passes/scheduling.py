"""Scheduling: a list scheduler with pluggable priorities, and the passes that
emit its order as the module's schedule (``is_scheduled=true``, instructions in
sequence order, which is how XLA prints and parses an HloSchedule).

* ``memory-scheduler``: like XLA's DefaultMemoryScheduler
  (xla/service/hlo_memory_scheduler.cc), several orders are tried (the list
  scheduler with the bytes-freed-minus-bytes-defined priority, a DFS post order,
  and the order the module already has) and the one with the least peak live
  bytes (``hlo_analysis.memory``) wins, so it never does worse than the
  incoming schedule.
* ``latency-hiding-scheduler``: issues async starts as early as they are ready
  and delays their dones until the cost model says the transfer is covered
  (xla/service/latency_hiding_scheduler.cc in spirit: top-down here, with a cap on
  async pairs in flight), memory-aware otherwise.

Run post-scheduler through the bridge's hook, XLA then executes exactly this
order: ``compile(m, hook=(MemoryScheduler(), "post-scheduler"))``.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import Protocol, Sequence

from hlo_tools import Computation, HloOpcode, Instruction, Module
from hlo_tools.ir import dfs_post_order
from hlo_tools.opcode import COLLECTIVES
from hlo_tools.rewriter import Rewriter
from hlo_tools.side_effects import SideEffects, side_effects

from hlo_analysis.memory import BufferModel, profile
from hlo_analysis.overlap import ASYNC_DONES, ASYNC_STARTS, CostModel, overlap

from .base import Pass


class SchedulerState:
    """What a priority may look at: buffer use counts, elapsed compute time and
    the async pairs in flight."""

    def __init__(self, comp: Computation, model: BufferModel, cost: CostModel):
        self.comp = comp
        self.model = model
        self.cost = cost
        self.index = {id(i): k for k, i in enumerate(comp)}
        self.readers: dict = {}
        for instr in comp:
            for b in model.used(instr):
                self.readers.setdefault(b, set()).add(id(instr))
        self.remaining = {b: len(r) for b, r in self.readers.items()}
        self.pinned = set(model.leaves(comp.root).values()) if comp.root is not None else set()
        self.elapsed = 0.0
        self.started: dict[int, float] = {}  # async start id -> elapsed when issued
        self.in_flight = 0

    def bytes_freed(self, instr: Instruction) -> int:
        """Bytes whose last reader is ``instr`` (parameters and outputs never free)."""
        freed = 0
        for b in self.model.used(instr):
            if self.remaining.get(b) == 1 and b not in self.pinned:
                owner = b[0]
                if self.model.sizes.get(b) and not self._is_param(owner):
                    freed += self.model.sizes[b]
        return freed

    def _is_param(self, owner: int) -> bool:
        return owner in self._params

    @property
    def _params(self) -> set[int]:
        p = getattr(self, "_param_ids", None)
        if p is None:
            p = self._param_ids = {id(i) for i in self.comp if i.opcode is HloOpcode.PARAMETER}
        return p

    def bytes_defined(self, instr: Instruction) -> int:
        return sum(self.model.sizes.get(b, 0) for b in self.model.defined(instr))

    def scheduled(self, instr: Instruction) -> list[int]:
        """Records ``instr``; returns ids of instructions whose memory priority changed."""
        changed: list[int] = []
        for b in self.model.used(instr):
            n = self.remaining[b] - 1
            self.remaining[b] = n
            if n == 1:
                changed.extend(self.readers[b] - {id(instr)})
        self.elapsed += self.cost.compute_seconds(instr)
        if instr.opcode in ASYNC_STARTS:
            self.started[id(instr)] = self.elapsed
            self.in_flight += 1
        elif instr.opcode in ASYNC_DONES:
            self.in_flight = max(0, self.in_flight - 1)
        return changed


class Priority(Protocol):
    """Larger keys are scheduled first; ``key`` may read the state."""

    name: str

    def key(self, instr: Instruction, state: SchedulerState) -> tuple: ...


@dataclass(frozen=True)
class MemoryPriority:
    """XLA's ListScheduler priority: bytes freed minus bytes defined, ties to
    the original order (hlo_memory_scheduler.cc, ListScheduler::GetPriority)."""

    name = "memory"

    def key(self, instr: Instruction, state: SchedulerState) -> tuple:
        return (state.bytes_freed(instr) - state.bytes_defined(instr), -state.index[id(instr)])


@dataclass(frozen=True)
class LatencyHidingPriority:
    """Starts first (while fewer than ``max_in_flight`` are outstanding), dones
    last until their transfer is covered by the compute scheduled since the
    start; memory priority in between."""

    max_in_flight: int = 2
    name = "latency-hiding"

    def key(self, instr: Instruction, state: SchedulerState) -> tuple:
        mem = MemoryPriority().key(instr, state)
        op = instr.opcode
        if op in ASYNC_STARTS:
            return (2 if state.in_flight < self.max_in_flight else -1, *mem)
        if op in ASYNC_DONES:
            start = _start_of(instr)
            if start is not None and id(start) in state.started:
                covered = state.elapsed - state.started[id(start)]
                if covered < state.cost.async_seconds(start):
                    return (0, *mem)
        return (1, *mem)


def _start_of(done: Instruction) -> Instruction | None:
    node = done.operand(0) if done.operands else None
    while node is not None and node.opcode is HloOpcode.ASYNC_UPDATE:
        node = node.operand(0)
    return node if node is not None and node.opcode in ASYNC_STARTS else None


def _dependencies(comp: Computation) -> dict[int, list[Instruction]]:
    """Operands, control predecessors and, for side-effecting instructions other
    than collectives, the previous such one (their relative order is kept).
    Collectives may move: every SPMD partition runs this same order, so they
    still meet in the same sequence (XLA's latency-hiding scheduler moves them too)."""
    effects = side_effects()
    deps: dict[int, list[Instruction]] = {}
    last_effect = None
    for instr in comp:
        d = list(dict.fromkeys(instr.operands + instr.control_predecessors))
        if _ordered_effect(instr, effects):
            if last_effect is not None and last_effect not in d:
                d.append(last_effect)
            last_effect = instr
        deps[id(instr)] = d
    return deps


def _ordered_effect(instr: Instruction, effects: SideEffects) -> bool:
    op = instr.async_wrapped_opcode or instr.opcode
    if op in COLLECTIVES or instr.opcode in ASYNC_STARTS or instr.opcode in ASYNC_DONES:
        return op in (HloOpcode.SEND, HloOpcode.RECV, HloOpcode.SEND_DONE, HloOpcode.RECV_DONE) or (
            instr.opcode in (HloOpcode.ASYNC_START, HloOpcode.ASYNC_DONE) and op not in COLLECTIVES
            and effects.instruction(instr))
    return effects.instruction(instr)


def list_schedule(comp: Computation, priority: Priority, *, model: BufferModel | None = None,
                  cost: CostModel | None = None) -> list[Instruction]:
    """A topological order of ``comp`` chosen greedily by ``priority``.

    Priorities are kept in a heap and re-evaluated lazily: an entry whose key
    went stale is pushed back with its new key, and ready instructions whose
    bytes-freed changed are re-pushed when an operand's other reader runs."""
    model = model or BufferModel()
    state = SchedulerState(comp, model, cost or CostModel())
    deps = _dependencies(comp)
    by_id = {id(i): i for i in comp}
    waiting = {k: len(v) for k, v in deps.items()}
    succs: dict[int, list[int]] = {}
    for k, v in deps.items():
        for d in v:
            succs.setdefault(id(d), []).append(k)
    heap: list = []
    ready: set[int] = set()

    def push(i: Instruction) -> None:
        key = priority.key(i, state)
        heapq.heappush(heap, (_neg(key), state.index[id(i)], id(i)))

    for i in comp:
        if waiting[id(i)] == 0:
            ready.add(id(i))
            push(i)
    order: list[Instruction] = []
    while heap:
        negkey, _, k = heapq.heappop(heap)
        if k not in ready:
            continue  # a stale duplicate of something already scheduled
        instr = by_id[k]
        now = _neg(priority.key(instr, state))
        if now > negkey:  # its priority dropped since it was pushed
            heapq.heappush(heap, (now, state.index[k], k))
            continue
        ready.discard(k)
        order.append(instr)
        for c in state.scheduled(instr):
            if c in ready:
                push(by_id[c])
        for s in succs.get(k, ()):
            waiting[s] -= 1
            if waiting[s] == 0:
                ready.add(s)
                push(by_id[s])
    if len(order) != len(by_id):
        raise ValueError(f"%{comp.name} has a dependency cycle: scheduled {len(order)} of {len(by_id)} instructions")
    return order


def _neg(key: tuple) -> tuple:
    return tuple(-x for x in key)


def dfs_schedule(comp: Computation) -> list[Instruction]:
    """XLA's DFSMemoryScheduler idea: a post order that visits the operand with
    the larger subtree first, so big intermediate results are consumed soon."""
    deps = _dependencies(comp)
    size: dict[int, int] = {}
    for i in comp:  # instruction order is topological
        size[id(i)] = 1 + sum(size.get(id(d), 0) for d in deps[id(i)])
    # largest subtree visited first (pushed last)
    return dfs_post_order(comp, lambda node: sorted(deps[id(node)], key=lambda x: size[id(x)])[::-1])


def set_sequence(comp: Computation, order: Sequence[Instruction], rewriter: Rewriter | None = None) -> bool:
    """Makes ``order`` the computation's instruction order (its sequence once the
    module is scheduled, XLA's HloSchedule::set_sequence); returns whether it changed.

    Checks that ``order`` is a permutation of the computation first."""
    current = list(comp)
    if [id(i) for i in current] == [id(i) for i in order]:
        return False
    if len(order) != len(current) or {id(i) for i in order} != {id(i) for i in current}:
        raise ValueError(f"the order for %{comp.name} is not a permutation of its instructions")
    (rewriter or Rewriter()).set_instruction_order(comp, list(order))
    return True


def schedulable_computations(module: Module) -> list[Computation]:
    """Computations that carry a sequence in an HloSchedule: all but fusion
    bodies and scalar appliers (callees before callers)."""
    fused = {id(c) for c in module.fusion_computations()}
    applied = {id(c) for i in module.instructions() if i.opcode is not HloOpcode.FUSION
               for key, comps in i.called_computation_map.items()
               if key in ("to_apply", "comparator", "select", "scatter") for c in comps}
    return [c for c in module.computations if id(c) not in fused and id(c) not in applied]


@dataclass(frozen=True)
class ScheduleChoice:
    computation: str
    chosen: str
    peaks: dict


def choose_min_memory(comp: Computation, candidates: dict[str, list[Instruction]], model: BufferModel) -> tuple[str, list[Instruction], dict]:
    peaks = {name: profile(comp, order, model=model).peak_bytes for name, order in candidates.items()}
    best = min(peaks, key=lambda n: (peaks[n], n != "input"))  # ties keep the incoming order
    return best, candidates[best], peaks


@dataclass(frozen=True)
class MemoryScheduler(Pass):
    """Minimises peak live bytes per computation; emits ``is_scheduled=true``.
    ``keep_input`` adds the incoming order as a candidate (never worse than it)."""

    name = "memory-scheduler"
    keep_input: bool = True

    def run(self, module: Module) -> bool:
        return run_scheduler(module, self._candidates, keep_input=self.keep_input)[0]

    @staticmethod
    def _candidates(comp: Computation, model: BufferModel) -> dict[str, list[Instruction]]:
        return {"list": list_schedule(comp, MemoryPriority(), model=model), "dfs": dfs_schedule(comp)}


@dataclass(frozen=True)
class LatencyHidingScheduler(Pass):
    """Overlaps async pairs with independent compute (cost model in
    ``hlo_analysis.overlap``); emits ``is_scheduled=true``.

    Like XLA's latency-hiding scheduler under its memory limit, it gives up
    overlap rather than memory: of the schedules with 1..``max_in_flight`` pairs
    in flight, it keeps the one hiding the most async time whose peak stays within
    ``memory_slack`` of the incoming order's, else the incoming order."""

    name = "latency-hiding-scheduler"
    max_in_flight: int = 2
    memory_slack: float = 0.0
    #: the times it schedules by (default: ``CostModel()``'s flat rates; a
    #: ``TableCostModel`` prices collectives and kernels on a target device)
    cost: CostModel | None = None

    def run(self, module: Module) -> bool:
        return run_scheduler(module, self._choose, keep_input=False)[0]

    def _choose(self, comp: Computation, model: BufferModel) -> dict[str, list[Instruction]]:
        limit = profile(comp, model=model).peak_bytes * (1.0 + self.memory_slack)
        best_name, best, best_cov = "input", list(comp), overlap(comp, cost=self.cost).covered_s
        for k in range(1, self.max_in_flight + 1):
            order = list_schedule(comp, LatencyHidingPriority(k), model=model, cost=self.cost)
            cov = overlap(comp, order, cost=self.cost).covered_s
            if cov > best_cov and profile(comp, order, model=model).peak_bytes <= limit:
                best_name, best, best_cov = f"lhs-{k}", order, cov
        return {best_name: best}


def run_scheduler(module: Module, candidates, *, keep_input: bool) -> tuple[bool, list[ScheduleChoice]]:
    """Schedules every schedulable computation, callees first (a caller's peak
    includes its callees' peaks under their new order)."""
    rewriter = Rewriter()
    choices = []
    model = BufferModel()
    for comp in schedulable_computations(module):
        cands = dict(candidates(comp, model))
        if keep_input:
            cands["input"] = list(comp)
        name, order, peaks = choose_min_memory(comp, cands, model) if len(cands) > 1 else (
            next(iter(cands)), next(iter(cands.values())), {})
        set_sequence(comp, order, rewriter)
        choices.append(ScheduleChoice(comp.name, name, peaks))
    rewriter.set_scheduled(module)
    return rewriter.changed, choices
