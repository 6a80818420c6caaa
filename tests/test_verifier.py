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
    from xla_bridge.jax_internals import XlaCompileError, proto_from_text

    text = f"HloModule m\n\nENTRY e {{\n  p = f32[4]{{0}} parameter(0)\n  ROOT {name} = f32[4]{{0}} negate(p)\n}}\n"
    ours = verify(hlo_tools.parse(text), raise_on_error=False)
    try:
        proto_from_text(text, "m")
        xla_rejects = False
    except XlaCompileError:
        xla_rejects = True
    assert bool(ours) == xla_rejects, (name, ours)


def _one(body: str, extra: str = "") -> str:
    return f"HloModule m\n{extra}\nENTRY e {{\n{body}\n}}\n"


_REDUCER = "add {\n  x = f32[] parameter(0)\n  y = f32[] parameter(1)\n  ROOT s = f32[] add(x, y)\n}\n"


@pytest.mark.parametrize(
    "body, problem",
    [
        # attributes XLA's parser requires ("attribute X is expected but not seen")
        ("  p = f32[4]{0} parameter(0)\n  ROOT r = f32[4]{0} custom-call(p)", "needs attribute custom_call_target="),
        ("  p = f32[4]{0} parameter(0)\n  ROOT c = pred[4]{0} compare(p, p)", "needs attribute direction="),
        ("  p = f32[4,2]{1,0} parameter(0)\n  ROOT t = f32[2,4]{1,0} transpose(p)", "needs attribute dimensions="),
        ("  p = f32[4]{0} parameter(0)\n  ROOT s = f32[2]{0} slice(p)", "needs attribute slice="),
        ("  ROOT i = s32[4]{0} iota()", "needs attribute iota_dimension="),
        ("  p = f32[4]{0} parameter(0)\n  z = f32[] constant(0)\n  ROOT r = f32[] reduce(p, z), to_apply=add", "needs attribute dimensions="),
        ("  p = (f32[4]{0}) parameter(0)\n  ROOT g = f32[4]{0} get-tuple-element(p)", "needs attribute index="),
        # values XLA's parser reads as integers, keywords, booleans, strings
        ("  p = f32[4]{0} parameter(0)\n  ROOT b = f32[4,4]{1,0} broadcast(p), dimensions={:}", "dimensions={:} is not a braced list of integers"),
        ("  p = f32[4]{0} parameter(0)\n  ROOT b = f32[4,4]{1,0} broadcast(p), dimensions={99999999999999999999}", "past the int64 range"),
        ("  p = (f32[4]{0}) parameter(0)\n  ROOT g = f32[4]{0} get-tuple-element(p), index=x", "index=x is not an integer"),
        ("  p = f32[4]{0} parameter(0)\n  ROOT c = pred[4]{0} compare(p, p), direction=LESS", "direction=LESS is not one of"),
        ("  p = f32[4]{0} parameter(0)\n  ROOT s = f32[4]{0} sort(p), dimensions={0}, to_apply=add, is_stable=yes", "is_stable=yes is not true or false"),
        ("  ROOT r = f32[4]{0} custom-call(), custom_call_target=foo", "custom_call_target=foo is not a quoted string"),
        ("  p = f32[4]{0} parameter(0)\n  ROOT s = f32[2]{0} slice(p), slice={[0:x]}", "slice={[0:x]} is not ranges"),
        ("  p = f32[4]{0} parameter(0)\n  z = f32[] constant(0)\n  ROOT q = f32[6]{0} pad(p, z), padding=1", "padding=1 is not low_high"),
        # operand counts XLA's parser enforces, and its verifier's token rules
        ("  p = f32[4]{0} parameter(0)\n  ROOT r = u32[] partition-id(p)", "takes 0 operands, has 1"),
        ("  a = token[] after-all()\n  ROOT r = (f32[4]{0}, token[]) infeed(a, a)", "takes 1 operand, has 2"),
        ("  p = f32[4]{0} parameter(0)\n  ROOT r = f32[4]{0} after-all(p)", "after-all produces token[], not f32[4]"),
        ("  p = f32[4]{0} parameter(0)\n  ROOT r = f32[4]{0} add-dependency(p, p)", "operand 1 of add-dependency must be a token"),
        ("  p = f32[4]{0} parameter(0)\n  ROOT c = f32[8]{0} concatenate(p, p), dimensions={1}", "concatenate dimension 1 is out of range"),
        ("  ROOT d = f32[4]{0} dynamic-update-slice()", "needs an array operand to slice"),
        ("  p = f32[4]{0} parameter(0)\n  ROOT r = f32[4]{0} all-reduce(p), to_apply=add, use_global_device_ids=true", "use_global_device_ids=true needs a channel_id"),
        # fma (jaxlib >= 0.12.1): three operands of one shape and element type
        ("  p = f32[4]{0} parameter(0)\n  ROOT f = f32[4]{0} fma(p, p)", "takes 3 operands, has 2"),
        ("  p = f32[4]{0} parameter(0)\n  q = f32[2]{0} parameter(1)\n  ROOT f = f32[4]{0} fma(p, p, q)", "different dimensions"),
        ("  p = f32[4]{0} parameter(0)\n  q = bf16[4]{0} parameter(1)\n  ROOT f = f32[4]{0} fma(p, q, p)", "one element type"),
    ],
)
def test_what_xla_rejects_is_a_verification_error(body, problem):
    """Each problem is one XLA's parser or verifier reports; ours names it,
    never raising anything but VerificationError."""
    m = hlo_tools.parse(_one(body, _REDUCER))
    problems = verify(m, raise_on_error=False)
    assert any(problem in p for p in problems), problems
    assert not any("internal error" in p for p in problems), problems
    with pytest.raises(VerificationError):
        verify(m)


