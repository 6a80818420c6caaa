"""Outlining: a region of one computation becomes a fused computation.

``outline_fusion`` replaces the region in place by a ``fusion`` instruction,
like XLA's HloComputation::CreateFusionInstruction, and ``inline_fusion`` undoes
it; ``region_module`` builds the same fused computation into a standalone
module instead (to price a fusion that does not exist yet).  Both build the
body with ``fused_computation``: one parameter per outside value in order of
first use, the members cloned in computation order, one output or a tuple of
several, as XLA's multi-output fusion.

The kind (kLoop, kInput, ...) is the caller's: a string, or a rule
``kind(region, outputs) -> str`` (the analysis layer owns that rule).
"""

from __future__ import annotations

import heapq
from typing import Callable, Iterable, Mapping

from .errors import IrError
from .ir import Computation, Instruction, Module
from .opcode import HloOpcode
from .rewriter import Rewriter
from .shape import Shape

#: A fusion kind, or the rule that picks one from (region, outputs).
Kind = str | Callable[[list[Instruction], list[Instruction]], str]


class FusionError(IrError):
    """The instructions do not form a region that can be fused."""


def path_around(members: Iterable[Instruction], position: Mapping[int, int] | None = None
                ) -> tuple[Instruction, Instruction] | None:
    """A path that leaves the group and comes back, as (the outside instruction
    on it, the member it feeds), or None.  Fusing a group with such a path would
    put the fusion both before and after that instruction.  ``position``: id ->
    index in a topological order of the computation (``post_order``), for many
    questions about one computation: nothing after the last member can lead back
    to one, so the walk stops there instead of following every user downstream."""
    members = list(members)
    inside = {id(i) for i in members}
    last = max(position[id(i)] for i in members) if position is not None else None
    stack = [u for i in members for u in _after(i) if id(u) not in inside]
    seen: set[int] = set()
    while stack:
        x = stack.pop()
        if id(x) in seen or (last is not None and position.get(id(x), -1) > last):
            continue
        seen.add(id(x))
        for u in _after(x):
            if id(u) in inside:
                return x, u
            stack.append(u)
    return None


def _after(instr: Instruction) -> tuple[Instruction, ...]:
    """What must run after ``instr``: its users and control successors."""
    return (*instr.users, *instr.control_successors) if instr.has_control_dependencies else tuple(instr.users)


def in_dependency_order(region: list[Instruction]) -> list[Instruction]:
    """``region`` (in computation order) reordered so that each member follows
    the members it uses, moving as little as possible: computation order itself
    when it already is (a pass such as cse may leave a computation whose order
    is not topological; the printer then prints its post order)."""
    position = {id(i): n for n, i in enumerate(region)}
    if all(position.get(id(o), -1) < n for n, i in enumerate(region) for o in i.operands):
        return region
    return _stable_order(region, lambda i: i.operands, lambda i: i.users)


def _stable_order(items: list[Instruction], deps, users) -> list[Instruction]:
    """Kahn's algorithm over ``items`` (``deps``/``users`` outside them ignored),
    ties broken by the current position, so as little as possible moves."""
    position = {id(i): n for n, i in enumerate(items)}
    waiting = {id(i): len({id(d) for d in deps(i) if id(d) in position}) for i in items}
    ready = [(position[id(i)], i) for i in items if waiting[id(i)] == 0]
    heapq.heapify(ready)
    order: list[Instruction] = []
    while ready:
        _, instr = heapq.heappop(ready)
        order.append(instr)
        for u in {id(u): u for u in users(instr) if id(u) in position}.values():
            waiting[id(u)] -= 1
            if waiting[id(u)] == 0:
                heapq.heappush(ready, (position[id(u)], u))
    return order


def region_inputs(region: list[Instruction]) -> list[Instruction]:
    """Values the region uses but does not define, in order of first use."""
    members = {id(i) for i in region}
    inputs: dict[int, Instruction] = {}
    for instr in region:
        for op in instr.operands:
            if id(op) not in members and id(op) not in inputs:
                inputs[id(op)] = op
    return list(inputs.values())


def region_outputs(region: list[Instruction]) -> list[Instruction]:
    """Members used outside the region, or the root of their computation."""
    members = {id(i) for i in region}
    return [i for i in region if i.is_root or any(id(u) not in members for u in i.users)]


def _clone_member(instr: Instruction, into: Computation, mapping: dict[int, Instruction]) -> Instruction:
    clone = instr.clone("", new_operands=[mapping[id(o)] for o in instr.operands])
    return into.add_instruction(clone, unique=True)


