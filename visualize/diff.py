"""Before/after matching of two modules: which instructions were kept, changed,
removed, added, or fused into which fusion.

XLA renames freely (``add.3`` becomes ``add.0`` inside a fusion), so matching
goes in rounds, each over what is still unmatched, in post order with fusion
bodies in place of their fusion: the exact name with the same opcode and shape
(XLA reuses names for other values); then opcode and metadata
(``op_name``, ``source_file``, ``source_line``); then structure (same opcode and
shape, in the same place of the graph: operands that are matched to the
after instruction's operands, or the same operand slot of matched users),
repeated until nothing new matches; then the name alone; then opcode and the name's stem (``add.3``
-> ``add``), which is how jax names what it lowers; then structure again.
Structure is what keeps a renamed instruction from reading as removed plus added.
"""

from __future__ import annotations

import collections
import re
from dataclasses import dataclass
from typing import Iterator

from hlo_analysis.patterns import Flow
from hlo_tools.ir import Instruction, Module
from hlo_tools.opcode import HloOpcode
from hlo_analysis.units import html_table

from .style import shorten

#: Statuses of top-level instructions (outside fusion bodies).
KEPT, CHANGED, REMOVED, ADDED, FUSED = "kept", "changed", "removed", "added", "fused"

_SUFFIX = re.compile(r"(\.(\d+|clone|remat\d*))+$")


def name_stem(name: str) -> str:
    """``add.3`` -> ``add``; ``exp.12.clone.1`` -> ``exp``."""
    return _SUFFIX.sub("", name) or name


def _walk(module: Module) -> Iterator[tuple[Instruction, Instruction]]:
    """(instruction, its top-level anchor) in post order, fusion bodies before
    their fusion; fused parameters are skipped (they are artifacts of fusion)."""
    fused = {id(c) for c in module.fusion_computations()}

    def body(fusion: Instruction, anchor: Instruction) -> Iterator[tuple[Instruction, Instruction]]:
        # an explicit stack: fusions nested to any depth, each after its own body
        stack = [iter(fusion.fused_computation.post_order())]
        after: list[Instruction | None] = [None]
        while stack:
            instr = next(stack[-1], None)
            if instr is None:
                stack.pop()
                done = after.pop()
                if done is not None:
                    yield done, anchor
            elif instr.opcode is HloOpcode.FUSION and instr.fused_computation is not None:
                stack.append(iter(instr.fused_computation.post_order()))
                after.append(instr)
            elif instr.opcode is not HloOpcode.PARAMETER:
                yield instr, anchor

    for comp in module.computations:
        if id(comp) in fused:
            continue
        for instr in comp.post_order():
            if instr.opcode is HloOpcode.FUSION and instr.fused_computation is not None:
                yield from body(instr, instr)
            yield instr, instr


def _metadata_key(instr: Instruction) -> tuple | None:
    raw = instr.attributes.get("metadata")
    if not raw:
        return None
    meta = instr.metadata or {}
    if not meta.get("op_name"):
        return None
    return instr.opcode_text, meta.get("op_name"), meta.get("source_file"), meta.get("source_line")


