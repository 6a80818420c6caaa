"""``%x#N`` operands: XLA's dump syntax for a get-tuple-element, parsed as XLA's
parser does and printed back exactly."""

from __future__ import annotations

import pytest

import hlo_tools
from hlo_tools import HloOpcode, HloParseError

REPRO = """HloModule m

ENTRY %e (p: (f32[2], f32[2])) -> f32[2] {
  %p = (f32[2]{0}, f32[2]{0}) parameter(0)
  ROOT %a = f32[2]{0} add(%p#0, %p#1)
}

"""

# What XLA's parser + printer make of REPRO (jaxlib 0.12: hlo_module_from_text(...).to_string()).
XLA_EXPANDED = """HloModule m

ENTRY %e (p: (f32[2], f32[2])) -> f32[2] {
  %p = (f32[2]{0}, f32[2]{0}) parameter(0)
  %p_0 = f32[2]{0} get-tuple-element(%p), index=0
  %p_1 = f32[2]{0} get-tuple-element(%p), index=1
  ROOT %a = f32[2]{0} add(%p_0, %p_1)
}

"""


def test_repro_parses_to_get_tuple_elements_and_prints_back_exactly():
    m = hlo_tools.parse(REPRO)
    hlo_tools.verify(m)
    a = m.entry.root
    assert [o.opcode for o in a.operands] == [HloOpcode.GET_TUPLE_ELEMENT] * 2
    assert [o.name for o in a.operands] == ["p_0", "p_1"]
    assert [o.attributes["index"] for o in a.operands] == ["0", "1"]
    assert m.to_text() == REPRO
    assert m.to_text(tuple_sugar=False) == XLA_EXPANDED


def test_one_gte_per_tuple_and_index_nested_indices_and_shapes():
    text = """HloModule m

ENTRY %e (p: ((f32[2], f32[2]), f32[2])) -> ((f32[2], f32[2]), f32[2]) {
  %p = ((f32[2]{0}, f32[2]{0}), f32[2]{0}) parameter(0)
  %q = f32[2]{0} add(%p#0#1, %p#1)
  %r = f32[2]{0} multiply(%q, %p#0#1)
  ROOT %t = ((f32[2]{0}, f32[2]{0}), f32[2]{0}) tuple(%p#0, %r)
}

"""
    m = hlo_tools.parse(text)
    hlo_tools.verify(m)
    q, r = m.entry.get_instruction("q"), m.entry.get_instruction("r")
    assert q.operand(0) is r.operand(1)  # one GTE for (p#0, 1), as XLA shares it
    assert q.operand(0).name == "p_0_1" and q.operand(0).operand(0).name == "p_0"
    assert q.operand(0).shape.to_text() == "f32[2]{0}"
    assert m.to_text() == text


def test_sugar_keeps_operand_shapes_style():
    text = REPRO.replace("add(%p#0, %p#1)", "add(f32[2]{0} %p#0, f32[2]{0} %p#1)")
    m = hlo_tools.parse(text)
    assert m.to_text() == text


def test_a_line_named_like_a_sugar_gte_keeps_its_name():
    text = """HloModule m

ENTRY %e (p: (f32[2], f32[2])) -> f32[2] {
  %p = (f32[2]{0}, f32[2]{0}) parameter(0)
  %p_0 = f32[2]{0} negate(%p#0)
  ROOT %a = f32[2]{0} add(%p_0, %p#0)
}

"""
    m = hlo_tools.parse(text)
    hlo_tools.verify(m)
    assert m.entry.get_instruction("p_0").opcode is HloOpcode.NEGATE
    assert m.to_text() == text


def test_a_sugar_gte_that_becomes_root_gets_its_own_line():
    m = hlo_tools.parse(REPRO)
    gte = m.entry.root.operand(1)
    m.entry.set_root(gte)
    text = m.to_text()
    assert "ROOT %p_1 = f32[2]{0} get-tuple-element(%p), index=1" in text
    assert hlo_tools.parse(text).entry.root.name == "p_1"


@pytest.mark.parametrize(
    "operands, message, column",
    [
        ("%p#0, %p#2", "tuple index 2 out of range", 36),
        ("%p#0, %p#x", "expected a tuple index after '#'", 36),
        ("%p#0, %nope#1", "%nope", 33),
        ("%p#0#0, %p#1", "needs a tuple operand", 32),
    ],
)
def test_bad_tuple_index_is_a_located_error(operands, message, column):
    text = REPRO.replace("%p#0, %p#1", operands)
    with pytest.raises(HloParseError) as e:
        hlo_tools.parse(text, source="x.hlo")
    assert message in e.value.message
    assert (e.value.line, e.value.column) == (5, column)


def test_xla_reads_both_prints_the_same():
    """Our sugared print and our expanded print are the same module to XLA."""
    from jax._src.lib import xla_client as xc

    m = hlo_tools.parse(REPRO)
    a = xc.hlo.hlo_module_from_text(m.to_text(tuple_sugar=False)).to_string()
    b = xc.hlo.hlo_module_from_text(REPRO).to_string()
    assert a == b