def fused_computation(
    name: str,
    region: list[Instruction],
    inputs: list[Instruction],
    outputs: list[Instruction],
    *,
    add_member: Callable[[Instruction, Computation, dict[int, Instruction]], Instruction] = _clone_member,
) -> Computation:
    """A detached computation that computes ``outputs`` of ``region`` (in
    computation order) from parameters bound to ``inputs``: ``param_N``
    (suffixed ``_`` when a member has that name), the members under their own
    names, and a tuple root when there are several outputs.  ``add_member``
    copies one member into the body (default: a clone on the mapped operands)."""
    fused = Computation(name)
    taken = {i.name for i in region}
    mapping: dict[int, Instruction] = {}
    for n, op in enumerate(inputs):
        pname = f"param_{n}"
        while pname in taken:
            pname += "_"
        mapping[id(op)] = fused.add_instruction(Instruction(pname, HloOpcode.PARAMETER, op.shape, parameter_number=n), unique=False)
    for instr in region:
        mapping[id(instr)] = add_member(instr, fused, mapping)
    if len(outputs) == 1:
        fused.set_root(mapping[id(outputs[0])])
    else:
        shape = Shape.tuple_of(o.shape for o in outputs)
        fused.set_root(fused.add_instruction(Instruction("tuple", HloOpcode.TUPLE, shape, [mapping[id(o)] for o in outputs])))
    return fused


def _tuple_order(region: list[Instruction], outputs: list[Instruction]) -> list[Instruction]:
    """``outputs`` in region order, except that a member multi-output fusion's
    get-tuple-elements come in its tuple's order, where its fusion stands: a
    merged fusion keeps its outputs' order, and XLA's emitter takes the first
    reduction among them as the hero."""
    at = {id(i): n for n, i in enumerate(region)}

    def key(o: Instruction) -> tuple[int, int]:
        if o.opcode is HloOpcode.GET_TUPLE_ELEMENT and id(o.operand(0)) in at:
            return at[id(o.operand(0))], o.tuple_index
        return at[id(o)], -1
    return sorted(outputs, key=key)


def _pick_kind(kind: Kind, region: list[Instruction], outputs: list[Instruction]) -> str:
    return kind if isinstance(kind, str) else kind(region, outputs)


def check_region(comp: Computation, region: list[Instruction]) -> None:
    """Raises FusionError unless ``region`` can be outlined from ``comp``:
    members of it, no parameters, and convex (nothing outside lies on a path
    of operands or control edges between two members)."""
    for instr in region:
        if instr.parent is not comp:
            raise FusionError(f"%{instr.name} is not in computation %{comp.name}")
        if instr.opcode is HloOpcode.PARAMETER:
            raise FusionError(f"cannot fuse parameter %{instr.name}")
    around = path_around(region)
    if around is not None:
        x, u = around
        raise FusionError(f"fusing would create a cycle: %{x.name} is outside the region but uses it and feeds %{u.name}")


def outline_fusion(
    comp: Computation,
    instructions: Iterable[Instruction],
    *,
    kind: Kind,
    name: str = "fusion",
    computation_name: str = "fused_computation",
    keep_order: bool = True,
    rewriter: Rewriter | None = None,
) -> Instruction:
    """Replaces ``instructions`` (a convex region of ``comp``) by one fusion;
    returns it.  Every edit goes through ``rewriter`` (a fresh one if None).

    The fusion goes after the region's last member; when a user of an earlier
    member sat before that, the computation is re-sorted stably
    (``restore_topological_order``), so a scheduled module stays a valid
    schedule. ``keep_order=False`` leaves that to the caller (one re-sort after
    many outlines).  Values used by the region but defined outside become the
    fusion's operands; region members used outside (or the root) its outputs:
    one output is the fusion's value, several make a tuple root and
    get-tuple-elements.  Control edges from and to outside the region become
    the fusion's; those between members end inside the one kernel (the caller
    checked that its order there keeps what they ordered:
    ``passes.fusion.clusters.Clusters.would_cycle``)."""
    rw = rewriter or Rewriter()
    module = comp.parent
    if module is None:
        raise FusionError("the computation must belong to a module")
    wanted = set(map(id, instructions))
    placed = [i for i in comp if id(i) in wanted]
    region = in_dependency_order(placed)
    if len(region) != len(wanted):
        raise FusionError("every instruction must belong to the computation")
    if not region:
        raise FusionError("nothing to fuse")
    check_region(comp, region)
    inputs = region_inputs(region)
    outputs = region_outputs(region)
    fused = fused_computation(module.unique_computation_name(computation_name), region, inputs, outputs)
    rw.add_computation(module, fused)

    fusion = Instruction(name, HloOpcode.FUSION, fused.root.shape, inputs, {"kind": _pick_kind(kind, region, outputs)})
    fusion.set_called_computations("calls", [fused])
    rw.insert_after(placed[-1], fusion)  # after the region's last member in computation order
    _move_control_edges(region, fusion, rw)
    if len(outputs) == 1:
        rw.replace_all_uses_with(outputs[0], fusion)
    else:
        last = fusion
        for i, out in enumerate(outputs):
            gte = Instruction("get-tuple-element", HloOpcode.GET_TUPLE_ELEMENT, out.shape, [fusion], {"index": str(i)})
            last = rw.insert_after(last, gte)
            rw.replace_all_uses_with(out, gte)
    for instr in reversed(region):
        # users outside were rewired; users inside are removed first (reverse order)
        rw.erase(instr)
    if keep_order:
        restore_topological_order(comp, rw)
    return fusion