@dataclass(frozen=True)
class ModuleDiff:
    """The matching and what it says. Names are instruction names; statuses are
    for top-level instructions (those outside fusion bodies) of each module."""

    before: Module
    after: Module
    counterpart: dict[str, str]  # before name -> after name, at any depth
    before_status: dict[str, str]  # top-level before instruction -> kept|changed|removed|fused
    after_status: dict[str, str]  # top-level after instruction -> kept|changed|added|fused
    fused_into: dict[str, tuple[str, ...]]  # after fusion -> top-level before instructions now inside it
    changes: dict[str, str]  # before name -> what changed, for ``changed``
    opcode_counts: tuple[tuple[str, int, int], ...]  # (opcode, before, after), top-level only

    def names(self, status: str, side: str = "before") -> list[str]:
        table = self.before_status if side == "before" else self.after_status
        return [n for n, s in table.items() if s == status]

    def counts(self) -> dict[str, int]:
        c = collections.Counter(self.before_status.values())
        return {KEPT: c[KEPT], CHANGED: c[CHANGED], FUSED: c[FUSED], REMOVED: c[REMOVED],
                ADDED: sum(1 for s in self.after_status.values() if s == ADDED),
                "fusions": sum(1 for n in self.fused_into if self.fused_into[n])}

    def _repr_html_(self) -> str:
        """The notebook view: the counts, then the opcodes whose count changed."""
        counts = self.counts()
        rows = [(o, b, a, f"{a - b:+d}") for o, b, a in self.opcode_counts if a != b]
        notes = [", ".join(f"{k} {v}" for k, v in counts.items())]
        return html_table(f"diff {self.before.name} -> {self.after.name}", ("opcode", "before", "after", "delta"),
                          rows, notes)

    def as_dict(self) -> dict:
        return {"before": self.before.name, "after": self.after.name, "counts": self.counts(),
                "fused_into": {k: list(v) for k, v in self.fused_into.items()},
                "removed": self.names(REMOVED), "added": self.names(ADDED, "after"),
                "changed": self.changes,
                "opcode_counts": [{"opcode": o, "before": b, "after": a} for o, b, a in self.opcode_counts]}


def _shape_key(instr: Instruction) -> str:
    return instr.shape.to_text(print_layout=False)  # layout assignment changes layouts, not the value


def _place(instr: Instruction, flow: Flow, counterpart) -> tuple:
    """Opcode, shape and the (matched) operands; a leaf (constant, iota) by its literal and attributes."""
    if not instr.operands:
        if instr.opcode is HloOpcode.PARAMETER:
            return ("parameter", id(instr))  # by number within matched computations only
        attrs = tuple(sorted((k, v) for k, v in instr.attributes.items() if k != "metadata"))
        return (instr.opcode_text, _shape_key(instr), instr.literal, attrs)
    return (instr.opcode_text, _shape_key(instr), tuple(id(counterpart(flow.value(o))) for o in instr.operands))


def _structure(b_walk: list[Instruction], a_walk: list[Instruction], out: dict[Instruction, Instruction],
               taken: set[Instruction], fb: Flow, fa: Flow) -> None:
    """Matches by place in the graph until nothing new matches: forward (same
    opcode and shape, operands matched to the candidate's operands) then
    backward (the same operand slot of a matched pair of users)."""
    def pair(b: Instruction, a: Instruction) -> None:
        if b not in out and a not in taken and b.opcode_text == a.opcode_text and _shape_key(b) == _shape_key(a):
            out[b] = a
            taken.add(a)

    for _ in range(8):
        before = len(out)
        for b, a in list(out.items()):  # called computations of a matched pair: parameters by number, roots
            if b.opcode is HloOpcode.PARAMETER or len(b.called_computations) != len(a.called_computations):
                continue
            for cb, ca in zip(b.called_computations, a.called_computations):
                if len(cb.parameters) == len(ca.parameters):
                    for pb, pa in zip(cb.parameters, ca.parameters):
                        pair(pb, pa)
                if cb.root is not None and ca.root is not None:
                    pair(cb.root, ca.root)
        index: dict[tuple, collections.deque] = collections.defaultdict(collections.deque)
        for a in a_walk:
            if a not in taken:
                index[_place(a, fa, lambda o: o)].append(a)
        for b in b_walk:
            if b in out:
                continue
            ops = [out.get(fb.value(o)) for o in b.operands]
            if any(o is None for o in ops):
                continue
            a = _take(index.get(_place(b, fb, out.get)), taken)
            if a is not None:
                out[b] = a
                taken.add(a)
        for b in reversed(b_walk):
            a = out.get(b)
            if a is None or len(a.operands) != len(b.operands) or a.opcode_text != b.opcode_text:
                continue
            for ob, oa in zip(b.operands, a.operands):
                pair(fb.value(ob), fa.value(oa))
        if len(out) == before:
            return


