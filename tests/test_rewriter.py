"""The rewriter: every edit a pass needs, each recorded in ``changed``, and one
definition of "dead" shared with dce."""

from __future__ import annotations

import pytest

import hlo_tools
from hlo_tools import Instruction, IrError, parse_shape, verify
from hlo_tools.rewriter import RewritePattern, Rewriter, apply_patterns_greedily
from passes import get_pass

TEXT = """HloModule m

ENTRY main {
  p0 = f32[4]{0} parameter(0)
  p1 = f32[4]{0} parameter(1)
  log = f32[4]{0} custom-call(p0), custom_call_target="log_to_host", custom_call_has_side_effect=true
  pure = f32[4]{0} custom-call(p1), custom_call_target="pure_fn"
  a = f32[4]{0} add(log, pure)
  n = f32[4]{0} negate(a)
  ROOT r = f32[4]{0} multiply(n, p1)
}
"""


@pytest.fixture
def module():
    return hlo_tools.parse(TEXT)


def _names(comp):
    return [i.name for i in comp]


def test_erase_if_dead_keeps_a_side_effecting_custom_call(module):
    c = module.entry
    rw = Rewriter()
    n, r = c.get_instruction("n"), c.get_instruction("r")
    rw.replace_operand(r, 0, c.get_instruction("p0"))  # n, a, pure become dead; log does not
    assert rw.changed
    assert _names(c) == ["p0", "p1", "log", "r"]
    assert n.parent is None
    verify(module)


def test_the_rewriter_and_dce_agree_on_what_is_dead(module):
    by_rewriter = module.clone()
    c = by_rewriter.entry
    rw = Rewriter()
    rw.replace_all_uses_with(c.get_instruction("n"), c.get_instruction("p0"))
    for name in ("n", "a", "log", "pure"):
        instr = c.get_instruction(name)
        if instr is not None:
            rw.erase_if_dead(instr)
    by_dce = module.clone()
    c2 = by_dce.entry
    c2.get_instruction("n").replace_all_uses_with(c2.get_instruction("p0"))
    assert get_pass("dce").run(by_dce)
    assert by_rewriter.to_text() == by_dce.to_text()
    assert "log_to_host" in by_dce.to_text() and "pure_fn" not in by_dce.to_text()


def test_every_edit_records_a_change_and_no_op_edits_do_not(module):
    c = module.entry
    a, n, p0 = (c.get_instruction(x) for x in ("a", "n", "p0"))
    steps = [
        lambda rw: rw.set_attribute(n, "metadata", {"op_name": "neg"}),
        lambda rw: rw.rename(n, "neg"),
        lambda rw: rw.set_root(c, a),
        lambda rw: rw.set_shape(a, parse_shape("f32[4]")),
        lambda rw: rw.insert_after(a, Instruction.create("abs", "f32[4]{0}", [a], name="abs")),
        lambda rw: rw.insert_before(a, Instruction.create("constant", "f32[]", name="k")),
    ]
    for step in steps:
        rw = Rewriter()
        step(rw)
        assert rw.changed
        rw = Rewriter()
        step(rw) if step is not steps[-2] and step is not steps[-1] else None
        assert not rw.changed  # the same edit again is no change
    assert c.get_instruction("neg") is n and c.root is a
    assert _names(c)[_names(c).index("a") + 1] == "abs"
    k = c.get_instruction("k")
    rw = Rewriter()
    rw.set_literal(k, "2.5")
    assert rw.changed and "constant(2.5)" in k.to_text()
    with pytest.raises(IrError, match="does not fit"):
        rw.set_literal(k, "{1, 2}")
    rw = Rewriter()
    rw.set_literal(k, "2.5")
    assert not rw.changed
    rw.replace_all_uses_with(p0, p0)
    assert not rw.changed


def test_erase_refuses_a_used_instruction(module):
    rw = Rewriter()
    with pytest.raises(IrError, match="still has users"):
        rw.erase(module.entry.get_instruction("a"))
    assert not rw.changed


def test_computations_through_the_rewriter(module):
    rw = Rewriter()
    extra = hlo_tools.Computation("unused")
    extra.add_instruction(Instruction.create("constant", "f32[]", name="z"))
    extra.set_root(extra.get_instruction("z"))
    extra.get_instruction("z").literal = "0"
    rw.add_computation(module, extra)
    assert module.get_computation("unused") is extra and rw.changed
    rw = Rewriter()
    rw.remove_computation(module, extra)
    assert module.get_computation("unused") is None and rw.changed


