"""Outlining in the pass layer: ``outline_fusion`` whose kind defaults to the
one rule (``hlo_analysis.fusion_kind``), and the ``inline-fusions`` pass.  The outliner itself (one for the
whole project) is ``hlo_tools.outline``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from hlo_tools import HloOpcode, Instruction, Module
from hlo_tools import outline as _outline
from hlo_tools.outline import Kind, inline_fusion
from hlo_tools.rewriter import Rewriter

from hlo_analysis.fusion_kind import fusion_kind

from passes.base import FusionPass


def outline_fusion(comp, instructions: Iterable[Instruction], *, kind: Kind | None = None, **options) -> Instruction:
    """``hlo_tools.outline.outline_fusion`` whose kind defaults to ``fusion_kind``
    (kLoop/kInput/kOutput); ``options`` are that function's."""
    return _outline.outline_fusion(comp, instructions, kind=kind or fusion_kind, **options)


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