def _take(queue: collections.deque | None, taken: set) -> Instruction | None:
    """The first instruction of ``queue`` not ``taken`` yet (dropping those that are), or None."""
    while queue and queue[0] in taken:
        queue.popleft()
    return queue.popleft() if queue else None


def match(before: Module, after: Module, *, structure: bool = True) -> dict[Instruction, Instruction]:
    """Before instruction -> after instruction, by name (same opcode and shape),
    metadata, structure, name alone, name stem and structure again (``structure=False``: names and metadata only, as
    before structure was matched)."""
    b_walk = [i for i, _ in _walk(before)]
    a_walk = [i for i, _ in _walk(after)]
    a_by_name = {i.name: i for i in a_walk}
    out: dict[Instruction, Instruction] = {}
    taken: set[Instruction] = set()
    for b in b_walk:  # a name XLA reused for another value (other opcode or shape) waits for structure
        a = a_by_name.get(b.name)
        if a is not None and a not in taken and (not structure or (
                a.opcode_text == b.opcode_text and _shape_key(a) == _shape_key(b))):
            out[b] = a
            taken.add(a)
    fb, fa = (Flow(before), Flow(after)) if structure else (None, None)
    if structure:  # entry parameters: by number
        a_params = {p.parameter_number: p for p in after.entry.parameters}
        for p in before.entry.parameters:
            q = a_params.get(p.parameter_number)
            if p not in out and q is not None and q not in taken and _shape_key(p) == _shape_key(q):
                out[p] = q
                taken.add(q)
    rounds = [_metadata_key, "structure", lambda i: i.name, lambda i: (i.opcode_text, name_stem(i.name)), "structure"]
    for key_fn in rounds:
        if key_fn == "structure":
            if structure:
                _structure(b_walk, a_walk, out, taken, fb, fa)
            continue
        queues: dict[tuple, collections.deque] = collections.defaultdict(collections.deque)
        for a in a_walk:
            if a not in taken:
                k = key_fn(a)
                if k is not None:
                    queues[k].append(a)
        for b in b_walk:
            if b in out:
                continue
            k = key_fn(b)
            a = _take(queues.get(k) if k is not None else None, taken)
            if a is not None:
                out[b] = a
                taken.add(a)
    return out


def diff_modules(before: Module, after: Module, *, structure: bool = True) -> ModuleDiff:
    """Matches ``before`` against ``after`` and classifies every top-level instruction."""
    pairs = match(before, after, structure=structure)
    a_anchor = {i: anchor for i, anchor in _walk(after)}
    b_top = [i for i, anchor in _walk(before) if i is anchor]
    a_top = [i for i, anchor in _walk(after) if i is anchor]
    before_status: dict[str, str] = {}
    changes: dict[str, str] = {}
    fused_into: dict[str, list[str]] = collections.defaultdict(list)
    matched_after: set[Instruction] = set()
    changed_after: set[Instruction] = set()
    for b in b_top:
        a = pairs.get(b)
        if a is None:
            before_status[b.name] = REMOVED
            continue
        anchor = a_anchor.get(a, a)
        if anchor is not a:
            before_status[b.name] = FUSED
            fused_into[anchor.name].append(b.name)
            continue
        matched_after.add(a)
        why = _what_changed(b, a, pairs, a_anchor)
        before_status[b.name] = CHANGED if why else KEPT
        if why:
            changes[b.name] = why
            changed_after.add(a)
    after_status: dict[str, str] = {}
    for a in a_top:
        if a.name in fused_into:
            after_status[a.name] = CHANGED if a in matched_after else FUSED
        elif a in matched_after:
            after_status[a.name] = CHANGED if a in changed_after else KEPT
        else:
            after_status[a.name] = ADDED
    b_ops = collections.Counter(i.opcode_text for i in b_top)
    a_ops = collections.Counter(i.opcode_text for i in a_top)
    counts = tuple(sorted(((op, b_ops[op], a_ops[op]) for op in b_ops | a_ops), key=lambda r: (-abs(r[2] - r[1]), r[0])))
    return ModuleDiff(before, after, {b.name: a.name for b, a in pairs.items()}, before_status, after_status,
                      {k: tuple(v) for k, v in fused_into.items()}, changes, counts)


