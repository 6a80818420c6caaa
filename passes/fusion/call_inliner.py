"""Call inlining (XLA's CallInliner, xla/service/call_inliner.cc).

jax lowers nested jitted functions (``jnp.where``, ``_where``, ...) to ``call``
instructions; a fusion pass cannot see through them, so the fusion pipeline
inlines them first, as XLA's own pipeline does before fusion.
(Belongs in ``passes/`` next to dce/cse; it lives here because the fusion
pipeline is its first user.)
"""

from __future__ import annotations

from dataclasses import dataclass

from hlo_tools import Computation, HloOpcode, Instruction, Module
from hlo_tools.rewriter import Rewriter

from passes.base import Pass
from passes.dce import remove_unreachable_computations


def inline_call(call: Instruction, rewriter: Rewriter | None = None) -> list[Instruction]:
    """Copies the called computation's body in place of ``call``; returns the copies."""
    rw = rewriter or Rewriter()
    callee = call.to_apply
    mapping: dict[int, Instruction] = {id(p): call.operand(p.parameter_number) for p in callee.parameters}
    out: list[Instruction] = []
    for instr in callee.post_order():
        if instr.opcode is HloOpcode.PARAMETER:
            continue
        clone = rw.insert_before(call, instr.clone("", new_operands=[mapping[id(o)] for o in instr.operands]))
        mapping[id(instr)] = clone
        out.append(clone)
    rw.replace_all_uses_with(call, mapping[id(callee.root)])
    rw.erase(call)
    return out


def inlinable_calls(comp: Computation) -> list[Instruction]:
    """The ``call``s of ``comp`` that can be inlined: a call with control edges
    stays, since its order would be lost."""
    return [i for i in comp if i.opcode is HloOpcode.CALL and i.to_apply is not None and not i.control_predecessors and not i.control_successors]


@dataclass(frozen=True)
class CallInliner(Pass):
    """Inlines every ``call`` (nested calls too), then drops computations nothing calls."""

    name = "call-inliner"

    def run(self, module: Module) -> bool:
        rewriter = Rewriter()
        for comp in list(module.computations):
            while True:
                calls = inlinable_calls(comp)
                if not calls:
                    break
                for call in calls:
                    inline_call(call, rewriter)
        if rewriter.changed:
            remove_unreachable_computations(module, rewriter)
        return rewriter.changed
