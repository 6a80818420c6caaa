"""Clusters: a partition of one computation into would-be fusions.

Fusion passes plan first and rewrite once: they merge clusters here (cheap set
operations, with cycle checks on the contracted graph), then ``apply`` outlines
each cluster with ``outline_fusion``. Existing fusion instructions are atomic
nodes; a cluster that contains one is inlined and re-outlined together with its
new members, so passes compose (producer-consumer, then sibling, then
horizontal).

Cycle checks use a topological numbering of the contracted graph, so a search
only visits clusters numbered between the two being merged (like XLA's
HloReachabilityMap keeps InstructionFusion from being quadratic in practice).
"""

from __future__ import annotations

from typing import Callable, Iterable, Iterator

import heapq

from hlo_tools import Computation, HloOpcode, Instruction, Module
from hlo_tools.outline import inline_fusion, outline_fusion, remove_uncalled, restore_topological_order
from hlo_tools.rewriter import Rewriter

from hlo_analysis.fusion_kind import fusion_kind
from hlo_analysis.legality import keeps_in_place_order, loop_state_writers

#: Computations whose instructions run as kernels: the entry and control-flow
#: bodies. Reducers, comparators and fusion bodies are excluded.
_CONTROL_FLOW_KEYS = ("body", "condition", "branch_computations", "true_computation", "false_computation")


def fusible_computations(module: Module) -> list[Computation]:
    """The entry and the computations it reaches through while/conditional/call."""
    out: list[Computation] = []
    seen: set[int] = set()
    stack = [module.entry] if module.entry is not None else []
    while stack:
        comp = stack.pop()
        if id(comp) in seen:
            continue
        seen.add(id(comp))
        out.append(comp)
        for instr in comp:
            if instr.opcode in (HloOpcode.WHILE, HloOpcode.CONDITIONAL):
                for key in _CONTROL_FLOW_KEYS:
                    stack.extend(instr.called_computation_map.get(key, ()))
            elif instr.opcode is HloOpcode.CALL:
                stack.extend(instr.called_computations)
    return out


class Cluster:
    """Members that will become one fusion, and the cluster's topological number."""

    __slots__ = ("members", "index")

    def __init__(self, members: list[Instruction], index: int):
        self.members = members
        self.index = index

    def __len__(self) -> int:
        return len(self.members)

    def __repr__(self) -> str:
        return f"<Cluster #{self.index}: {', '.join('%' + m.name for m in self.members)}>"


def _is_output_gte(instr: Instruction) -> bool:
    """A get-tuple-element of a multi-output fusion (a tuple root), not of a fusion
    whose root is a variadic reduce (an argmax): that one reads the reduction's
    result and stays outside, or the fusion would be a loop computing a reduce."""
    op = instr.operand(0) if instr.operand_count else None
    body = op.fused_computation if op is not None and op.opcode is HloOpcode.FUSION else None
    return instr.opcode is HloOpcode.GET_TUPLE_ELEMENT and body is not None and body.root.opcode is HloOpcode.TUPLE