class _NegNeg(RewritePattern):
    def match_and_rewrite(self, instr, rewriter):
        if instr.opcode.value == "negate" and instr.operand(0).opcode.value == "negate":
            rewriter.replace_instruction(instr, instr.operand(0).operand(0))
            return True
        return False


def test_the_greedy_driver_reports_the_rewriters_change():
    m = hlo_tools.parse("HloModule m\nENTRY e {\n  p = f32[2]{0} parameter(0)\n  a = f32[2]{0} negate(p)\n"
                        "  b = f32[2]{0} negate(a)\n  ROOT c = f32[2]{0} negate(b)\n}\n")
    assert apply_patterns_greedily(m, [_NegNeg()])
    # negate(negate(p)) is p: c takes p, and a and b, dead now, go
    assert _names(m.entry) == ["p", "c"] and m.entry.root.operands == (m.entry.get_instruction("p"),)
    assert not apply_patterns_greedily(m, [_NegNeg()])


def test_a_fusion_pass_that_only_planned_reports_no_change():
    # planning duplicates the shared constant into both consumers; neither cluster
    # is worth a fusion, so apply takes the copies back: the pass's rewriter saw
    # no edit, and the module is as it was
    text = """HloModule m
ENTRY e {
  p = f32[] parameter(0)
  k = f32[] constant(2)
  m1 = f32[] multiply(p, k)
  m2 = f32[] add(p, k)
  ROOT t = (f32[], f32[]) tuple(m1, m2)
}
"""
    module = hlo_tools.parse(text)
    assert get_pass("producer-consumer-fusion").run(module) is False
    assert module.to_text() == hlo_tools.parse(text).to_text()
    # with a broadcast in between the duplicate is kept, and that is a change
    widened = text.replace("f32[] parameter", "f32[4]{0} parameter").replace("m1 = f32[]", "b = f32[4]{0} broadcast(k), dimensions={}\n  m1 = f32[4]{0}")
    widened = widened.replace("multiply(p, k)", "multiply(p, b)").replace("m2 = f32[] add(p, k)", "m2 = f32[4]{0} add(p, b)")
    widened = widened.replace("(f32[], f32[]) tuple", "(f32[4]{0}, f32[4]{0}) tuple")
    module = hlo_tools.parse(widened)
    assert get_pass("producer-consumer-fusion").run(module) is True
    assert "b.dup" in module.to_text()
    verify(module)


def test_every_opcode_has_a_matcher_the_editor_can_see():
    """``m.<opcode>`` is written out for each HloOpcode (not made in a loop)."""
    import ast
    import builtins
    import keyword
    from pathlib import Path

    from hlo_tools import HloOpcode
    from hlo_tools import pattern as m

    source = Path(m.__file__).read_text()
    assigned = {t.id for node in ast.parse(source).body if isinstance(node, ast.Assign) for t in node.targets
                if isinstance(t, ast.Name)}
    for code in HloOpcode:
        name = code.name.lower()
        name += "_" if keyword.iskeyword(name) or hasattr(builtins, name) else ""
        assert name in assigned, name
        assert m.match(hlo_tools.Instruction.create("constant", "f32[]", literal=1), getattr(m, name)()) is None or code is HloOpcode.CONSTANT


def test_patterns_are_called_only_on_their_opcode_and_replacements_keep_metadata():
    """The driver dispatches on ``RewritePattern.opcode``; ``replace_instruction``
    gives a new instruction the metadata of the one it replaces."""
    from hlo_tools import HloOpcode

    seen: list[str] = []

    class NegateToAbs(RewritePattern):
        opcode = HloOpcode.NEGATE

        def match_and_rewrite(self, instr, rewriter):
            seen.append(instr.name)
            rewriter.replace_instruction(instr, Instruction.create("abs", instr.shape, [instr.operand(0)], name=instr.name))
            return True

    module = hlo_tools.parse("HloModule m\n\nENTRY e {\n  p = f32[4]{0} parameter(0)\n"
                             '  n = f32[4]{0} negate(p), metadata={op_name="jit(f)/neg"}\n'
                             "  ROOT e = f32[4]{0} exponential(n)\n}\n")
    assert apply_patterns_greedily(module, [NegateToAbs()])
    assert seen == ["n"]  # not called on the parameter or the exponential
    abs_ = module.entry.root.operand(0)
    assert abs_.opcode is HloOpcode.ABS and abs_.attribute("metadata") == '{op_name="jit(f)/neg"}'
