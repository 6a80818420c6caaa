"""The code in docs/writing_a_pass.md runs as written and does what it says."""

from __future__ import annotations

import re
from pathlib import Path

from xla_bridge import jax_internals

DOC = Path(__file__).resolve().parent.parent / "docs" / "writing_a_pass.md"


def _blocks() -> list[str]:
    """The doc's python blocks, in order: the rewrite pass, running it, the fusion
    pass, and the fusion pass's test."""
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)
    assert len(blocks) == 4
    return blocks


def _run(*blocks: str) -> dict:
    namespace: dict = {}
    for block in blocks:
        exec(compile(block, str(DOC), "exec"), namespace)
    return namespace


def test_the_example_passes_are_short():
    rewrite, _, fusion, _ = _blocks()
    assert len(rewrite.strip().splitlines()) < 40
    assert len(fusion.strip().splitlines()) < 25


def test_the_example_pass_runs(tmp_path):
    text = """HloModule m
ENTRY e {
  x = f32[8]{0} parameter(0)
  four = f32[] constant(4)
  b4 = f32[8]{0} broadcast(four), dimensions={}
  three = f32[] constant(3)
  b3 = f32[8]{0} broadcast(three), dimensions={}
  d = f32[8]{0} divide(x, b4)
  ROOT e = f32[8]{0} divide(d, b3)
}
"""
    (tmp_path / "module.hlo").write_text(text)
    rewrite, usage, _, _ = _blocks()
    namespace = _run(rewrite, usage.replace('"module.hlo"', repr(str(tmp_path / "module.hlo"))))
    module = namespace["module"]
    report = namespace["report"]
    ops = [i.opcode_text for i in module.entry]
    assert ops.count("divide") == 1  # x/4 became a multiply, x/3 stayed (inexact)
    assert "multiply" in ops
    assert report.records[0].changed and report.records[0].name == "reciprocal-divide"
    assert any(i.literal == "0.25" for i in module.entry)
    jax_internals.xla_module_from_text(module.to_text())


def test_the_fusion_pass_and_its_test_run():
    _, _, fusion, test = _blocks()
    assert "from hlo_tools.testing import assert_rewrite" in test
    namespace = _run(fusion, test)
    namespace["test_elementwise_fusion"]()  # the doc's own assert_rewrite calls