class Clusters:
    """The clusters of ``comp``; every instruction starts alone, except that the
    get-tuple-elements of a multi-output fusion belong to the fusion.

    ``apply`` makes its edits through the pass's rewriter (whose ``changed``
    is the pass's answer).  Planning edits nothing but tentative duplicates
    (``duplicate_into``), which go through a rewriter of their own: ``apply``
    keeps those that end up in a fusion and takes the others back."""

    def __init__(self, comp: Computation):
        self.comp = comp
        self._tentative = Rewriter()
        self._of: dict[int, Cluster] = {}
        for n, instr in enumerate(comp.post_order()):
            if _is_output_gte(instr):
                c = self._of[id(instr.operand(0))]
                c.members.append(instr)
                self._of[id(instr)] = c
            else:
                self._of[id(instr)] = Cluster([instr], n)
        self.clones: list[tuple[Instruction, Instruction]] = []  # (original, clone)
        self._writers: dict[int, Instruction] | None = None

    @property
    def loop_state_writers(self) -> dict[int, Instruction]:
        """``legality.loop_state_writers`` of this computation, found once."""
        if self._writers is None:
            self._writers = loop_state_writers(self.comp)
        return self._writers

    # -- queries --------------------------------------------------------------
    def of(self, instr: Instruction) -> Cluster:
        return self._of[id(instr)]

    def __iter__(self) -> Iterator[Cluster]:
        seen: set[int] = set()
        for c in self._of.values():
            if id(c) not in seen:
                seen.add(id(c))
                yield c

    def users(self, c: Cluster) -> list[Cluster]:
        """Clusters that use a value of ``c``, in first-use order."""
        out: dict[int, Cluster] = {}
        for m in c.members:
            for u in m.users:
                uc = self._of[id(u)]
                if uc is not c:
                    out.setdefault(id(uc), uc)
        return list(out.values())

    def operands(self, c: Cluster) -> list[Cluster]:
        """Clusters whose values ``c`` uses."""
        out: dict[int, Cluster] = {}
        for m in c.members:
            for o in m.operands:
                oc = self._of[id(o)]
                if oc is not c:
                    out.setdefault(id(oc), oc)
        return list(out.values())

    def external_operands(self, c: Cluster) -> list[Instruction]:
        """Values defined outside ``c`` that it reads (its fusion operands)."""
        out: dict[int, Instruction] = {}
        for m in c.members:
            for o in m.operands:
                if self._of[id(o)] is not c:
                    out.setdefault(id(o), o)
        return list(out.values())

    def outputs(self, c: Cluster) -> list[Instruction]:
        """Members used outside ``c`` (or the root): the fusion's outputs."""
        root = self.comp.root
        return [m for m in c.members if m is root or any(self._of[id(u)] is not c for u in m.users)]

    def _after(self, c: Cluster) -> list[Cluster]:
        """Clusters that must run after ``c``: its users and its control successors'."""
        return self._with_control(c, self.users(c), lambda m: m.control_successors)

    def _before(self, c: Cluster) -> list[Cluster]:
        """Clusters that must run before ``c``: its operands' and control predecessors'."""
        return self._with_control(c, self.operands(c), lambda m: m.control_predecessors)

    def _with_control(self, c: Cluster, data: list[Cluster],
                      edges: Callable[[Instruction], Iterable[Instruction]]) -> list[Cluster]:
        out = {id(x): x for x in data}
        for m in c.members:
            for i in (edges(m) if m.has_control_dependencies else ()):
                x = self._of.get(id(i))
                if x is not None and x is not c:
                    out.setdefault(id(x), x)
        return list(out.values())

    def control_joined(self, a: Cluster, b: Cluster) -> bool:
        """Does a control edge run between a member of ``a`` and one of ``b``?"""
        ids = {id(m) for m in b.members}
        return any(id(s) in ids for m in a.members if m.has_control_dependencies
                   for s in (*m.control_successors, *m.control_predecessors))

    def _reaches(self, starts: Iterable[Cluster], target: Cluster, skip: Cluster) -> bool:
        stack = [s for s in starts if s is not skip and s is not target and s.index < target.index]
        seen: set[int] = set()
        while stack:
            c = stack.pop()
            if id(c) in seen:
                continue
            seen.add(id(c))
            for u in self._after(c):
                if u is target:
                    return True
                if u is not skip and u.index < target.index:
                    stack.append(u)
        return False

    def would_cycle(self, a: Cluster, b: Cluster) -> bool:
        """Would merging ``a`` and ``b`` create a cycle (a path of operands or
        control edges between them through a third cluster)? Mirrors the
        reachability check of XLA's multi-output fusion
        (xla/service/multi_output_fusion.cc).  Also True when the merge would take
        in a control edge between them whose order one kernel does not keep
        (``keeps_in_place_order``)."""
        if a is b:
            return False
        lo, hi = (a, b) if a.index < b.index else (b, a)
        # only the later one can be reached from the earlier one
        return self._reaches(self._after(lo), hi, lo) or not keeps_in_place_order(a.members, b.members)

    # -- mutation ----------------------------------------------------------------
    def merge(self, a: Cluster, b: Cluster) -> Cluster:
        """Merges ``b`` into ``a`` (the caller checked ``would_cycle``)."""
        if a is b:
            return a
        new_index = max(a.index, b.index)
        a.members.extend(b.members)
        for m in b.members:
            self._of[id(m)] = a
        broken = any(u.index <= new_index for u in self._after(a)) or any(
            o.index >= new_index for o in self._before(a)
        )
        a.index = new_index
        if broken:
            self._renumber()
        return a

    def duplicate_into(self, producer: Instruction, consumer: Cluster) -> Instruction:
        """Clones ``producer`` for the members of ``consumer`` that use it and adds
        the clone to ``consumer`` (XLA's instruction fusion duplicates cheap
        producers the same way, keeping the original for its other users)."""
        clone = self._tentative.insert_after(producer, producer.clone("dup"))
        for p in producer.control_predecessors:  # the copy keeps the original's order
            self._tentative.add_control_predecessor(clone, p)
        for s in producer.control_successors:
            self._tentative.add_control_predecessor(s, clone)
        for m in list(consumer.members):
            for i, op in enumerate(m.operands):
                if op is producer:
                    self._tentative.replace_operand(m, i, clone, erase_dead=False)
        consumer.members.append(clone)
        self._of[id(clone)] = consumer
        self.clones.append((producer, clone))
        return clone

    def duplicate_cluster_into(self, c: Cluster, consumer: Cluster) -> None:
        """Clones into ``consumer`` every member of ``c`` it reads, directly or
        through the clones (``duplicate_into`` per member, users first), so that
        ``consumer`` computes ``c``'s value itself (XLA:GPU's priority fusion
        duplicates a fusion into each of its consumers this way)."""
        pending = list(c.members)
        while True:
            ready = [m for m in pending if any(self._of[id(u)] is consumer for u in m.users)]
            if not ready:
                return
            for m in ready:
                self.duplicate_into(m, consumer)
                pending.remove(m)

    def _renumber(self) -> None:
        """A fresh topological order of the contracted graph (Kahn's algorithm,
        ties by the old numbers)."""
        clusters = list(self)
        indeg = {id(c): len(self._before(c)) for c in clusters}
        heap = [(c.index, n, c) for n, c in enumerate(clusters) if indeg[id(c)] == 0]
        heapq.heapify(heap)
        order = 0
        tie = len(clusters)
        while heap:
            _, _, c = heapq.heappop(heap)
            c.index = order
            order += 1
            for u in self._after(c):
                indeg[id(u)] -= 1
                if indeg[id(u)] == 0:
                    tie += 1
                    heapq.heappush(heap, (u.index, tie, u))
        if order != len(clusters):
            raise AssertionError("the contracted graph has a cycle")  # pragma: no cover - merge checks prevent it

    # -- rewrite -------------------------------------------------------------------
    def apply(
        self,
        *,
        kind: Callable[[list[Instruction], list[Instruction]], str] | None = None,
        name: str = "fusion",
        min_size: int = 2,
        rewriter: Rewriter | None = None,
    ) -> list[Instruction]:
        """Outlines every cluster with at least ``min_size`` members that are not
        scalar constants or get-tuple-elements; returns the new fusions. Clones
        whose original lost all its users replace nothing: the original is removed."""
        kind = kind or fusion_kind
        rw = rewriter or Rewriter()
        originals = {id(clone): original for original, clone in self.clones}

        def outlined(c: Cluster) -> bool:
            real = [m for m in c.members if not _trivial(m)]
            has_fusion = any(m.opcode is HloOpcode.FUSION for m in c.members)
            return len(real) >= min_size and not (len(real) == 1 and has_fusion)

        chosen = sorted((c for c in self if outlined(c) and self.outputs(c)), key=lambda c: c.index)
        keep = {id(c) for c in chosen}
        for c in self:
            if id(c) in keep:
                continue
            for m in reversed(c.members):  # undo duplications that fuse nothing
                original = originals.get(id(m))
                if original is not None and id(self._of[id(original)]) not in keep and m.parent is self.comp:
                    self._tentative.replace_all_uses_with(m, original)
                    self._tentative.erase(m)
        fusions: list[Instruction] = []
        bodies: list[Computation] = []  # of the fusions inlined: removed at the end, in one scan
        for c in chosen:
            region: list[Instruction] = []
            for m in c.members:
                if m.opcode is HloOpcode.FUSION:
                    bodies.append(m.fused_computation)
                    region.extend(inline_fusion(m, rw, remove_body=False))
                elif m.parent is self.comp:
                    region.append(m)
            region = [r for r in region if r.parent is self.comp]
            inside = {id(r) for r in region}
            outputs = [r for r in region if r is self.comp.root or any(id(u) not in inside for u in r.users)]
            fusions.append(outline_fusion(self.comp, region, kind=kind(region, outputs), name=name, keep_order=False,
                                          rewriter=rw))
        for original, _ in self.clones:  # duplicated into all its users: gone, with what only it read
            if original.parent is self.comp:
                rw.erase_if_dead(original)
        if bodies and self.comp.parent is not None:
            remove_uncalled(self.comp.parent, bodies, rw)
        if fusions:
            restore_topological_order(self.comp, rw)
        return fusions


def _trivial(instr: Instruction) -> bool:
    return instr.opcode is HloOpcode.GET_TUPLE_ELEMENT or (
        instr.opcode is HloOpcode.CONSTANT and instr.shape.is_array and instr.shape.num_elements == 1
    )
