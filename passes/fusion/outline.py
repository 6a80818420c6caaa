"""The ``inline-fusions`` pass. The outliner itself is ``hlo_tools.outline``."""

from __future__ import annotations

from dataclasses import dataclass

from hlo_tools import HloOpcode, Module
from hlo_tools.outline import inline_fusion, remove_uncalled
from hlo_tools.rewriter import Rewriter

from passes.base import FusionPass


@dataclass(frozen=True)
class InlineFusions(FusionPass):
    """Inlines every fusion of the module (e.g. to unfuse XLA's optimized module)."""

    name = "inline-fusions"

    def run(self, module: Module) -> bool:
        rewriter = Rewriter()
        bodies = []
        for comp in list(module.computations):
            for instr in list(comp):
                if instr.opcode is HloOpcode.FUSION and instr.parent is comp:
                    bodies.append(instr.fused_computation)
                    # the bodies go in one scan at the end: one scan (and one rebuild of
                    # the module's name table) per fusion took minutes on 10,000 nested ones
                    inline_fusion(instr, rewriter, remove_body=False)
        remove_uncalled(module, dict.fromkeys(bodies), rewriter)
        return rewriter.changed
