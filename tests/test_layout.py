"""Layout analysis and passes: small HLO in, FileCheck lines out; real XLA checks outputs."""

from __future__ import annotations

import pytest

import corpus
from hlo_tools import parse, verify
from hlo_tools.testing import assert_rewrite
from passes.layout import EntryLayoutAssignment, LayoutNormalization, TransposeFolding, layout_analysis
from xla_bridge import AS_WRITTEN, STOCK, HookStage, Measurement, compare

CPU = Measurement("cpu")

DOT_OF_TRANSPOSE = """HloModule m, entry_computation_layout={(f32[64,128]{1,0}, f32[64,32]{1,0})->f32[128,32]{1,0}}

ENTRY %main (p: f32[64,128], q: f32[64,32]) -> f32[128,32] {
  %p = f32[64,128]{1,0} parameter(0)
  %q = f32[64,32]{1,0} parameter(1)
  %t = f32[128,64]{1,0} transpose(%p), dimensions={1,0}
  ROOT %d = f32[128,32]{1,0} dot(%t, %q), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}
"""

LAYOUT_COPY = """HloModule m, entry_computation_layout={(f32[8,16,4]{2,1,0})->f32[8,16,4]{2,1,0}}

ENTRY %main (p: f32[8,16,4]) -> f32[8,16,4] {
  %p = f32[8,16,4]{2,1,0} parameter(0)
  %c = f32[8,16,4]{0,2,1} copy(%p)
  %e = f32[8,16,4]{0,2,1} exponential(%c)
  ROOT %r = f32[8,16,4]{2,1,0} copy(%e)
}
"""


def test_analysis_counts_layout_copies_and_their_bytes():
    rep = layout_analysis(parse(LAYOUT_COPY))
    assert [(o.name, o.kind) for o in rep.ops] == [("c", "layout-copy"), ("r", "layout-copy")]
    assert rep.bytes_moved == 2 * 2 * 8 * 16 * 4 * 4
    assert layout_analysis(parse(DOT_OF_TRANSPOSE)).by_kind() == {"transpose": (1, 2 * 64 * 128 * 4)}


def test_transpose_folds_into_dot_dimension_numbers_and_xla_agrees():
    m = parse(DOT_OF_TRANSPOSE)
    assert_rewrite(m, TransposeFolding(), """
    CHECK-NOT:  transpose
    CHECK:      ROOT %d = f32[128,32]{1,0} dot(%p, %q), lhs_contracting_dims={0}, rhs_contracting_dims={0}
    """)
    assert_rewrite(m, TransposeFolding(), None)  # nothing left: reports unchanged
    assert compare(DOT_OF_TRANSPOSE, m, pipeline_b="as-written").ok


def test_a_transposed_contracting_dim_folds_when_the_free_dim_keeps_its_order():
    # t's contracting dim 0 is p's dim 1; its one free dim cannot change order, so
    # the transpose goes and the dot contracts p's dim 1
    assert_rewrite("""HloModule m, entry_computation_layout={(f32[64,128]{1,0}, f32[128,32]{1,0})->f32[64,32]{1,0}}

ENTRY %main (p: f32[64,128], q: f32[128,32]) -> f32[64,32] {
  %p = f32[64,128]{1,0} parameter(0)
  %q = f32[128,32]{1,0} parameter(1)
  %t = f32[128,64]{1,0} transpose(%p), dimensions={1,0}
  ROOT %d = f32[64,32]{1,0} dot(%t, %q), lhs_contracting_dims={0}, rhs_contracting_dims={0}
}
""", TransposeFolding(), """
    CHECK-NOT:  transpose
    CHECK:      ROOT %d = f32[64,32]{1,0} dot(%p, %q), lhs_contracting_dims={1}, rhs_contracting_dims={0}
    """)


def test_free_dims_that_would_reorder_the_output_are_not_folded():
    # t's free dims 0 and 1 are p's 1 and 0: folding would swap the dot's first two
    # output dims, so the transpose stays (transpose_folding.cc's condition)
    assert_rewrite("""HloModule m

ENTRY e {
  p = f32[2,3,4]{2,1,0} parameter(0)
  q = f32[4,5]{1,0} parameter(1)
  t = f32[3,2,4]{2,1,0} transpose(p), dimensions={1,0,2}
  ROOT d = f32[3,2,5]{2,1,0} dot(t, q), lhs_contracting_dims={2}, rhs_contracting_dims={0}
}
""", TransposeFolding(), None)


def test_layout_normalization_makes_the_physical_transpose_explicit():
    m = parse(LAYOUT_COPY)
    # the copy %c to layout {0,2,1} becomes a bitcast, a normalized transpose and a bitcast back
    assert_rewrite(m, LayoutNormalization(), """
    CHECK:      %c.normalized_operand = f32[8,16,4]{2,1,0} bitcast(%p)
    CHECK-NEXT: %c.normalized = f32[16,4,8]{2,1,0} transpose(%c.normalized_operand), dimensions={1,2,0}
    CHECK-NEXT: %c.bitcast = f32[8,16,4]{0,2,1} bitcast(%c.normalized)
    CHECK-NEXT: %e = f32[8,16,4]{0,2,1} exponential(%c.bitcast)
    """)
    assert layout_analysis(m).by_kind()["transpose"][0] == 1  # the copy %c is now a normalized transpose
    # bitcasts do not lower to StableHLO: the pass is for after layout assignment,
    # i.e. inside XLA's pipeline at the pre-scheduler hook
    res = CPU.compile_each(LAYOUT_COPY, {"stock": STOCK, "normalized": STOCK.hooked(LayoutNormalization(), HookStage.PRE_SCHEDULER)})
    assert compare(res["stock"], res["normalized"]).ok
    assert res["normalized"].hook.calls >= 1


def test_entry_layout_assignment_writes_the_attribute_and_xla_reassigns_it():
    m = parse(DOT_OF_TRANSPOSE)
    assert_rewrite(m, EntryLayoutAssignment(parameter_layouts=((0, (0, 1)),)), """
    CHECK:      HloModule m, entry_computation_layout={(f32[64,128]{0,1}, f32[64,32]{1,0})->f32[128,32]{1,0}}
    CHECK:      %p = f32[64,128]{0,1} parameter(0)
    CHECK-NEXT: %q = f32[64,32]{1,0} parameter(1)
    """)
    res = CPU.compile(m, AS_WRITTEN)
    # documented finding: through the bridge XLA gives parameters its default layout
    assert res.optimized_module.entry_computation_layout.startswith("{(f32[64,128]{1,0}")
    with pytest.raises(ValueError, match="not a permutation of the 2 dims of parameter 0"):
        EntryLayoutAssignment(parameter_layouts=((0, (0, 0)),)).run(m)


@pytest.mark.parametrize("name", ["gemma2-tiny-prefill-f32", "mixtral-tiny-prefill-f32"])
def test_corpus_transpose_folding_verifies_and_gives_equal_outputs(name):
    e = next(iter(corpus.load(name)))
    m = e.module("before_optimizations")
    before = layout_analysis(m).bytes_moved
    assert TransposeFolding().run(m)
    verify(m)
    assert layout_analysis(m).bytes_moved < before
    assert compare(e.text("before_optimizations"), m, pipeline_b="as-written").ok