def _move_control_edges(region: list[Instruction], fusion: Instruction, rw: Rewriter) -> None:
    """Hands the control edges between ``region`` and the rest to ``fusion`` and
    drops the members' own (XLA's fusion takes its members' control edges)."""
    inside = {id(i) for i in region}
    preds = {id(p): p for i in region for p in i.control_predecessors if id(p) not in inside}
    succs = {id(s): s for i in region for s in i.control_successors if id(s) not in inside}
    for i in region:
        for p in list(i.control_predecessors):
            rw.remove_control_predecessor(i, p)
        for s in list(i.control_successors):
            rw.remove_control_predecessor(s, i)
    for p in preds.values():
        rw.add_control_predecessor(fusion, p)
    for s in succs.values():
        rw.add_control_predecessor(s, fusion)


def restore_topological_order(comp: Computation, rewriter: Rewriter | None = None) -> bool:
    """Re-sorts ``comp`` so every instruction follows its operands and control
    predecessors, moving as little as possible (Kahn's algorithm, ties by the
    current position). In a scheduled module the instruction order is the
    schedule, which XLA reads back. Returns True if the order changed."""
    if comp.is_topologically_ordered():
        return False
    order = _stable_order(list(comp), lambda i: (*i.operands, *i.control_predecessors),
                          lambda i: (*i.users, *i.control_successors))
    (rewriter or Rewriter()).set_instruction_order(comp, order)
    return True


def inline_fusion(fusion: Instruction, rewriter: Rewriter | None = None, *,
                  remove_body: bool = True) -> list[Instruction]:
    """Copies a fusion's body back into its computation in place of the fusion
    (get-tuple-elements of a multi-output fusion are replaced by the values they
    select); each inlined instruction takes the fusion's control edges.  The
    fused computation is removed when nothing else calls it
    (``remove_body=False``: left for the caller, who inlines many fusions and
    removes their bodies with one scan of the module, ``remove_uncalled``).
    Returns the inlined instructions."""
    if fusion.opcode is not HloOpcode.FUSION or fusion.fused_computation is None:
        raise FusionError(f"%{fusion.name} is not a fusion")
    rw = rewriter or Rewriter()
    comp = fusion.parent
    fused = fusion.fused_computation
    mapping: dict[int, Instruction] = {id(p): fusion.operand(p.parameter_number) for p in fused.parameters}
    out: list[Instruction] = []
    root = fused.root
    multi = root.opcode is HloOpcode.TUPLE and all(u.opcode is HloOpcode.GET_TUPLE_ELEMENT for u in fusion.users) and fusion is not comp.root
    for instr in fused.post_order():
        if instr.opcode is HloOpcode.PARAMETER or (multi and instr is root):
            continue
        clone = instr.clone("", new_operands=[mapping[id(o)] for o in instr.operands])
        name = clone.name
        rw.insert_before(fusion, clone)
        if clone.name != name and comp.get_instruction(name) is None:
            rw.rename(clone, name)
        mapping[id(instr)] = clone
        out.append(clone)
    if multi:
        for gte in fusion.users:
            rw.replace_all_uses_with(gte, mapping[id(root.operand(gte.tuple_index))])
            rw.erase(gte)
    else:
        rw.replace_all_uses_with(fusion, mapping[id(root)])
    for p in list(fusion.control_predecessors):  # each inlined instruction keeps the fusion's order
        rw.remove_control_predecessor(fusion, p)
        for clone in out:
            rw.add_control_predecessor(clone, p)
    for s in list(fusion.control_successors):
        rw.remove_control_predecessor(s, fusion)
        for clone in out:
            rw.add_control_predecessor(s, clone)
    rw.erase(fusion)
    if remove_body and comp.parent is not None:
        remove_uncalled(comp.parent, [fused], rw)
    return out


