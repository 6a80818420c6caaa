"""The reducer's candidates: a module cut down to some instructions of one
computation, and still a module XLA accepts.

Keeping a set of instructions means keeping the subgraph they induce: a value
they use from an instruction that goes becomes a parameter of its shape (named
like the instruction it stands for), and what they compute that nothing kept
uses becomes the output (one value, or a tuple of several).  So any subset is a
valid module, which is what delta debugging needs: it tries subsets blindly.
Every edit goes through ``hlo_tools.Rewriter`` on a ``Module.clone``; the
module given is never touched.
"""

from __future__ import annotations

from typing import Collection

from hlo_tools import Computation, HloOpcode, Instruction, Module, Rewriter, Shape
from hlo_tools.outline import inline_fusion

#: Module attributes that describe the entry's signature: rewritten (layout) or
#: dropped (aliasing, donation, sharding propagation per parameter and output:
#: a list as long as the old signature) when a candidate changes it.
_SIGNATURE_ATTRIBUTES = ("input_output_alias", "buffer_donor", "allow_spmd_sharding_propagation_to_parameters",
                         "allow_spmd_sharding_propagation_to_output")


def reducible(comp: Computation) -> list[Instruction]:
    """The instructions of ``comp`` a reduction may drop: all but parameters."""
    return [i for i in comp if i.opcode is not HloOpcode.PARAMETER]


def keep_entry(module: Module, keep: Collection[str]) -> Module | None:
    """``module`` with only the entry instructions named in ``keep`` (and the
    parameters they use); None when that leaves nothing to compute."""
    m = module.clone()
    rw = Rewriter()
    if _cut(m.entry, set(keep), rw, force_root=False) is None:
        return None
    _tidy(m, rw)
    return m


def fusions(module: Module) -> list[str]:
    """Names of the entry's fusions whose bodies a reduction can cut into: each
    body called by that one fusion only (a shared body would change for all)."""
    callers: dict[int, int] = {}
    for i in module.instructions():
        for c in i.called_computations:
            callers[id(c)] = callers.get(id(c), 0) + 1
    return [i.name for i in module.entry if i.opcode is HloOpcode.FUSION and i.fused_computation is not None
            and callers.get(id(i.fused_computation)) == 1]


def keep_fused(module: Module, fusion: str, keep: Collection[str]) -> Module | None:
    """``module`` with the body of entry fusion ``fusion`` cut down to the
    instructions named in ``keep``: a value the body loses becomes a new
    parameter of the body, fed by a new entry parameter.  The body's root may
    change (and the fusion's shape with it) only where nothing but the entry's
    output uses the fusion; otherwise the root is kept.  None when nothing is left."""
    m = module.clone()
    rw = Rewriter()
    instr = m.entry.get_instruction(fusion)
    if instr is None or instr.opcode is not HloOpcode.FUSION or instr.fused_computation is None:
        return None
    body = instr.fused_computation
    root = m.entry.root
    free = instr is root or all(u is root and root.opcode is HloOpcode.TUPLE for u in instr.users)
    added = _cut(body, set(keep), rw, force_root=not free)
    if added is None:
        return None
    operands = list(instr.operands)
    for p in added:
        operands.append(rw.insert_before(instr, Instruction(f"{fusion}.{p.name}", HloOpcode.PARAMETER, p.shape,
                                                            parameter_number=_next_parameter(m.entry))))
    used = [p for p in body.parameters if p.users or p.is_root]
    for p in body.parameters:
        if not (p.users or p.is_root):
            rw.erase(p)
    rw.replace_operands(instr, [operands[p.parameter_number] for p in used])
    for n, p in enumerate(used):
        p.parameter_number = n
    if instr.shape != body.root.shape:
        rw.set_shape(instr, body.root.shape)
        if instr is not root:
            rw.set_shape(root, Shape.tuple_of(o.shape for o in root.operands))
    _tidy(m, rw)
    return m


def inlinable(module: Module) -> list[str]:
    """Names of the entry's fusions and calls that ``inline`` can replace by
    their bodies (a call with control edges stays: its order would be lost)."""
    from passes.fusion.call_inliner import inlinable_calls  # lazy: passes is heavy

    calls = {id(i) for i in inlinable_calls(module.entry)}
    return [i.name for i in module.entry
            if (i.opcode is HloOpcode.FUSION and i.fused_computation is not None) or id(i) in calls]


def inline(module: Module, name: str) -> Module | None:
    """``module`` with entry fusion or call ``name`` replaced by its body's
    instructions (``hlo_tools.outline.inline_fusion``, the call inliner's
    ``inline_call``): for a failure that is not about the fusion, and so that
    the next round can cut into what a call computes."""
    from passes.fusion.call_inliner import inline_call  # lazy: passes is heavy

    if name not in inlinable(module):
        return None
    m = module.clone()
    instr = m.entry.get_instruction(name)
    rw = Rewriter()
    if instr.opcode is HloOpcode.FUSION:
        inline_fusion(instr, rw)
    else:
        inline_call(instr, rw)
    _tidy(m, rw)
    return m


def loops(module: Module) -> list[str]:
    """Names of the entry's ``while`` loops whose body ``loop_body`` can make the
    module: a body that reads its state through get-tuple-elements only."""
    out = []
    for i in module.entry:
        body = i.called_computation("body") if i.opcode is HloOpcode.WHILE else None
        if body is not None and body.parameters and all(
                u.opcode is HloOpcode.GET_TUPLE_ELEMENT for u in body.parameters[0].users):
            out.append(i.name)
    return out


