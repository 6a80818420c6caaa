"""The small API a user's first pass reaches for (``Shape.scalar``, ``literal=`` on
``Instruction.create``) and the notebook views (``_repr_html_``) of modules,
benchmark results and comparisons, on real corpus modules and real XLA."""

from __future__ import annotations

import re

import pytest

import corpus
from hlo_tools import Instruction, IrError, Rewriter, Shape, parse, verify
from hlo_tools.stats import module_stats
from tests.test_parser_errors import GOOD
from xla_bridge import Measurement, compare


def test_shape_scalar():
    s = Shape.scalar("f32")
    assert s.to_text() == "f32[]" and s.is_scalar and s.rank == 0
    assert Shape.scalar(Shape.array("bf16", (2,)).element_type).to_text() == "bf16[]"
    assert Shape.scalar("s32") == Shape.array("s32", ())


@pytest.mark.parametrize("value, shape, text", [
    (0.5, "f32[]", "0.5"), (3, "s32[]", "3"), (True, "pred[]", "true"), (float("-inf"), "f32[]", "-inf"),
    (1e-05, "f32[]", "1e-05"), ("{1, 2}", "s32[2]", "{1, 2}"),
])
def test_constant_with_literal(value, shape, text):
    c = Instruction.create("constant", shape, literal=value, name="k")
    assert c.literal == text
    assert f"constant({text})" in str(c)


def test_literal_is_checked_against_the_shape_and_the_opcode():
    with pytest.raises(IrError, match="does not fit f32\\[2\\]"):
        Instruction.create("constant", "f32[2]", literal="{1, 2, 3}")
    with pytest.raises(IrError, match="not a constant"):
        Instruction.create("add", "f32[]", literal=1.0)


def test_a_first_pass_with_scalar_and_literal_verifies():
    """A reduce's init value replaced by a fresh scalar constant, as a first pass
    writes it: the module verifies and prints the literal."""
    m = parse(GOOD)
    z = m.entry.get_instruction("z")
    rw = Rewriter()
    k = rw.replace_instruction(z, Instruction.create("constant", Shape.scalar(z.shape.element_type), literal=-0.0,
                                                     name="init"))
    verify(m)
    assert rw.changed and k.literal == "-0.0" and m.entry.get_instruction("z") is None
    assert "f32[] constant(-0.0)" in m.to_text()


def test_module_repr_html_names_its_figures():
    entry = next(e for e in corpus.load() if e.name == "llama3-tiny-train-f32")
    m = entry.module("before_optimizations")
    h = m._repr_html_()
    s = module_stats(m)
    assert h.startswith("<div") and h.endswith("</div>")
    assert f"HloModule {m.name}" in h
    assert f"{s.instructions:,}" in h and f"{s.computations:,}" in h and f"{s.parameter_bytes:,} bytes" in h
    assert re.search(r"more\)? -&gt;|-&gt;", h)  # the entry signature, escaped
    assert "<script" not in h


def test_bench_and_comparison_repr_html():
    res = Measurement("cpu", contained=True).benchmark(GOOD, GOOD, reps=5, warmup=1)
    h = res._repr_html_()
    assert h.startswith("<div") and f"{res.speedup:.3f}x" in h and res.verdict in h
    assert f"{res.speedup_p10:.3f}-{res.speedup_p90:.3f}x" in h
    assert res.noise in h
    cmp = compare(GOOD, GOOD, contained=True)
    h = cmp._repr_html_()
    assert "exact" in h and "bitwise equal" in h and "<table>" in h
