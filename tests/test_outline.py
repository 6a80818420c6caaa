"""outline_fusion / inline_fusion: the building block of the fusion passes."""

from __future__ import annotations

import pytest

import hlo_tools
from hlo_tools import HloOpcode
from xla_bridge import jax_internals
from hlo_tools.opcode import ELEMENTWISE
from hlo_analysis import kernels
from hlo_tools.outline import region_module
from hlo_analysis.fusion_kind import fusion_kind
from hlo_tools.outline import FusionError, inline_fusion, outline_fusion
from tests.conftest import corpus_stage_texts

SRC = """HloModule m

add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

ENTRY e {
  x = f32[4,8]{1,0} parameter(0)
  y = f32[4,8]{1,0} parameter(1)
  m = f32[4,8]{1,0} multiply(x, y)
  n = f32[4,8]{1,0} exponential(m)
  z = f32[] constant(0)
  r = f32[4]{0} reduce(n, z), dimensions={1}, to_apply=add
  k = f32[4,8]{1,0} negate(n)
  ROOT t = (f32[4]{0}, f32[4,8]{1,0}) tuple(r, k)
}
"""


def _get(module, *names):
    return [module.entry.get_instruction(n) for n in names]


def test_single_output_loop_fusion():
    module = hlo_tools.parse(SRC)
    m, n = _get(module, "m", "n")
    fusion = outline_fusion(module.entry, [m, n], kind=fusion_kind)
    hlo_tools.verify(module)
    assert fusion.attribute("kind") == "kLoop"
    assert [o.name for o in fusion.operands] == ["x", "y"]
    body = fusion.fused_computation
    assert [i.opcode_text for i in body] == ["parameter", "parameter", "multiply", "exponential"]
    assert body.root.name == "n"
    assert {u.name for u in fusion.users} == {"r", "k"}
    text = module.to_text()
    assert "%fusion = f32[4,8]{1,0} fusion(%x, %y), kind=kLoop, calls=%fused_computation" in text
    jax_internals.xla_module_from_text(text)


def test_multi_output_fusion_makes_tuple_and_get_tuple_elements():
    module = hlo_tools.parse(SRC)
    region = _get(module, "m", "n", "z", "r")
    fusion = outline_fusion(module.entry, region, kind=fusion_kind)
    hlo_tools.verify(module)
    assert fusion.attribute("kind") == "kInput"  # a reduction is an output
    assert fusion.shape.to_text() == "(f32[4,8]{1,0}, f32[4]{0})"
    gtes = sorted(fusion.users, key=lambda g: g.tuple_index)
    assert [g.opcode for g in gtes] == [HloOpcode.GET_TUPLE_ELEMENT] * 2
    assert [u.name for u in gtes[0].users] == ["k"] and [u.name for u in gtes[1].users] == ["t"]
    assert fusion.fused_computation.root.opcode is HloOpcode.TUPLE


def test_refuses_regions_that_would_create_a_cycle():
    module = hlo_tools.parse(SRC)
    m, r = _get(module, "m", "r")  # n sits between them, outside the region
    with pytest.raises(FusionError, match="would create a cycle: %n is outside the region"):
        outline_fusion(module.entry, [m, r], kind=fusion_kind)
    assert module.to_text() == hlo_tools.parse(SRC).to_text()  # nothing changed


def test_refuses_parameters():
    module = hlo_tools.parse(SRC)
    x, m = _get(module, "x", "m")
    with pytest.raises(FusionError, match="cannot fuse parameter %x"):
        outline_fusion(module.entry, [x, m], kind=fusion_kind)


CONTROL = """HloModule control

ENTRY e {
  x = f32[8]{0} parameter(0)
  a = f32[8]{0} negate(x)
  b = f32[8]{0} exponential(x)
  c = f32[8]{0} add(a, b)
  d = f32[8]{0} sqrt(x)
  ROOT t = (f32[8]{0}, f32[8]{0}) tuple(c, d)
}
"""


def test_the_fusion_takes_its_members_control_edges_to_the_rest():
    """After copy insertion (XLA:GPU's hooked route) control edges order the
    readers of a buffer before its in-place writer: the fusion keeps those that
    leave the region, and the ones between members end inside the kernel."""
    module = hlo_tools.parse(CONTROL)
    a, b, c, d = _get(module, "a", "b", "c", "d")
    b.add_control_predecessor(a)  # between members: ends inside
    d.add_control_predecessor(c)  # to the rest: the fusion's
    a.add_control_predecessor(d)  # from the rest: the fusion's... a cycle with the edge above
    with pytest.raises(FusionError, match="would create a cycle"):
        outline_fusion(module.entry, [a, b, c], kind=fusion_kind)
    a.remove_control_predecessor(d)
    f = outline_fusion(module.entry, [a, b, c], kind=fusion_kind)
    hlo_tools.verify(module)
    assert module.entry.get_instruction("d").control_predecessors == (f,)
    assert not f.control_predecessors
    assert not [i for i in f.fused_computation if i.has_control_dependencies]
    inline_fusion(f)  # and back: each inlined instruction takes the fusion's edges
    d = module.entry.get_instruction("d")
    assert {p.opcode for p in d.control_predecessors} == {HloOpcode.NEGATE, HloOpcode.EXPONENTIAL, HloOpcode.ADD}


