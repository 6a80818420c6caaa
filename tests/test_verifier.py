"""The verifier names the broken instruction and says why."""

from __future__ import annotations

import pytest

import hlo_tools
from hlo_tools import Instruction, VerificationError, verify
from tests.conftest import accepted_modules

TEXT = """HloModule m

body {
  s = (s32[], f32[4]{0}) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  one = s32[] constant(1)
  j = s32[] add(i, one)
  v = f32[4]{0} get-tuple-element(s), index=1
  ROOT n = (s32[], f32[4]{0}) tuple(j, v)
}

cond {
  s = (s32[], f32[4]{0}) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  ten = s32[] constant(10)
  ROOT lt = pred[] compare(i, ten), direction=LT
}

ENTRY main {
  p = f32[4]{0} parameter(0)
  zero = s32[] constant(0)
  init = (s32[], f32[4]{0}) tuple(zero, p)
  w = (s32[], f32[4]{0}) while(init), condition=cond, body=body
  x = f32[4]{0} get-tuple-element(w), index=1
  b = f32[2,4]{1,0} broadcast(x), dimensions={1}
  ROOT r = f32[8]{0} reshape(b)
}
"""


def test_valid_module_has_no_problems():
    assert verify(hlo_tools.parse(TEXT), raise_on_error=False) == []


@pytest.mark.parametrize(
    "old, new, match",
    [
        ("b = f32[2,4]{1,0} broadcast(x), dimensions={1}", "b = f32[2,4]{1,0} broadcast(x), dimensions={0}", r"%b \(broadcast\): dimensions=\[0\] do not map"),
        ("ROOT r = f32[8]{0} reshape(b)", "ROOT r = f32[9]{0} reshape(b)", "changes the element count"),
        ("j = s32[] add(i, one)", "j = f32[] add(i, one)", r"%j \(add\): result shape is f32\[\], operands give s32\[\]"),
        ("ROOT lt = pred[] compare(i, ten), direction=LT", "ROOT lt = s32[] add(i, ten)", "condition %cond must return pred"),
        ("x = f32[4]{0} get-tuple-element(w), index=1", "x = f32[4]{0} get-tuple-element(w), index=0", r"%x \(get-tuple-element\): result shape is f32\[4\], operands give s32\[\]"),
    ],
)
def test_shape_errors_name_the_instruction(old, new, match):
    m = hlo_tools.parse(TEXT.replace(old, new))
    with pytest.raises(VerificationError, match=match) as info:
        verify(m)
    assert ">>" in info.value.context  # the offending line is marked in the context


def test_broken_use_def_is_reported():
    m = hlo_tools.parse(TEXT)
    x = m.entry.get_instruction("x")
    b = m.entry.get_instruction("b")
    del x._users[b]  # bypass the API on purpose
    with pytest.raises(VerificationError, match=r"%b \(broadcast\): uses %x but is missing from its users"):
        verify(m)


def test_operand_from_another_computation():
    m = hlo_tools.parse(TEXT)
    foreign = m.get_computation("body").get_instruction("v")
    r = m.entry.root
    r.replace_operands([foreign])
    problems = verify(m, raise_on_error=False)
    assert any("is not an instruction of %main" in p for p in problems)


def test_cycle_is_reported():
    m = hlo_tools.parse(TEXT)
    c = m.entry
    x, b = c.get_instruction("x"), c.get_instruction("b")
    x.replace_operands([b])  # x <- b <- x
    assert any("cycle" in p for p in verify(m, raise_on_error=False))


def test_fusion_parameter_mismatch():
    text = """HloModule f
fused {
  a = f32[4]{0} parameter(0)
  ROOT n = f32[4]{0} negate(a)
}
ENTRY e {
  p = f32[4]{0} parameter(0)
  q = f32[4]{0} parameter(1)
  ROOT f = f32[4]{0} fusion(p, q), kind=kLoop, calls=fused
}
"""
    with pytest.raises(VerificationError, match=r"passes 2 operands to %fused, which has 1 parameters"):
        verify(hlo_tools.parse(text))


def test_operand_count():
    m = hlo_tools.parse(TEXT)
    c = m.entry
    n = c.add_instruction(Instruction.create("negate", "f32[4]{0}", [c.get_instruction("x"), c.get_instruction("x")], name="neg"))
    assert n.name == "neg"
    with pytest.raises(VerificationError, match=r"%neg \(negate\): takes 1 operand, has 2"):
        verify(m)


def test_conformance_modules_verify():
    """Every accepted conformance module verifies, except the three that XLA's
    test expects to fail (async-op checks newer than jaxlib's parser)."""
    failing = {p.name for p in accepted_modules() if verify(hlo_tools.parse(p.read_text()), raise_on_error=False)}
    assert failing <= {"hlo_parser_test_0282.hlo", "hlo_parser_test_0283.hlo", "hlo_parser_test_0286.hlo"}


@pytest.mark.parametrize("name", ["s1", "u4", "pred", "f32", "bf16", "f8e4m3fn", "token", "opaque", "tuple", "s33", "f32x", "x"])
def test_instruction_named_like_an_element_type_is_what_xla_rejects(name):
    """The verifier flags exactly the names XLA's parser rejects (it sanitizes them)."""
    from hlo_tools.xla import XlaCompileError, proto_from_text

    text = f"HloModule m\n\nENTRY e {{\n  p = f32[4]{{0}} parameter(0)\n  ROOT {name} = f32[4]{{0}} negate(p)\n}}\n"
    ours = verify(hlo_tools.parse(text), raise_on_error=False)
    try:
        proto_from_text(text, "m")
        xla_rejects = False
    except XlaCompileError:
        xla_rejects = True
    assert bool(ours) == xla_rejects, (name, ours)
