"""Library dot fusion: wrap canonical dots in XLA:CPU's YNNPACK ``kCustom`` fusion.

XLA:CPU's stock pipeline hands non-batched 2-D f32 dots to YNNPACK through
``__ynn_fusion`` kCustom fusions (xla/backends/cpu/transforms/dot_library_rewriter.cc,
the "dot-library-rewriter" pass). The "as-written" pipeline disables that pass
with the other fusion passes, so a Python fusion pipeline that wants the same dot
kernels must form those fusions itself. Only the dot is wrapped (no epilogue):
what YNNPACK takes beyond that is XLA's business.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from hlo_tools import HloOpcode, Instruction, Module
from hlo_tools.outline import outline_fusion
from hlo_tools.rewriter import Rewriter
from hlo_tools.shape import Shape

from passes.base import FusionPass
from passes.layout import minor_to_major
from passes.fuel import consume_fuel
from .clusters import fusible_computations

YNN_BACKEND_CONFIG = '{"fusion_config":{"kind":"__ynn_fusion"}}'

#: (lhs, rhs, result) element types stock XLA:CPU hands YNNPACK (jaxlib 0.12's
#: dot-library-rewriter, checked on MaxText's bf16 train step: its bf16 dots run in
#: YNNPACK, and left to XLA's own emitter they take 10x longer).  XLA's ynn_support.cc
#: lists f32 and bf16 x bf16 -> f32; bf16 x bf16 -> bf16 is what stock wraps here.
LIBRARY_DOT_TYPES = frozenset({("f32", "f32", "f32"), ("bf16", "bf16", "f32"), ("bf16", "bf16", "bf16")})


def _library_form(instr: Instruction) -> str | None:
    """"canonical" for a dot YNNPACK takes as it is; "lhs-transposed" for one it
    takes once its lhs is transposed ([K,M] contracting its first matrix dim:
    XLA:CPU's own emitter runs those 10-20x slower than YNNPACK, measured on
    MaxText's backward dots); None otherwise.  Both need the element types of
    ``LIBRARY_DOT_TYPES``, leading batch dims (the same on both sides, in order),
    the rhs contracting its first or last non-batch dim, default layouts and no
    matrix dimension of size 1."""
    if instr.opcode is not HloOpcode.DOT or instr.operand_count != 2:
        return None
    dn = instr.dot_dimension_numbers
    lhs, rhs = instr.operand(0).shape, instr.operand(1).shape
    shapes = [instr.shape, lhs, rhs]
    if not all(s.is_array and s.rank >= 2 and tuple(minor_to_major(s)) == tuple(range(s.rank - 1, -1, -1))
               for s in shapes):
        return None
    if (lhs.element_type.value, rhs.element_type.value, instr.shape.element_type.value) not in LIBRARY_DOT_TYPES:
        return None
    nb = len(dn.lhs_batch_dims)
    batch = tuple(range(nb))
    if not (tuple(dn.lhs_batch_dims) == batch and tuple(dn.rhs_batch_dims) == batch
            and lhs.rank == nb + 2 and rhs.rank == nb + 2
            and tuple(dn.rhs_contracting_dims) in ((nb,), (nb + 1,))
            # YNN fails at run time on degenerate matrices ("Unsupported dot instruction")
            and all(d > 1 for s in (lhs, rhs) for d in s.dims[nb:])):
        return None
    if tuple(dn.lhs_contracting_dims) == (nb + 1,):
        return "canonical"
    if tuple(dn.lhs_contracting_dims) == (nb,):
        return "lhs-transposed"
    return None


def is_library_dot(instr: Instruction) -> bool:
    """A dot YNNPACK takes in XLA:CPU as it is: the forms XLA:CPU's stock pipeline
    hands it ([M,K]x[K,N] or [M,K]x[N,K] with leading batch dims)."""
    return _library_form(instr) == "canonical"


def _transpose_lhs(comp, dot: Instruction, rewriter: Rewriter) -> Instruction:
    """``dot`` rewritten to contract its lhs's last dim: the lhs transposed by a
    one-op loop fusion (a copy XLA:CPU emits at memory speed), the dot replaced."""
    lhs = dot.operand(0)
    dn = dot.dot_dimension_numbers
    nb = len(dn.lhs_batch_dims)
    perm = list(range(nb)) + [nb + 1, nb]
    dims = [lhs.shape.dims[d] for d in perm]
    shape = Shape.array(lhs.shape.element_type, dims, tuple(range(len(dims) - 1, -1, -1)))
    t = Instruction.create("transpose", shape, [lhs], name=f"{dot.name}.lhs_transposed",
                           dimensions="{" + ",".join(map(str, perm)) + "}")
    t.set_attribute("metadata", dot.attribute("metadata"))
    rewriter.insert_before(dot, t)
    new = dot.clone("canonical", new_operands=[t, dot.operand(1)])
    new.dot_dimension_numbers = dataclasses.replace(dn, lhs_contracting_dims=(nb + 1,))
    rewriter.replace_instruction(dot, new)
    outline_fusion(comp, [t], kind="kLoop", name="transpose_fusion", rewriter=rewriter)
    return new


@dataclass(frozen=True)
class LibraryDotFusion(FusionPass):
    """Wraps each library dot in a ``__ynn_fusion`` kCustom fusion, transposing
    the lhs first where that is all YNNPACK lacks."""

    name = "library-dot-fusion"

    def run(self, module: Module) -> bool:
        rewriter = Rewriter()
        for comp in fusible_computations(module):
            for instr in list(comp):
                form = _library_form(instr)
                if form is None or not consume_fuel(lambda: f"wrap %{instr.name} in a library fusion"
                                                    + (" (lhs transposed)" if form == "lhs-transposed" else "")):
                    continue
                if form == "lhs-transposed":
                    instr = _transpose_lhs(comp, instr, rewriter)
                fusion = outline_fusion(comp, [instr], kind="kCustom", name="ynn_fusion", rewriter=rewriter)
                rewriter.set_attribute(fusion, "backend_config", YNN_BACKEND_CONFIG)
        return rewriter.changed
