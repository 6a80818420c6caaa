"""hlo_tools.testing: FileCheck on printed HLO, and assert_rewrite passing and failing."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

import hlo_tools
from hlo_tools.rewriter import Rewriter
from hlo_tools.testing import assert_rewrite, run_filecheck

SRC = """HloModule m

ENTRY e {
  x = f32[8]{0} parameter(0)
  n = f32[8]{0} negate(x)
  ROOT a = f32[8]{0} abs(n)
}
"""


@dataclass(frozen=True)
class NegateToExp:
    """Rewrites every negate into an exponential of the same operand (a test pass)."""

    name = "negate-to-exp"
    honest: bool = True

    def run(self, module: hlo_tools.Module) -> bool:
        rewriter = Rewriter()
        for comp in module.computations:
            for instr in [i for i in comp if i.opcode is hlo_tools.HloOpcode.NEGATE]:
                rewriter.replace_instruction(instr, hlo_tools.Instruction.create(
                    "exponential", instr.shape, [instr.operand(0)], name=instr.name + ".exp"))
        return rewriter.changed and self.honest


class Nothing:
    """Changes nothing; has no name (the helper names it by its class)."""

    def run(self, module: hlo_tools.Module) -> bool:
        return False


def test_run_filecheck_matches_captures_and_reports_the_line_that_failed():
    text = hlo_tools.parse(SRC).to_text()
    ok = run_filecheck(text, "CHECK: %[[N:[^ ]+]] = f32[8]{0} negate(%x)\nCHECK-NEXT: ROOT {{.*}} abs(%[[N]])\n")
    assert ok and ok.diagnostic == ""
    bad = run_filecheck(text, "CHECK: negate\nCHECK-NEXT: exponential\n")
    assert not bad
    assert "<checks>:2" in bad.diagnostic and "exponential" in bad.diagnostic
    assert not run_filecheck(text, "CHECK: negate\nCHECK-NOT: abs\n")
    assert not run_filecheck(text, "no directive here\n")


def test_assert_rewrite_passes_on_matching_checks_and_returns_changed():
    module = hlo_tools.parse(SRC)
    assert assert_rewrite(module, NegateToExp(), """
    CHECK:      %[[E:n.exp]] = f32[8]{0} exponential(%x)
    CHECK-NOT:  negate
    CHECK:      ROOT %a = f32[8]{0} abs(%[[E]])
    """) is True
    assert module.entry.root.operand(0).name == "n.exp"  # a module given is rewritten in place


def test_assert_rewrite_fails_with_the_module_and_filecheck_diagnostic():
    with pytest.raises(AssertionError) as err:
        assert_rewrite(SRC, NegateToExp(), "CHECK: exponential(%x)\nCHECK-NEXT: ROOT {{.*}} negate(")
    msg = str(err.value)
    assert "negate-to-exp wrote:" in msg and "%n.exp = f32[8]{0} exponential(%x)" in msg  # the printed module
    assert "FileCheck:" in msg and "<checks>:2" in msg  # which check line failed


def test_expected_none_passes_when_nothing_changes():
    assert assert_rewrite(SRC.replace("negate", "sine"), NegateToExp(), None) is False
    assert assert_rewrite(SRC, Nothing(), None) is False


def test_expected_none_fails_when_the_pass_changes_the_module():
    with pytest.raises(AssertionError, match="negate-to-exp was expected to leave the module unchanged"):
        assert_rewrite(SRC, NegateToExp(), None)


def test_a_pass_whose_changed_flag_lies_fails():
    with pytest.raises(AssertionError, match="returned changed=False but the printed module changed"):
        assert_rewrite(SRC, NegateToExp(honest=False), "CHECK: exponential")
    with pytest.raises(AssertionError, match="Nothing did not change the module"):
        assert_rewrite(SRC, Nothing(), "CHECK: negate")


def test_accepted_by_sees_the_printed_result():
    seen: list[str] = []
    assert_rewrite(SRC, NegateToExp(), "CHECK: exponential", accepted_by=seen.append)
    assert len(seen) == 1 and "exponential(%x)" in seen[0]
