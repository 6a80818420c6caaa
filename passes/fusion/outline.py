"""The ``inline-fusions`` pass. The outliner itself is ``hlo_tools.outline``."""

from __future__ import annotations

from dataclasses import dataclass

from hlo_tools import HloOpcode, Module
from hlo_tools.outline import inline_fusion
from hlo_tools.rewriter import Rewriter

from passes.base import FusionPass


@dataclass(frozen=True)
class InlineFusions(FusionPass):
    """Inlines every fusion of the module (e.g. to unfuse XLA's optimized module)."""

    name = "inline-fusions"

    def run(self, module: Module) -> bool:
        rewriter = Rewriter()
        for comp in list(module.computations):
            if comp.parent is None:
                continue
            for instr in list(comp):
                if instr.opcode is HloOpcode.FUSION and instr.parent is comp:
                    inline_fusion(instr, rewriter)
        return rewriter.changed