def remove_uncalled(module: Module, comps: Iterable[Computation], rewriter: Rewriter | None = None) -> None:
    """Removes those of ``comps`` that no instruction of ``module`` calls (one scan)."""
    comps = [c for c in comps if c.parent is module]
    if not comps:
        return
    called = {id(c) for i in module.instructions() for c in i.called_computations}
    dead = [c for c in comps if id(c) not in called]
    if dead:
        (rewriter or Rewriter()).remove_computations(module, dead)


def region_module(instructions: Iterable[Instruction], *, kind: Kind, root: Instruction | None = None,
                  name: str = "region", merge_custom: bool = False) -> Module:
    """A standalone module whose entry computes ``instructions`` (members of one
    computation, left untouched) as one fusion: values they use from outside
    become entry parameters.  The fusion's output is ``root`` when given
    (members also used outside are then duplicated into the fusion, as XLA does
    when it fuses a producer with other users); otherwise every member used
    outside the region (or the last member), a tuple when several.

    A member that is itself a (non-custom, or with ``merge_custom`` any) fusion is
    merged: its body is copied in, as XLA's MergeFusionInstruction does.  Every
    computation a member calls is deep-copied along, so the module shares nothing
    with the original."""
    members = list(dict.fromkeys(instructions))
    if not members:
        raise ValueError("nothing to fuse")
    comp = members[0].parent
    if comp is None or any(m.parent is not comp for m in members):
        raise ValueError("every instruction must belong to one computation")
    ids = {id(m) for m in members}
    region = in_dependency_order([i for i in comp if id(i) in ids])
    if root is not None:
        if id(root) not in ids:
            raise ValueError(f"the root %{root.name} is not one of the instructions")
        outputs = [root]
    else:
        outputs = _tuple_order(region, region_outputs(region) or [region[-1]])
    module = Module(name)
    memo: dict[int, Computation] = {}

    def add_callees(instr: Instruction) -> Instruction:
        """``instr`` calling the module's copies of its computations."""
        for key, comps in instr.called_computation_map.items():
            instr.set_called_computations(key, [module.deep_clone_computation(c, memo) for c in comps])
        return instr

    def copy_member(instr: Instruction, into: Computation, mapping: dict[int, Instruction]) -> Instruction:
        clone = add_callees(instr.clone("", new_operands=[mapping[id(o)] for o in instr.operands]))
        return into.add_instruction(clone, unique=True)

    def add_member(instr: Instruction, into: Computation, mapping: dict[int, Instruction]) -> Instruction:
        if (instr.opcode is HloOpcode.FUSION and (merge_custom or instr.fusion_kind != "kCustom")
                and instr.fused_computation is not None):
            body = instr.fused_computation
            local = {id(p): mapping[id(instr.operand(p.parameter_number))] for p in body.parameters}
            for inner in body.post_order():
                if inner.opcode is not HloOpcode.PARAMETER:
                    local[id(inner)] = copy_member(inner, into, local)
            return local[id(body.root)]
        source = mapping.get(id(instr.operand(0))) if instr.opcode is HloOpcode.GET_TUPLE_ELEMENT else None
        if source is not None and source.opcode is HloOpcode.TUPLE and source.parent is into:
            # an output of a merged multi-output fusion: its value, as XLA reads
            # through the tuple when it merges the fusion (the hero stays visible)
            return source.operand(instr.tuple_index)
        return copy_member(instr, into, mapping)

    inputs = region_inputs(region)
    fused = fused_computation(f"fused_{name}", region, inputs, outputs, add_member=add_member)
    for dead in [i for i in fused if i.opcode is HloOpcode.TUPLE and not i.users and i is not fused.root]:
        fused.remove_instruction(dead)  # a merged fusion's tuple, every output read through
    fused.name = module.unique_computation_name(fused.name)
    module.add_computation(fused)
    entry = Computation("main", is_entry=True)
    params = []
    for n, op in enumerate(inputs):
        params.append(entry.add_instruction(Instruction(f"p{n}.{op.name}", HloOpcode.PARAMETER, op.shape, parameter_number=n), unique=False))
    fusion = Instruction("fusion", HloOpcode.FUSION, fused.root.shape, params, {"kind": _pick_kind(kind, region, outputs)})
    fusion.set_called_computations("calls", [fused])
    entry.set_root(entry.add_instruction(fusion, unique=False))
    module.add_computation(entry, entry=True)
    return module
