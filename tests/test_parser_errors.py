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
    assert e.column == GOOD.splitlines()[9].index("f32[4") + 7  # at the bad dimension 'x'


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
    binary = tmp_path / "m.hlo"
    binary.write_bytes(b"\x08\xff\xfe\x00\x80")
    with pytest.raises(HloParseError, match="not UTF-8") as info:
        hlo_tools.load(binary)
    assert (info.value.line, info.value.column) == (1, 2)  # the first byte that is not UTF-8
    proto = tmp_path / "m.pb"  # XLA's reader is the bridge's: the IR layer says so instead of guessing
    proto.write_bytes(binary.read_bytes())
    with pytest.raises(HloParseError, match="xla_bridge.load"):
        hlo_tools.load(proto)


def test_parse_rejects_non_text():
    with pytest.raises(TypeError, match="use load"):
        hlo_tools.parse(b"HloModule m")


@pytest.mark.parametrize(
    "text, where",
    [
        ("HloModule m\n\nENTRY e {\n  ROOT p = f32[] parameter(0)", (4, 30)),
        ("HloModule m\n\nENTRY e {\n  ROOT p = f32[] add(", (4, 22)),
        ("HloModule m, foo=", (1, 18)),
        ("HloModule m\nENTRY e {\n  ROOT c = f32[2] constant({1,2", (3, 32)),
    ],
)
def test_end_of_input_is_located_after_the_last_token(text, where):
    """Not at the start of the last token, which reads as if it were wrong."""
    e = _error(text)
    assert "end of input" in e.message and (e.line, e.column) == where


def _entry(body: str, header: str = "HloModule m") -> str:
    return f"{header}\n\nENTRY e {{\n{body}\n}}\n"


@pytest.mark.parametrize(
    "body, message, where",
    [
        ("  ROOT p = f32[] parameter(1 1)", "parameter needs a parameter number, got '1 1'", (4, 28)),
        ("  ROOT p = f32[] parameter(99999999999999999999)", "parameter number 99999999999999999999 is past the int64 range", (4, 28)),
        ("  ROOT p = f32[] parameter(9223372036854775807)", "parameter numbers of %e must be 0..0", (4, 28)),
        ("  ROOT p = f32[" + "9" * 5000 + "] parameter(0)", "(5000 digits) is past the int64 range", (4, 16)),
        ("  ROOT c = s32[] constant(1.0)", "constant %c: expected an integer, got '1.0'", (4, 27)),
        ("  ROOT c = s32[] constant(" + "1" * 5000 + ")", "(5000 digits) is out of range for s32", (4, 27)),
        ("  ROOT c = f32[] constant(Infinity)", "expected a f32 number, got 'Infinity'", (4, 27)),
        ("  ROOT c = f32[2] constant({1, 2e999})", "constant 2e999 is out of range for double", (4, 32)),
        ("  ROOT c = s32[2] constant(" + "{" * 100_000 + ")", "expects nested array in rank 1, but sees larger", (4, 29)),
        ("  p = s32[] parameter(0)\n  ROOT r = s32[] add(s32[] constant(nan), p)", "constant %constant.anon: expected an integer, got 'nan'", (5, 37)),
        ("  ROOT r = f32[] add(f32[] parameter(0), f32[] parameter(x))", "parameter needs a parameter number, got 'x'", (4, 58)),
        ("  ROOT r = f32[] add(f32[] parameter(5), f32[] parameter(0))", "must be 0..1 without gaps or repeats, got [0, 5]", (4, 38)),
        ("  ROOT r = f32[] " + "negate(f32[] " * 150 + "parameter(0)" + ")" * 150, "nest deeper than 100 levels", None),
        ("  ROOT t = (f32[]) tuple(" + "(" * 5000 + "f32[]" + ")" * 5000 + " p)", "nest deeper than 100 levels", None),
        ("  ROOT p = f32[2]{0} parameter(0), sharding={replicated}, sharding={replicated}", "attribute 'sharding' is given twice", (4, 59)),
        ("  ROOT p = f32[2]{0:T(2)S(1)E(4)} parameter(0)", "unexpected 'E(4)' in a layout", (4, 29)),
        ("  ROOT p = token[2] parameter(0)", "token[] takes no dimensions or layout", (4, 18)),
    ],
)
def test_hostile_numbers_and_nesting_give_located_errors(body, message, where):
    e = _error(_entry(body))
    assert message in e.message, e.message
    if where is not None:
        assert (e.line, e.column) == where, str(e)


