"""Fusion opportunities: edges that cross kernel boundaries, what fusing them would
save, whether it is legal, grouped by an opcode-chain signature.

Two kinds of edge:

* producer -> consumer: the consumer reads the producer's output from memory.
  Fusing saves that read, and the producer's write too when the consumer is its
  only user (otherwise the producer is duplicated into the consumer).
* sibling: two kernels read the same value; a multi-output fusion reads it once.

Legality reuses ``hlo_analysis.legality`` (XLA:CPU's loop-fusion rules). The cycle
check is a graph search per edge, so it runs on the ``cycle_check_top`` edges
with the most bytes saved per computation; the others say ``cycle unchecked``.
Edges are found inside each non-fused computation (entry, call and loop bodies);
an edge that crosses a ``call`` boundary in a pre-optimization module is not seen.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Mapping

from hlo_tools.ir import Computation, Instruction, Module
from hlo_tools.opcode import HloOpcode
from hlo_tools.side_effects import one_memo

from .cost import InstructionCost, ModuleCost, analyze, arithmetic_seconds, is_kernel, kernel_seconds, shape_size
from .devices import Device
from .gpu_kernel_model import utilization_memo
from .legality import can_fuse, creates_cycle, fusible, legality_memo
from .patterns import Patterns, edge_label

_H = HloOpcode
_TRANSPARENT = frozenset({_H.BITCAST, _H.GET_TUPLE_ELEMENT})
SIGNATURE_DEPTH = 4


@dataclass(slots=True)
class Opportunity:
    """One edge across a kernel boundary (not frozen: a module has tens of
    thousands, and a frozen dataclass's constructor costs three times as much)."""

    kind: str  # "producer-consumer" | "sibling"
    computation: str
    producer: str
    consumer: str
    signature: str
    pattern: str | None
    bytes_saved: float
    time_saved_s: float
    legal: bool | None  # None: legality unknown
    reason: str = ""


@dataclass(frozen=True)
class OpportunityGroup:
    """Every opportunity with one signature, across modules."""

    signature: str
    kind: str
    pattern: str | None
    count: int
    legal_count: int
    bytes_saved: float
    time_saved_s: float
    examples: tuple[str, ...] = field(default=())


def _label(instr: Instruction) -> str:
    if instr.opcode is _H.FUSION or instr.async_wrapped_opcode is _H.FUSION:
        comp = instr.called_computation("calls")
        root = comp.root.opcode.value if comp is not None and comp.root is not None else "?"
        return f"fusion[{root}]"
    return instr.opcode_text


def _through(instr: Instruction) -> Instruction:
    """Looks through bitcasts and tuple projections to the instruction that wrote the data."""
    while instr.opcode in _TRANSPARENT and instr.operands:
        instr = instr.operands[0]
    return instr


def _kernel_users(instr: Instruction, out: dict[Instruction, None] | None = None) -> list[Instruction]:
    """Users of ``instr``'s data, looking through bitcasts and tuple projections."""
    top = out is None
    out = {} if out is None else out
    for u in instr.users:
        if u.opcode in _TRANSPARENT:
            _kernel_users(u, out)
        else:
            out[u] = None
    return list(out) if top else []


class _Labels(dict):
    """instruction -> ``_label``, each asked once in a walk over many edges."""

    def __missing__(self, instr: Instruction) -> str:
        label = self[instr] = _label(instr)
        return label


def _chain(instr: Instruction, depth: int, label=_label) -> list[str]:
    """Opcode labels from ``instr`` down its largest operand (the main data path)."""
    labels = []
    node: Instruction | None = instr
    while node is not None and len(labels) < depth:
        labels.append(label(node))
        ops = [_through(o) for o in node.operands]
        ops = [o for o in ops if o.opcode not in (_H.PARAMETER, _H.CONSTANT)]
        node = max(ops, key=lambda o: shape_size(o.shape)) if ops else None
    return labels


def signature(producer: Instruction, consumer: Instruction, chains: dict[int, list[str]] | None = None,
              labels: _Labels | None = None) -> str:
    """``consumer<-producer<-...`` e.g. ``reduce<-exponential<-subtract<-broadcast``.
    ``chains`` and ``labels``: memos of producers' chains and of labels, for a
    walk over many edges of one module."""
    label = labels.__getitem__ if labels is not None else _label
    chain = chains.get(id(producer)) if chains is not None else None
    if chain is None:
        chain = _chain(producer, SIGNATURE_DEPTH - 1, label)
        if chains is not None:
            chains[id(producer)] = chain
    return "<-".join([label(consumer), *chain])


def _legality(producer: Instruction, consumer: Instruction, direct: Instruction, check_cycle: bool,
              position: Mapping[int, int] | None = None):
    d = can_fuse(direct, consumer, check_cycle=False)
    if d and direct is not producer:
        d = fusible(producer)
        if not d:
            d = type(d)(False, f"producer {d.reason}")
    if not d:
        return False, d.reason
    if not check_cycle:
        return True, "cycle unchecked"
    if creates_cycle(producer, consumer, position):
        return False, "would create a cycle"
    return True, ""


def _time(flops: float, trans: float, bytes_: float, device: Device, launches: int = 1) -> float:
    """A kernel's roofline time with every flop at the vector rate: which kernel a
    fused one would be (matmul or not) is not known here, so no matmul peak and no
    per-opcode profile, unlike ``roofline.estimate``."""
    compute = arithmetic_seconds(flops, trans, device.vector_flops, device.transcendentals_per_s)
    return kernel_seconds(compute, bytes_ / device.bandwidth_at(bytes_), launches * device.launch_overhead_s)


def find(module: Module, device: Device, cost: ModuleCost | None = None, *,
         cycle_check_top: int = 64, siblings: bool = True) -> list[Opportunity]:
    """Every producer->consumer and sibling edge across kernels in ``module``."""
    with one_memo(), legality_memo(), utilization_memo():  # each asked once per instruction, not once per edge
        return _find(module, device, cost or analyze(module), cycle_check_top, siblings)


def _find(module: Module, device: Device, cost: ModuleCost, cycle_check_top: int, siblings: bool) -> list[Opportunity]:
    patterns = Patterns(module)
    by_comp: dict[str, dict[str, InstructionCost]] = defaultdict(dict)
    for c in cost.instructions:
        by_comp[c.computation][c.name] = c
    out: list[Opportunity] = []
    for comp in module.computations:
        costs = by_comp.get(comp.name)
        if costs:
            out.extend(_find_in(comp, costs, device, patterns, cycle_check_top, siblings))
    return out


def _positions(comp: Computation) -> dict[int, int]:
    """id -> index in a topological order of ``comp``, for its cycle checks."""
    return {id(instr): n for n, instr in enumerate(comp.post_order())}


def _find_in(comp: Computation, costs: dict[str, InstructionCost], device: Device, patterns: Patterns,
             cycle_check_top: int, siblings: bool) -> list[Opportunity]:
    zero = InstructionCost("", "", "", 0, 0, 0, 0, 0)
    edges = []  # (bytes_saved, producer, consumer, direct, time_saved)
    readers: dict[Instruction, list[Instruction]] = {}  # producer -> _kernel_users
    for consumer in comp:
        if not is_kernel(consumer):
            continue
        cc = costs.get(consumer.name, zero)
        for direct in dict.fromkeys(consumer.operands):
            producer = _through(direct)
            if producer.parent is not comp or not is_kernel(producer):
                continue
            pc = costs.get(producer.name, zero)
            read = shape_size(direct.shape)
            users = readers.get(producer)
            if users is None:
                users = readers[producer] = _kernel_users(producer)
            sole = users == [consumer]
            if sole:
                saved = read + min(read, pc.bytes_written)
                fused = _time(pc.flops + cc.flops, pc.transcendentals + cc.transcendentals,
                              max(0.0, pc.bytes_accessed + cc.bytes_accessed - saved), device)
                before = _time(pc.flops, pc.transcendentals, pc.bytes_accessed, device) + \
                    _time(cc.flops, cc.transcendentals, cc.bytes_accessed, device)
            else:  # the producer is duplicated into the consumer
                saved = read
                fused = _time(pc.flops + cc.flops, pc.transcendentals + cc.transcendentals,
                              max(0.0, cc.bytes_accessed - read + pc.bytes_read), device)
                before = _time(cc.flops, cc.transcendentals, cc.bytes_accessed, device)
            edges.append((saved, producer, consumer, direct, before - fused))
    edges.sort(key=lambda e: -e[0])
    out = []
    chains: dict[int, list[str]] = {}  # producer -> its chain, for signature
    labels = _Labels()
    position = _positions(comp) if cycle_check_top > 0 else None
    for rank, (saved, producer, consumer, direct, dt) in enumerate(edges):
        legal, reason = _legality(producer, consumer, direct, rank < cycle_check_top, position)
        out.append(Opportunity("producer-consumer", comp.name, producer.name, consumer.name,
                               signature(producer, consumer, chains, labels), edge_label(patterns, producer, consumer),
                               saved, dt, legal, reason))
    if siblings:
        out.extend(_siblings(comp, device, patterns, cycle_check_top, labels, position, readers))
    return out


def _siblings(comp: Computation, device: Device, patterns: Patterns, cycle_check_top: int, labels: _Labels,
              position: dict[int, int] | None, readers: dict[Instruction, list[Instruction]]) -> list[Opportunity]:
    pairs = []
    for value in comp:
        if value.opcode in _TRANSPARENT or value.opcode is _H.CONSTANT:
            continue
        size = shape_size(value.shape) if not value.shape.is_tuple else 0
        if size == 0:
            continue
        users = readers.get(value)
        if users is None:
            users = _kernel_users(value)
        users = [u for u in users if is_kernel(u) and u.parent is comp]
        for a, b in zip(users, users[1:]):  # neighbours in program order: linear, not quadratic
            pairs.append((size, value, a, b))
    pairs.sort(key=lambda p: -p[0])
    fus: dict = {}
    out = []
    for rank, (size, value, a, b) in enumerate(pairs):
        la, lb = sorted((labels[a], labels[b]))
        sig = f"{la}|{lb}<-{labels[value]}"
        da = fus.get(a) or fus.setdefault(a, fusible(a))
        db = fus.get(b) or fus.setdefault(b, fusible(b))
        if not da or not db:
            legal, reason = False, (da.reason if not da else db.reason)
        elif rank < cycle_check_top:
            legal = not creates_cycle(a, b, position)
            reason = "" if legal else "would create a cycle"
        else:
            legal, reason = True, "cycle unchecked"
        out.append(Opportunity("sibling", comp.name, value.name, f"{a.name},{b.name}", sig,
                               edge_label(patterns, a, b), size, size / device.bandwidth_at(size), legal, reason))
    return out


def group(opportunities, *, module: str = "", examples: int = 3, entry: str | None = None) -> list[OpportunityGroup]:
    """Groups opportunities (of one module, or ``(module, Opportunity)`` pairs of many)
    by kind and signature, most bytes saved first. An example outside ``entry``
    (a loop body, a called computation) says which computation it is in, as the
    user's file names it."""
    acc: dict[tuple[str, str], list] = {}
    for item in opportunities:
        mod, o = item if isinstance(item, tuple) else (module, item)
        key = (o.kind, o.signature)
        a = acc.setdefault(key, [o.pattern, 0, 0, 0.0, 0.0, []])
        a[0] = a[0] or o.pattern
        a[1] += 1
        a[2] += 1 if o.legal else 0
        a[3] += o.bytes_saved
        a[4] += max(o.time_saved_s, 0.0)
        if len(a[5]) < examples:
            where = f" in %{o.computation}" if entry is not None and o.computation != entry else ""
            a[5].append(f"{mod + ':' if mod else ''}{o.producer}->{o.consumer}{where}")
    groups = [OpportunityGroup(sig, kind, a[0], a[1], a[2], a[3], a[4], tuple(a[5])) for (kind, sig), a in acc.items()]
    groups.sort(key=lambda g: -g.bytes_saved)
    return groups
