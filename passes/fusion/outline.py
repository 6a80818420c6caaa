"""``outline_fusion`` turns a region of one computation into a fused computation
and a ``fusion`` instruction, like XLA's HloComputation::CreateFusionInstruction;
``inline_fusion`` undoes it.  The building block of every fusion pass."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from hlo_tools import Computation, HloOpcode, Instruction, IrError, Module, Shape

from passes.base import Pass
from fusion_analysis.legality import path_around
from passes.registry import register_pass


class FusionError(IrError):
    """The instructions do not form a region that can be fused."""


def fusion_kind(region: list[Instruction], outputs: list[Instruction]) -> str:
    """XLA's kinds: kInput when an output is a reduction, kOutput when the region
    holds a dot or convolution feeding its outputs, else kLoop."""
    if any(o.opcode in (HloOpcode.REDUCE, HloOpcode.REDUCE_WINDOW) for o in outputs):
        return "kInput"
    if any(i.opcode in (HloOpcode.DOT, HloOpcode.CONVOLUTION) for i in region):
        return "kOutput"
    return "kLoop"


def _check_region(comp: Computation, region: list[Instruction]) -> None:
    for instr in region:
        if instr.parent is not comp:
            raise FusionError(f"%{instr.name} is not in computation %{comp.name}")
        if instr.opcode is HloOpcode.PARAMETER:
            raise FusionError(f"cannot fuse parameter %{instr.name}")
        if instr.control_predecessors or instr.control_successors:
            raise FusionError(f"cannot fuse %{instr.name}: it has control dependencies")
    # convexity: nothing outside the region may lie on a path between two members
    around = path_around(region)
    if around is not None:
        x, u = around
        raise FusionError(f"fusing would create a cycle: %{x.name} is outside the region but uses it and feeds %{u.name}")


def outline_fusion(
    comp: Computation,
    instructions: Iterable[Instruction],
    *,
    kind: str | None = None,
    name: str = "fusion",
    computation_name: str = "fused_computation",
    keep_order: bool = True,
) -> Instruction:
    """Replaces ``instructions`` (a convex region of ``comp``) by one fusion.

    The fusion goes after the region's last member; when a user of an earlier
    member sat before that, the computation is re-sorted stably
    (``restore_topological_order``), so a scheduled module stays a valid
    schedule. ``keep_order=False`` leaves that to the caller (one re-sort after
    many outlines, as ``Clusters.apply`` does).

    Values used by the region but defined outside become the fusion's operands
    (``param_N`` in the fused computation, in order of first use); region members
    used outside (or the root) become its outputs: one output is the fusion's
    value, several make a tuple root and get-tuple-elements, like XLA's
    multi-output fusion.  Returns the fusion instruction.
    """
    module = comp.parent
    if module is None:
        raise FusionError("the computation must belong to a module")
    wanted = set(map(id, instructions))
    region = [i for i in comp if id(i) in wanted]  # keep computation order
    if len(region) != len(wanted):
        raise FusionError("every instruction must belong to the computation")
    if not region:
        raise FusionError("nothing to fuse")
    _check_region(comp, region)
    members = set(map(id, region))
    operands: list[Instruction] = []
    index: dict[int, int] = {}
    for instr in region:
        for op in instr.operands:
            if id(op) not in members and id(op) not in index:
                index[id(op)] = len(operands)
                operands.append(op)
    outputs = [i for i in region if i is comp.root or any(id(u) not in members for u in i.users)]

    fused = Computation(module.unique_computation_name(computation_name))
    mapping: dict[int, Instruction] = {}
    used = {i.name for i in region}
    for n, op in enumerate(operands):
        pname = f"param_{n}"
        while pname in used:
            pname += "_"
        p = Instruction(pname, HloOpcode.PARAMETER, op.shape, parameter_number=n)
        fused.add_instruction(p, unique=False)
        mapping[id(op)] = p
    for instr in region:
        clone = instr.clone("", new_operands=[mapping[id(o)] for o in instr.operands])
        fused.add_instruction(clone, unique=False)
        mapping[id(instr)] = clone
    if len(outputs) == 1:
        fused.root = mapping[id(outputs[0])]
        shape = outputs[0].shape
    else:
        shape = Shape.tuple_of(o.shape for o in outputs)
        fused.root = fused.add_instruction(Instruction("tuple", HloOpcode.TUPLE, shape, [mapping[id(o)] for o in outputs]))
    module.add_computation(fused)

    anchor = region[-1]
    fusion = Instruction(name, HloOpcode.FUSION, shape, operands, {"kind": kind or fusion_kind(region, outputs)})
    fusion.set_called_computations("calls", [fused])
    comp.add_instruction(fusion, after=anchor)
    if len(outputs) == 1:
        outputs[0].replace_all_uses_with(fusion)
    else:
        last = fusion
        for i, out in enumerate(outputs):
            gte = Instruction("get-tuple-element", HloOpcode.GET_TUPLE_ELEMENT, out.shape, [fusion], {"index": str(i)})
            comp.add_instruction(gte, after=last)
            last = gte
            out.replace_all_uses_with(gte)
    for instr in reversed(region):
        # users outside were rewired; users inside are removed first (reverse order)
        comp.remove_instruction(instr)
    if keep_order:
        restore_topological_order(comp)
    return fusion


def restore_topological_order(comp: Computation) -> bool:
    """Re-sorts ``comp`` so every instruction follows its operands and control
    predecessors, moving as little as possible (Kahn's algorithm, ties by the
    current position). In a scheduled module the instruction order is the
    schedule, which XLA reads back. Returns True if the order changed."""
    if comp.is_topologically_ordered():
        return False
    import heapq

    position = {id(i): n for n, i in enumerate(comp)}
    waiting = {id(i): len({id(d) for d in (*i.operands, *i.control_predecessors)}) for i in comp}
    ready = [(position[id(i)], i) for i in comp if waiting[id(i)] == 0]
    heapq.heapify(ready)
    order: list[Instruction] = []
    while ready:
        _, instr = heapq.heappop(ready)
        order.append(instr)
        for u in {id(u): u for u in (*instr.users, *instr.control_successors)}.values():
            waiting[id(u)] -= 1
            if waiting[id(u)] == 0:
                heapq.heappush(ready, (position[id(u)], u))
    comp.set_instruction_order(order)
    return True


def inline_fusion(fusion: Instruction) -> list[Instruction]:
    """Copies a fusion's body back into its computation in place of the fusion
    (get-tuple-elements of a multi-output fusion are replaced by the values they
    select).  The fused computation is removed when nothing else calls it.
    Returns the inlined instructions."""
    if fusion.opcode is not HloOpcode.FUSION or fusion.fused_computation is None:
        raise FusionError(f"%{fusion.name} is not a fusion")
    comp = fusion.parent
    fused = fusion.fused_computation
    mapping: dict[int, Instruction] = {}
    out: list[Instruction] = []
    for p in fused.parameters:
        mapping[id(p)] = fusion.operand(p.parameter_number)
    root = fused.root
    multi = root.opcode is HloOpcode.TUPLE and all(u.opcode is HloOpcode.GET_TUPLE_ELEMENT for u in fusion.users) and fusion is not comp.root
    for instr in fused.post_order():
        if instr.opcode is HloOpcode.PARAMETER or (multi and instr is root):
            continue
        clone = instr.clone("", new_operands=[mapping[id(o)] for o in instr.operands])
        name = clone.name
        comp.add_instruction(clone, before=fusion, unique=True)
        if clone.name != name and comp.get_instruction(name) is None:
            comp.rename_instruction(clone, name)
        mapping[id(instr)] = clone
        out.append(clone)
    if multi:
        for gte in fusion.users:
            gte.replace_all_uses_with(mapping[id(root.operand(gte.tuple_index))])
            comp.remove_instruction(gte)
    else:
        fusion.replace_all_uses_with(mapping[id(root)])
    comp.remove_instruction(fusion)
    module = comp.parent
    if module is not None and not any(fused in i.called_computations for i in module.instructions()):
        module.remove_computation(fused)
    return out


@register_pass
@dataclass(frozen=True)
class InlineFusions(Pass):
    """Inlines every fusion of the module (e.g. to unfuse XLA's optimized module)."""

    name = "inline-fusions"

    def run(self, module: Module) -> bool:
        changed = False
        for comp in list(module.computations):
            if comp.parent is None:
                continue
            for instr in list(comp):
                if instr.opcode is HloOpcode.FUSION and instr.parent is comp:
                    inline_fusion(instr)
                    changed = True
        return changed