def test_conditional_needs_its_branches():
    text = _one("  p = pred[] parameter(0)\n  ROOT c = f32[] conditional(p)", _REDUCER)
    assert any("needs branch_computations=" in p for p in verify(hlo_tools.parse(text), raise_on_error=False))


def test_a_malformed_raw_attribute_tail_is_a_verification_error():
    """The verifier catches what it does not expect and reports it as a problem
    of the instruction (and tests/test_fuzz.py fails on any 'internal error')."""
    m = hlo_tools.parse(TEXT)
    x = m.entry.get_instruction("x")
    x._attributes, x._raw_attributes = None, ", index=1, index=1"
    with pytest.raises(VerificationError, match="%x"):
        verify(m)


@pytest.mark.parametrize(
    "operand, result, ok",
    [
        ("u32[2,2]", "u64[2]", True),      # narrow to wide: the last dim is the width ratio, dropped (jax's rbg key)
        ("u64[2]", "u32[2,2]", True),      # wide to narrow: the ratio is added as the last dim
        ("f32[4,2]", "bf16[4,2,2]", True),
        ("bf16[4,2]", "f32[4]", True),
        ("f32[3]", "s32[3]", True),        # equal widths keep the dims
        ("u32[2,3]", "u64[2]", False),     # the operand's last dim is not the ratio
        ("u32[2,2]", "u64[2,2]", False),   # narrow to wide keeps the ratio dim
        ("u64[2]", "u32[2]", False),       # wide to narrow without the ratio dim
        ("f32[3]", "s32[4]", False),
    ],
)
def test_bitcast_convert_across_widths_is_what_xla_accepts(operand, result, ok):
    """XLA's rule (ShapeInference::InferBitcastConvertShape), checked against
    XLA's own parser and verifier on the same text."""
    from xla_bridge.errors import XlaCompileError
    from xla_bridge.compiler import compile

    text = _one(f"  p = {operand} parameter(0)\n  ROOT b = {result} bitcast-convert(p)")
    ours = verify(hlo_tools.parse(text), raise_on_error=False)
    try:
        compile(text, "cpu", "stock", contained=True)  # XLA's HloVerifier runs first
        xla_accepts = True
    except XlaCompileError:
        xla_accepts = False
    assert xla_accepts == ok, (operand, result)
    assert (not ours) == ok, ours


@pytest.mark.parametrize("shape, message", [
    ("f32[9223372036854775807,9223372036854775807]", "has more elements than int64 holds"),
    ("f32[2305843009213693952]", "is more bytes than int64 holds"),
    ("f32[" + ",".join(["4294967296"] * 40) + "]", "has more elements than int64 holds"),
])
def test_shapes_whose_size_overflows_int64_are_rejected_as_xla_does(shape, message):
    """XLA's shape validation ("Dimensions overflow", "size may overflow int64_t"):
    rejected at the instruction, with the verifier's location; `hlo stats` no longer
    prints 3.4e38 bytes for them."""
    from xla_bridge.errors import XlaCompileError
    from xla_bridge.compiler import compile

    text = _one(f"  p = {shape} parameter(0)\n  ROOT n = {shape} negate(p)")
    problems = verify(hlo_tools.parse(text), raise_on_error=False)
    assert problems and message in problems[0] and "%p (parameter)" in problems[0], problems
    if len(shape) < 100:
        with pytest.raises(XlaCompileError, match="overflow"):
            compile(text, "cpu", "stock", contained=True)
    assert not verify(hlo_tools.parse(_one("  p = f32[1048576,1024] parameter(0)\n  ROOT n = f32[1048576,1024] negate(p)")),
                      raise_on_error=False)


def test_fma_round_trips_and_verifies():
    """jaxlib 0.12.1 writes ``fma`` for jax.lax.fma/fmuladd (an Adam update)."""
    text = _one("  a = f32[8,32]{1,0} parameter(0)\n  b = f32[8,32]{1,0} parameter(1)\n"
                "  ROOT f = f32[8,32]{1,0} fma(a, b, a), metadata={op_name=\"fmuladd\"}", _REDUCER)
    m = hlo_tools.parse(text)
    assert not verify(m, raise_on_error=False)
    assert hlo_tools.parse(m.to_text()).to_text() == m.to_text()
    assert m.entry.root.opcode.value == "fma"