def loop_body(module: Module, name: str) -> Module | None:
    """A module whose entry is one iteration of entry loop ``name``: a copy of its
    body, the loop state's elements it reads as parameters (XLA feeds no tuple
    parameters), the next state as the output. The way into a scanned layer: a
    failure that one iteration shows is then cut down inside the body."""
    if name not in loops(module):
        return None
    m = module.clone()
    rw = Rewriter()
    body = m.entry.get_instruction(name).called_computation("body")
    old_entry = m.entry
    entry = m.deep_clone_computation(body)
    state = entry.parameters[0]
    reads = sorted({u.tuple_index for u in state.users})
    params = {}
    for n, index in enumerate(reads):
        shape = state.shape.tuple_shapes[index]
        params[index] = rw.insert_before(state, Instruction(f"state.{index}", HloOpcode.PARAMETER, shape,
                                                            parameter_number=n))
    for u in list(state.users):
        rw.replace_all_uses_with(u, params[u.tuple_index])
        rw.erase(u)
    rw.erase(state)
    rw.remove_computation(m, entry)
    old_entry.is_entry = False
    rw.add_computation(m, entry, entry=True)
    _tidy(m, rw)
    return m


def _next_parameter(comp: Computation) -> int:
    return max((p.parameter_number for p in comp.parameters), default=-1) + 1


def _cut(comp: Computation, keep: set[str], rw: Rewriter, *, force_root: bool) -> list[Instruction] | None:
    """Cuts ``comp`` down to ``keep`` in place (see the module docstring);
    returns the parameters it added, in order, or None when nothing is kept.
    ``force_root``: the root stays (the computation's shape must not change)."""
    if force_root and comp.root is not None:
        keep = keep | {comp.root.name}
    keep = _without_tuple_inputs(comp, keep)

    def kept(i: Instruction) -> bool:
        return i.opcode is HloOpcode.PARAMETER or i.name in keep

    members = [i for i in comp if i.name in keep and i.opcode is not HloOpcode.PARAMETER]
    if not members:
        return None
    added: list[tuple[Instruction, str]] = []
    number = _next_parameter(comp)
    for x in comp.instructions:
        users = [u for u in x.users if kept(u)] if not kept(x) else []
        if not users:
            continue
        p = rw.insert_before(x, Instruction(f"{x.name}.cut", HloOpcode.PARAMETER, x.shape,
                                            parameter_number=number + len(added)))
        for u in users:
            for index, op in enumerate(u.operands):
                if op is x:
                    rw.replace_operand(u, index, p, erase_dead=False)
        added.append((p, x.name))
    sinks = [comp.root] if force_root else [i for i in members if i.is_root or not any(kept(u) for u in i.users)]
    if len(sinks) == 1:
        rw.set_root(comp, sinks[0])
    else:
        out = Instruction("tuple", HloOpcode.TUPLE, Shape.tuple_of(s.shape for s in sinks), sinks)
        rw.set_root(comp, rw.append(comp, out))
    new = {id(p) for p, _ in added} | {id(comp.root)}
    for x in reversed(comp.post_order()):
        if not kept(x) and id(x) not in new:
            rw.erase(x)
    if force_root:  # what the kept root does not use is dead
        from passes.dce import remove_dead_instructions  # lazy: passes is heavy

        remove_dead_instructions(comp, rw)
    for p, name in added:  # the parameter takes the name of the value it stands for
        if comp.get_instruction(name) is None:
            rw.rename(p, name)
    return [p for p, _ in added]


def _without_tuple_inputs(comp: Computation, keep: set[str]) -> set[str]:
    """``keep`` less each get-tuple-element whose tuple goes: it becomes the
    parameter instead, an array one (XLA feeds no tuple parameters)."""
    keep = set(keep)
    for i in comp:  # operands first, so a chain of them goes at once
        if (i.name in keep and i.opcode is HloOpcode.GET_TUPLE_ELEMENT
                and i.operand(0).opcode is not HloOpcode.PARAMETER and i.operand(0).name not in keep):
            keep.discard(i.name)
    return keep


def _tidy(m: Module, rw: Rewriter) -> None:
    """After a cut: dead entry instructions, unused entry parameters (the rest
    renumbered in order) and uncalled computations go; the entry layout is
    rewritten to the new signature and aliasing that named the old one goes."""
    from passes.dce import remove_dead_instructions, remove_unreachable_computations  # lazy: passes is heavy

    entry = m.entry
    remove_dead_instructions(entry, rw)
    params = entry.parameters
    for p in params:
        if not p.users and not p.is_root:
            rw.erase(p)
    for n, p in enumerate(entry.parameters):
        p.parameter_number = n
    remove_unreachable_computations(m, rw)
    if m.entry_computation_layout is not None:
        signature = ", ".join(p.shape.to_text() for p in entry.parameters)
        rw.set_module_attribute(m, "entry_computation_layout", f"{{({signature})->{entry.root.shape.to_text()}}}")
    for key in _SIGNATURE_ATTRIBUTES:
        if key in m.attributes:
            rw.set_module_attribute(m, key, None)
