"""The code in docs/writing_a_pass.md runs as written and does what it says."""

from __future__ import annotations

import re
from pathlib import Path

import hlo_tools
from xla_bridge import xla

DOC = Path(__file__).resolve().parent.parent / "docs" / "writing_a_pass.md"


def _blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)


def test_the_example_pass_is_under_40_lines():
    assert len(_blocks()[0].strip().splitlines()) < 40


def test_the_example_pass_runs(tmp_path):
    namespace: dict = {}
    exec(compile(_blocks()[0], str(DOC), "exec"), namespace)
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
    usage = _blocks()[1].replace('"module.hlo"', repr(str(tmp_path / "module.hlo")))
    exec(compile(usage, str(DOC), "exec"), namespace)
    module = namespace["module"]
    result = namespace["result"]
    ops = [i.opcode_text for i in module.entry]
    assert ops.count("divide") == 1  # x/4 became a multiply, x/3 stayed (inexact)
    assert "multiply" in ops
    assert result.records[0].changed and result.records[0].name == "reciprocal-divide"
    assert any(i.literal == "0.25" for i in module.entry)
    xla.xla_module_from_text(module.to_text())
