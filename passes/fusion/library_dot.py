"""Library dot fusion: wrap canonical dots in XLA:CPU's YNNPACK ``kCustom`` fusion.

XLA:CPU's stock pipeline hands non-batched 2-D f32 dots to YNNPACK through
``__ynn_fusion`` kCustom fusions (xla/backends/cpu/transforms/dot_library_rewriter.cc,
the "dot-library-rewriter" pass). The "as-written" pipeline disables that pass
with the other fusion passes, so a Python fusion pipeline that wants the same dot
kernels must form those fusions itself. Only the dot is wrapped (no epilogue):
what YNNPACK takes beyond that is XLA's business.
"""

from __future__ import annotations

from dataclasses import dataclass

from hlo_tools import HloOpcode, Instruction, Module
from hlo_tools.outline import outline_fusion
from hlo_tools.rewriter import Rewriter

from passes.base import Pass
from passes.fuel import consume_fuel
from .clusters import fusible_computations

YNN_BACKEND_CONFIG = '{"fusion_config":{"kind":"__ynn_fusion"}}'


def is_library_dot(instr: Instruction) -> bool:
    """A dot YNNPACK takes in XLA:CPU, in the forms XLA:CPU's stock pipeline hands
    it on the corpus: f32, leading batch dims (the same on both sides, in order),
    the lhs contracting its last dim and the rhs its first or last non-batch dim
    ([M,K]x[K,N] or [M,K]x[N,K]), default layouts, no matrix dimension of size 1."""
    if instr.opcode is not HloOpcode.DOT:
        return False
    dn = instr.dot_dimension_numbers
    lhs, rhs = instr.operand(0).shape, instr.operand(1).shape
    shapes = [instr.shape, lhs, rhs]
    if not all(s.is_array and s.element_type.value == "f32" and s.rank >= 2 for s in shapes):
        return False
    if any(s.layout is not None and s.layout.minor_to_major and tuple(s.layout.minor_to_major) != tuple(range(s.rank - 1, -1, -1))
           for s in shapes):
        return False
    nb = len(dn.lhs_batch_dims)
    batch = tuple(range(nb))
    return (
        tuple(dn.lhs_batch_dims) == batch
        and tuple(dn.rhs_batch_dims) == batch
        and lhs.rank == nb + 2
        and rhs.rank == nb + 2
        and tuple(dn.lhs_contracting_dims) == (nb + 1,)
        and tuple(dn.rhs_contracting_dims) in ((nb,), (nb + 1,))
        # YNN fails at run time on degenerate matrices ("Unsupported dot instruction")
        and all(d > 1 for s in (lhs, rhs) for d in s.dims[nb:])
    )


@dataclass(frozen=True)
class LibraryDotFusion(Pass):
    """Wraps each library dot in a ``__ynn_fusion`` kCustom fusion."""

    name = "library-dot-fusion"

    def run(self, module: Module) -> bool:
        rewriter = Rewriter()
        for comp in fusible_computations(module):
            for instr in list(comp):
                if is_library_dot(instr) and consume_fuel(lambda: f"wrap %{instr.name} in a library fusion"):
                    fusion = outline_fusion(comp, [instr], kind="kCustom", name="ynn_fusion", rewriter=rewriter)
                    rewriter.set_attribute(fusion, "backend_config", YNN_BACKEND_CONFIG)
        return rewriter.changed