def _what_changed(b: Instruction, a: Instruction, pairs: dict[Instruction, Instruction], a_anchor: dict) -> str:
    """Empty when ``a`` is ``b`` unchanged: same opcode, shape and (matched) operands."""
    why = []
    if b.opcode_text != a.opcode_text:
        why.append(f"opcode {b.opcode_text} -> {a.opcode_text}")
    if b.shape.to_text() != a.shape.to_text():
        why.append(f"shape {shorten(b.shape.to_text(), 60)} -> {shorten(a.shape.to_text(), 60)}")
    expected = []
    for o in b.operands:
        m = pairs.get(o)
        expected.append(None if m is None else a_anchor.get(m, m).name)
    if expected != [o.name for o in a.operands]:
        why.append("operands (" + shorten(", ".join("%" + o.name for o in b.operands), 80) + ") -> ("
                   + shorten(", ".join("%" + o.name for o in a.operands), 80) + ")")
    if b.opcode is HloOpcode.FUSION and a.opcode is HloOpcode.FUSION:
        ops_b = sorted(i.opcode_text for i in b.fused_computation)
        ops_a = sorted(i.opcode_text for i in a.fused_computation)
        if ops_b != ops_a:
            why.append(f"fused body {len(ops_b)} -> {len(ops_a)} instructions")
    return "; ".join(why)


def format_diff(d: ModuleDiff, limit: int = 20) -> str:
    """The diff as text: counts, fusions formed, removed/added/changed, per-opcode counts."""

    def names(items: list[str]) -> str:
        shown = ", ".join("%" + n for n in items[:limit])
        return shown + (f", … and {len(items) - limit} more" if len(items) > limit else "")

    c = d.counts()
    lines = [
        f"--- before: {d.before.name} ({d.before.instruction_count} instructions, {len(d.before_status)} top-level)",
        f"+++ after:  {d.after.name} ({d.after.instruction_count} instructions, {len(d.after_status)} top-level)",
        f"top-level instructions: {c[KEPT]} kept, {c[CHANGED]} changed, {c[FUSED]} fused into {c['fusions']} fusions, "
        f"{c[REMOVED]} removed, {c[ADDED]} added",
    ]
    fusions = [(k, v) for k, v in d.fused_into.items() if v]
    if fusions:
        lines.append(f"\nfused ({len(fusions)} fusions):")
        after = {i.name: i for c_ in d.after.computations for i in c_}
        for name, members in fusions[:limit]:
            kind = after[name].fusion_kind if name in after else None
            lines.append(f"  %{name} ({kind or 'fusion'}) <- {names(list(members))}")
        if len(fusions) > limit:
            lines.append(f"  … and {len(fusions) - limit} more fusions")
    for title, items in (("removed", d.names(REMOVED)), ("added", d.names(ADDED, "after"))):
        if items:
            lines.append(f"\n{title} ({len(items)}): {names(items)}")
    if d.changes:
        lines.append(f"\nchanged ({len(d.changes)}):")
        for n, why in list(d.changes.items())[:limit]:
            lines.append(f"  %{n}: {why}")
        if len(d.changes) > limit:
            lines.append(f"  … and {len(d.changes) - limit} more")
    width = max([len("opcode")] + [len(o) for o, _, _ in d.opcode_counts])
    lines.append("\nopcode counts outside fusion bodies:")
    lines.append(f"  {'opcode':<{width}}  before   after   delta")
    for op, nb, na in d.opcode_counts:
        lines.append(f"  {op:<{width}}  {nb:>6}  {na:>6}  {na - nb:>+6}")
    return "\n".join(lines) + "\n"