def test_inline_is_the_inverse():
    module = hlo_tools.parse(SRC)
    want = jax_internals.canonical_text(module.to_text())
    f1 = outline_fusion(module.entry, _get(module, "m", "n", "z", "r"), kind=fusion_kind)
    inline_fusion(f1)
    hlo_tools.verify(module)
    assert len(module.computations) == 2
    assert jax_internals.canonical_text(module.to_text()) == want


def _outline_all_elementwise_pairs(module) -> list:
    fusions = []
    for comp in list(module.computations):
        if comp is not module.entry:
            continue
        for instr in list(comp):
            if instr.parent is None or instr.opcode not in ELEMENTWISE:
                continue
            ops = [o for o in instr.operands if o.opcode in ELEMENTWISE and o.parent is comp and o.user_count == 1]
            if ops:
                fusions.append(outline_fusion(comp, [ops[0], instr], kind=fusion_kind))
    return fusions


# pre-optimization stages of the corpus's tiny modules (the full-size ones take
# minutes through XLA's canonical print three times; the big conformance-style
# check runs on them in bench/passes_speed.py)
_PRE = [(label, t) for label, t in corpus_stage_texts() if label.endswith("before_optimizations") and len(t) < 400_000]


@pytest.mark.parametrize("label, text", _PRE, ids=[p[0] for p in _PRE])
def test_outline_then_inline_round_trips_on_corpus_modules(label, text):
    module = hlo_tools.parse(text, label)
    want = jax_internals.canonical_text(text)
    fusions = _outline_all_elementwise_pairs(module)
    assert fusions, "an LLM module has fusible elementwise pairs"
    hlo_tools.verify(module)
    jax_internals.xla_module_from_text(module.to_text())
    for f in fusions:
        inline_fusion(f)
    assert jax_internals.canonical_text(module.to_text()) == want


# -- the one outliner: region_module builds what kernels.fused_region builds ------------
def _regions(module, limit: int = 40):
    """Producer -> consumer pairs of the entry (fusions among them: merged bodies)."""
    out = []
    for instr in module.entry:
        for op in instr.operands:
            if op.opcode not in (HloOpcode.PARAMETER, HloOpcode.TUPLE) and instr.opcode is not HloOpcode.TUPLE:
                out.append(([op, instr], instr))
                break
        if len(out) >= limit:
            break
    return out


def _pricing_kind(region, outputs):
    return "kInput" if any(o.opcode in (HloOpcode.REDUCE, HloOpcode.REDUCE_WINDOW) for o in outputs) else "kLoop"


def test_region_module_matches_kernels_fused_region():
    texts = sorted((t for label, t in corpus_stage_texts() if label.endswith("cpu_after_optimizations")), key=len)[:2]
    texts += [SRC]
    compared = merged = 0
    for text in texts:
        module = hlo_tools.parse(text)
        before = module.to_text()
        for region, root in _regions(module):
            for r in (root, None):
                ours = region_module(region, kind=_pricing_kind, root=r, name="probe")
                theirs = kernels.fused_region(region, root=r, name="probe")
                hlo_tools.verify(ours)
                assert ours.to_text() == theirs.to_text()
                compared += 1
                merged += any(i.opcode is HloOpcode.FUSION for i in region)
        assert module.to_text() == before  # the source is left alone
    assert compared > 20 and merged > 0



def test_region_module_merges_a_custom_fusion_only_when_asked():
    """A Triton (kCustom) fusion stays a fusion inside a priced region unless the
    caller prices a fusion of it with its consumer (``merge_custom``): then its body
    is copied in, as XLA's MergeFusionInstruction does."""
    module = hlo_tools.parse("""HloModule m
f { p = f32[4,8] parameter(0)  ROOT e = f32[4,8] exponential(p) }
ENTRY e {
  x = f32[4,8] parameter(0)
  t = f32[4,8] fusion(x), kind=kCustom, calls=f
  ROOT n = f32[4,8] negate(t)
}""")
    t, n = _get(module, "t", "n")
    kept = region_module([t, n], kind="kCustom", root=n)
    merged = region_module([t, n], kind="kCustom", root=n, merge_custom=True)
    body = lambda m: sorted(i.opcode.value for i in m.entry.root.fused_computation)  # noqa: E731
    assert body(kept) == ["fusion", "negate", "parameter"]
    assert body(merged) == ["exponential", "negate", "parameter"]
    hlo_tools.verify(merged)

def test_outlines_a_region_of_a_computation_out_of_dependency_order():
    # cse can leave an order that is not topological (the printer then prints
    # the post order); the region's body still follows its dependencies
    module = hlo_tools.parse(SRC)
    c = module.entry
    x, y, m, n, z, r, k, t = _get(module, "x", "y", "m", "n", "z", "r", "k", "t")
    c.set_instruction_order([x, y, n, m, z, r, k, t])
    assert not c.is_topologically_ordered()
    fusion = outline_fusion(c, [m, n], kind=fusion_kind)
    assert [i.name for i in fusion.fused_computation][2:] == ["m", "n"]
    hlo_tools.verify(module)
    assert c.is_topologically_ordered()
