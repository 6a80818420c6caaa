"""Bad input: a clear HloParseError naming source, line and column, and what was expected."""

from __future__ import annotations

import gzip

import pytest

import hlo_tools
from hlo_tools import HloParseError

GOOD = """HloModule m

add {
  x = f32[] parameter(0)
  y = f32[] parameter(1)
  ROOT s = f32[] add(x, y)
}

ENTRY main {
  p = f32[4]{0} parameter(0)
  z = f32[] constant(0)
  ROOT r = f32[] reduce(p, z), dimensions={0}, to_apply=add
}
"""


def _error(text: str) -> HloParseError:
    with pytest.raises(HloParseError) as info:
        hlo_tools.parse(text, source="bad.hlo")
    return info.value


def test_good_module_parses():
    m = hlo_tools.parse(GOOD)
    assert m.entry.root.to_apply.name == "add"


def test_undefined_operand_names_the_operand_and_position():
    e = _error(GOOD.replace("reduce(p, z)", "reduce(q, z)"))
    assert (e.source, e.line, e.column) == ("bad.hlo", 12, 25)
    assert "operand %q of %r is not defined" in e.message
    assert str(e).splitlines()[1].startswith("  ROOT r = f32[] reduce(q, z)")
    assert str(e).splitlines()[2] == " " * 24 + "^"


def test_duplicate_instruction_name():
    e = _error(GOOD.replace("z = f32[] constant(0)", "p = f32[] constant(0)"))
    assert e.line == 11 and e.column == 3
    assert "instruction %p is already defined" in e.message


def test_unknown_computation():
    e = _error(GOOD.replace("to_apply=add", "to_apply=plus"))
    assert e.line == 12 and "unknown computation %plus" in e.message
    assert e.column == GOOD.splitlines()[11].index("to_apply=") + len("to_apply=") + 1


def test_unknown_opcode():
    e = _error(GOOD.replace("add(x, y)", "plus(x, y)"))
    assert (e.line, e.column) == (6, 18)
    assert "unknown opcode 'plus'" in e.message


def test_bad_shape_is_located_inside_the_shape():
    e = _error(GOOD.replace("f32[4]{0} parameter", "f32[4,x]{0} parameter"))
    assert e.line == 10 and "expected a dimension size" in e.message
    assert e.column == GOOD.splitlines()[9].index("f32[4") + 5


def test_syntax_error_lists_expected_tokens():
    # operand lists may span lines, so the error is where the list cannot go on
    e = _error(GOOD.replace("ROOT s = f32[] add(x, y)", "ROOT s = f32[] add(x, y"))
    assert (e.line, e.column) == (7, 1)
    assert "')'" in e.expected and "','" in e.expected


def test_duplicate_computation_and_two_roots():
    assert "already defined" in _error(GOOD.replace("ENTRY main", "add")).message
    e = _error(GOOD.replace("  z = f32[]", "  ROOT z = f32[]"))
    assert "already has a ROOT" in e.message and e.line == 12


def test_parameter_numbers_must_be_dense():
    e = _error(GOOD.replace("parameter(1)", "parameter(2)"))
    assert "parameter numbers of %add must be 0..1" in e.message


def test_empty_and_garbage_input():
    assert _error("").line == 1
    e = _error("HloModule m\n\nENTRY e {\n")
    assert e.line >= 3
    e = _error("\x00\x01garbage")
    assert e.line == 1


def test_missing_shape_that_xla_cannot_infer():
    e = _error("HloModule m\nENTRY e {\n  p = f32[4] parameter(0)\n  ROOT b = broadcast(p), dimensions={0}\n}\n")
    assert "needs a result shape" in e.message and e.line == 4


def test_load_reads_plain_gzip_and_dump_names(tmp_path):
    plain = tmp_path / "module_0001.jit_step.before_optimizations.txt"
    plain.write_text(GOOD)
    packed = tmp_path / "m.hlo.gz"
    packed.write_bytes(gzip.compress(GOOD.encode()))
    assert hlo_tools.load(plain).to_text() == hlo_tools.load(packed).to_text()


def test_load_errors_name_the_file(tmp_path):
    bad = tmp_path / "bad.hlo"
    bad.write_text(GOOD.replace("add(x, y)", "add(x, w)"))
    with pytest.raises(HloParseError) as info:
        hlo_tools.load(bad)
    assert info.value.source == str(bad)
    with pytest.raises(HloParseError, match="cannot read file"):
        hlo_tools.load(tmp_path / "missing.hlo")
    binary = tmp_path / "m.pb"
    binary.write_bytes(b"\x08\xff\xfe\x00\x80")
    with pytest.raises(HloParseError, match="not UTF-8"):
        hlo_tools.load(binary)


def test_parse_rejects_non_text():
    with pytest.raises(TypeError, match="use load"):
        hlo_tools.parse(b"HloModule m")