def test_signature_and_entry_layout_shapes_are_read():
    """XLA ignores what they declare about the parameters but reads their shapes."""
    e = _error("HloModule m\n\nENTRY e (a: f32[x]) -> f32[] {\n  ROOT p = f32[] parameter(0)\n}\n")
    assert "expected a dimension size" in e.message and (e.line, e.column) == (3, 17)
    stale = hlo_tools.parse("HloModule m\n\nENTRY e (a: s32[5], b: f32[]) -> f32[] {\n  ROOT p = f32[] parameter(0)\n}\n")
    assert stale.entry.root.shape.to_text() == "f32[]"
    e = _error(_entry("  ROOT p = f32[] parameter(0)", "HloModule m, entry_computation_layout={(f32[x])->f32[]}"))
    assert "entry_computation_layout: expected a dimension size" in e.message and (e.line, e.column) == (1, 45)
    e = _error(_entry("  ROOT p = f32[] parameter(0)", "HloModule m, entry_computation_layout={(f32[])=>f32[]}"))
    assert "expected '->'" in e.message
    hlo_tools.parse(_entry("  ROOT p = f32[] parameter(0)", "HloModule m, entry_computation_layout={(s32[4])->f32[]}"))


def test_a_bare_entry_is_not_a_computation_name():
    e = _error("HloModule m\n\nENTRY {\n  ROOT p = f32[] parameter(0)\n}\n")
    assert "computation name after ENTRY" in e.message
    assert hlo_tools.parse("HloModule m\n\nENTRY %ENTRY {\n  ROOT p = f32[] parameter(0)\n}\n").entry.name == "ENTRY"


def test_call_cycles_are_rejected_where_the_cycle_closes():
    self_call = GOOD.replace("ROOT s = f32[] add(x, y)", "ROOT s = f32[] call(x, y), to_apply=add")
    e = _error(self_call)
    assert "computation %add calls itself (%add -> %add)" in e.message and e.line == 6
    via_entry = GOOD.replace("ROOT s = f32[] add(x, y)", "ROOT s = f32[] call(x, y), to_apply=main")
    e = _error(via_entry)
    assert "call cycle (%add -> %main -> %add)" in e.message or "call cycle (%main -> %add -> %main)" in e.message


@pytest.mark.parametrize(
    "prefix, suffix",
    [
        ("// first line\n", ""),
        ("", "// last line, no newline"),
        ("", "\n/* a block\n   comment over lines */\n"),
    ],
)
def test_comments_anywhere(prefix, suffix):
    text = prefix + GOOD.replace("add {", "add { // the reducer").replace("  z = f32[]", "  // a comment line\n  z = f32[]") + suffix
    assert hlo_tools.parse(text).to_text() == hlo_tools.parse(GOOD).to_text()
    assert hlo_tools.parse(text, use_scanner=False).to_text() == hlo_tools.parse(GOOD).to_text()


def test_duplicate_computation_attribute():
    e = _error(GOOD.replace("  ROOT s = f32[] add(x, y)\n}", '  ROOT s = f32[] add(x, y)\n}, execution_thread="a", execution_thread="b"'))
    assert "attribute 'execution_thread' of computation %add is given twice" in e.message


_OPERANDS = """  p = f32[4]{0} parameter(0)
  q = (f32[4], s32[]) parameter(1)
  ROOT r = f32[4] add({lhs}, p)"""


@pytest.mark.parametrize(
    "lhs",
    ["f32[4] p", "f32[4]{0:T(2)} %p", "f32[<=4] p", "f32[?] p", "f32[4] %q#0", "f32[5] negate(p)"],
)
def test_operand_shapes_xla_accepts(lhs):
    """XLA's parser checks a written operand shape with ShapeUtil::Compatible:
    layouts, `<=` marks and `?` sizes aside (asked of jaxlib's parser, case by case).
    A nested instruction's shape is its own result shape, not a claim about another."""
    for use_scanner in (True, False):
        hlo_tools.parse(_entry(_OPERANDS.replace("{lhs}", lhs)), use_scanner=use_scanner)


