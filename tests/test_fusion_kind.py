"""``hlo_analysis.fusion_kind``: XLA:GPU's label for a fusion whose hero is a
transpose (kInput: the shared-memory transpose emitter; kLoop otherwise), checked
against the labels XLA:GPU itself gave the corpus's fusions (jaxlib 0.12, H100)."""

from __future__ import annotations

import corpus
from hlo_analysis.fusion_kind import INPUT, LOOP, _REDUCTIONS, gpu_fusion_kind
from hlo_analysis.gpu_kernel_model import tiled_transpose
from hlo_analysis.gpu_kernel_model import transposes_minor
from hlo_tools import parse
from hlo_tools.opcode import ELEMENTWISE, HloOpcode

#: Ops that leave a transpose the fusion's hero (XLA's IsIntermediate, roughly).
_INTERMEDIATE = ELEMENTWISE | {HloOpcode.PARAMETER, HloOpcode.CONSTANT, HloOpcode.BROADCAST, HloOpcode.BITCAST,
                               HloOpcode.IOTA}


def _transpose_heroes():
    """(XLA's label, the transpose) of every fusion of the corpus's XLA:GPU stages
    whose one non-elementwise op is a transpose of the minor dimension."""
    for e in corpus.load():
        for stage in (s for s in e.stages if s.startswith("gpu_h100_after")):
            for comp in e.module(stage).computations:
                for f in comp:
                    body = f.fused_computation
                    if body is None or f.fusion_kind not in (INPUT, LOOP):
                        continue
                    inner = list(body)
                    ts = [x for x in inner if transposes_minor(x)]
                    if len(ts) == 1 and not any(x.opcode in _REDUCTIONS for x in inner) and all(
                            x is ts[0] or x.opcode in _INTERMEDIATE for x in inner):
                        yield f.fusion_kind, ts[0]


def test_transpose_rule_agrees_with_xla_gpus_own_labels():
    rows = list(_transpose_heroes())
    assert len(rows) > 500 and {k for k, _ in rows} == {INPUT, LOOP}
    agree = sum((kind == INPUT) == tiled_transpose(t) for kind, t in rows)
    assert agree / len(rows) >= 0.95, (agree, len(rows))


def test_a_packed_narrow_transpose_is_an_input_fusion():
    """Gemma-2's attention output: bf16 pairs moved from minor to major (XLA:GPU
    labels it kInput, its packed transpose); f32 pairs stay loops."""
    m = parse("""HloModule m
ENTRY e {
  p = bf16[4,2048,1024,2]{3,2,1,0} parameter(0)
  t = bf16[4,2,1024,2048]{3,2,1,0} transpose(p), dimensions={0,3,2,1}
  q = f32[4,2048,1024,2]{3,2,1,0} parameter(1)
  ROOT u = f32[4,2,1024,2048]{3,2,1,0} transpose(q), dimensions={0,3,2,1}
}""")
    t, u = m.entry.get_instruction("t"), m.entry.get_instruction("u")
    assert gpu_fusion_kind([t], [t]) == INPUT and gpu_fusion_kind([u], [u]) == LOOP