@pytest.mark.parametrize(
    "lhs, declared, actual",
    [
        ("f32[5] p", "f32[5]", "%p, f32[4]{0}"),
        ("s32[4] %p", "s32[4]", "%p, f32[4]{0}"),
        ("f32[<=5] p", "f32[<=5]", "%p, f32[4]{0}"),
        ("(f32[4]) p", "(f32[4])", "%p, f32[4]{0}"),
        ("b(f32[4]) p", "b(f32[4])", "%p, f32[4]{0}"),
        ("f32[5] %q#0", "f32[5]", "%q#0, f32[4]"),
    ],
)
def test_operand_shape_must_be_compatible_with_the_operand(lhs, declared, actual):
    """XLA: `The declared operand shape f32[5]{0} is not compatible with the
    shape of the operand instruction f32[4]{0}.`  Here the error points at the
    written shape."""
    for use_scanner in (True, False):
        with pytest.raises(HloParseError) as info:
            hlo_tools.parse(_entry(_OPERANDS.replace("{lhs}", lhs)), source="bad.hlo", use_scanner=use_scanner)
        e = info.value
        assert f"the declared operand shape {declared} of %r is not compatible with the shape of the operand instruction {actual}" in e.message
        assert (e.line, e.column) == (6, 23), str(e)


_BUFFERS = """  p = f32[16]{0} parameter(0)
  ROOT b = {shape} custom-call(p), custom_call_target="Pin", output_to_operand_aliasing={{}: (0, {})}"""


def test_buffer_shapes_parse_and_print_back():
    text = _entry(_BUFFERS.replace("{shape}", "b(f32[16]{0})"))
    for use_scanner in (True, False):
        m = hlo_tools.parse(text, use_scanner=use_scanner)
        assert m.entry.root.shape.is_buffer
        assert "ENTRY %e (p: f32[16]) -> b(f32[16]) {" in m.to_text()  # XLA's print: no layouts in the signature
        assert "ROOT %b = b(f32[16]{0}) custom-call(%p)" in m.to_text()


@pytest.mark.parametrize(
    "shape, message, column",
    [
        ("b((f32[16]))", "a buffer shape b(...) holds an array shape, not a tuple", 14),
        ("b(token[])", "holds an array shape, not token[]", 14),
        ("b(b(f32[16]))", "holds an array shape, not a buffer", 14),
        ("b(f32[16],f32[2])", "')'", 21),
        ("b(f32[16]", "')'", 22),
        ("b(f32[16]){0}", "unexpected '{'", 22),
        ("b()", "", 14),
    ],
)
def test_malformed_buffer_shapes_are_located(shape, message, column):
    for use_scanner in (True, False):
        with pytest.raises(HloParseError) as info:
            hlo_tools.parse(_entry(_BUFFERS.replace("{shape}", shape)), source="bad.hlo", use_scanner=use_scanner)
        e = info.value
        assert message in e.message or message in e.expected, str(e)
        assert (e.line, e.column) == (5, column), str(e)


def test_a_parse_leaves_the_garbage_collector_as_it_found_it():
    """The parser pauses the cyclic collector: on again afterwards, also after a
    syntax error; off still when the caller had it off (a scan worker's pause)."""
    import gc

    from hlo_tools.collector import collector_paused

    assert gc.isenabled()
    hlo_tools.parse("HloModule m\nENTRY e {\n  ROOT p = f32[] parameter(0)\n}\n")
    assert gc.isenabled()
    with pytest.raises(hlo_tools.HloParseError):
        hlo_tools.parse("HloModule m\nENTRY e {\n  ROOT p = f32[] parameter(\n}\n")
    assert gc.isenabled()
    with collector_paused(collect_after=True):
        hlo_tools.parse("HloModule m\nENTRY e {\n  ROOT p = f32[] parameter(0)\n}\n")
        assert not gc.isenabled()
    assert gc.isenabled()
