"""Inputs, run and compare on XLA:CPU: equal modules agree, wrong rewrites are
reported as mismatches with figures."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest


from hlo_tools import parse
from xla_bridge.jax_internals import XlaCompileError
from xla_bridge.compiler import compile
from xla_bridge.examples import FUSION_KLOOP, INDICES, TWO_BRANCHES, UNFUSED
from xla_bridge.inputs import index_bounds, make_inputs
from xla_bridge.runner import compare, compare_outputs, diff_output, run


def test_inputs_are_deterministic_typed_and_index_safe():
    m = parse(INDICES)
    a, b = make_inputs(m, seed=3, sets=2), make_inputs(m, seed=3, sets=2)
    assert all(np.array_equal(x, y) for x, y in zip(a[0] + a[1], b[0] + b[1]))
    assert not np.array_equal(a[0][0], a[1][0])  # input sets differ from each other
    assert [x.dtype for x in a[0]] == [np.dtype(ml_dtypes.bfloat16), np.int32, np.int64, np.int32]
    # dynamic-slice of 4 rows out of 16: start in [0, 12]; gather of 2 rows: [0, 14];
    # the s64 offset reaches dynamic-update-slice through a convert
    assert index_bounds(m) == {1: 13, 2: 13, 3: 15}
    for s in a:
        assert 0 <= s[1] < 13 and 0 <= s[2] < 13 and 0 <= s[3].min() and s[3].max() < 15
        assert -1 <= float(s[0].astype(np.float32).min()) and float(s[0].astype(np.float32).max()) < 1


def test_inputs_for_f8_and_pred():
    m = parse("HloModule q\nENTRY e {\n  a = f8e4m3fn[8] parameter(0)\n  b = pred[8] parameter(1)\n"
              "  c = f8e4m3fn[8] convert(b)\n  ROOT s = f8e4m3fn[8] add(a, c)\n}\n")
    a, b = make_inputs(m)[0]
    assert a.dtype == ml_dtypes.float8_e4m3fn and b.dtype == bool
    out = run(compile(m), [a, b])[0]
    assert out.dtype == ml_dtypes.float8_e4m3fn


def test_same_module_twice_agrees_exactly():
    m = parse(INDICES)
    cmp = compare(m, parse(m.to_text()))
    assert cmp.verdict == "exact" and cmp.ok and len(cmp.outputs) == 3


def test_as_written_and_stock_agree_on_a_hand_written_fusion():
    m = parse(FUSION_KLOOP)
    cmp = compare(m, m, pipeline_a="stock", pipeline_b="as-written")
    assert cmp.ok, str(cmp)


def test_fused_rewrite_of_an_unfused_module_agrees():
    cmp = compare(parse(UNFUSED), parse(FUSION_KLOOP), pipeline_b="as-written")
    assert cmp.ok, str(cmp)


def test_swapped_subtract_is_a_mismatch_with_figures_not_a_crash():
    wrong = FUSION_KLOOP.replace("subtract(%my_fusion, %x)", "subtract(%x, %my_fusion)").replace(
        "HloModule fusion_kloop", "HloModule fusion_kloop_wrong")
    cmp = compare(parse(FUSION_KLOOP), parse(wrong), pipeline_b="as-written")
    assert cmp.verdict == "mismatch" and not cmp.ok
    (bad,) = cmp.failing
    assert bad.index == 0 and bad.mismatches > 0 and bad.max_abs > 1 and bad.max_rel > 1e-2
    text = str(cmp)
    assert "fusion_kloop vs fusion_kloop_wrong: mismatch" in text and "MISMATCH in" in text and "max abs err" in text


def test_differing_parameters_or_outputs_are_mismatches():
    other = parse(UNFUSED.replace("f32[32,64]", "f32[32,32]"))
    cmp = compare(parse(UNFUSED), other)
    assert cmp.verdict == "mismatch" and "parameters differ" in cmp.message
    one = [np.zeros(3, np.float32)]
    assert compare_outputs(one, one + one).verdict == "mismatch"
    d = diff_output(0, np.zeros(3, np.float32), np.zeros(4, np.float32))
    assert not d.ok and "MISMATCH" in str(d)


def test_tolerances_are_dtype_aware():
    a = np.linspace(-1, 1, 100, dtype=np.float32)
    assert diff_output(0, a, a * (1 + 1e-6)).ok  # f32 reassociation noise
    assert not diff_output(0, a, a * (1 + 1e-2)).ok
    b16 = a.astype(ml_dtypes.bfloat16)
    assert diff_output(0, b16, (a * (1 + 1e-2)).astype(ml_dtypes.bfloat16)).ok  # within bf16's precision
    ints = np.arange(5, dtype=np.int32)
    assert not diff_output(0, ints, ints + np.array([0, 0, 1, 0, 0], np.int32)).ok
    nan = np.array([np.nan, 1.0], np.float32)
    assert diff_output(0, nan, nan.copy()).exact
    assert not diff_output(0, nan, np.array([0.0, 1.0], np.float32)).ok


def test_tuple_outputs_come_back_as_a_list():
    m = parse(TWO_BRANCHES)
    x = make_inputs(m)[0]
    e, t = run(compile(m), x)
    np.testing.assert_allclose(e, np.exp(x[0]), rtol=1e-6)
    np.testing.assert_allclose(t, np.tanh(x[1]), rtol=1e-6, atol=1e-7)


def test_run_with_wrong_inputs_raises_typed_error():
    res = compile(UNFUSED)
    with pytest.raises(XlaCompileError, match="run failed"):
        run(res, [np.zeros((2, 2), np.float32)])


def test_an_optimizer_state_that_reaches_a_sqrt_is_generated_non_negative():
    """Adam's second moment: scaled, summed with g*g, bias-corrected, square-rooted,
    inside a fusion. Generated in [-1, 1) it turned about 17% of a corpus train step's
    outputs into NaN; only the parameters on such a path are made non-negative."""
    from xla_bridge.inputs import nonnegative_parameters

    m = parse("""HloModule adam

fused {
  v = f32[8]{0} parameter(0)
  g = f32[8]{0} parameter(1)
  b = f32[] constant(0.999)
  bb = f32[8]{0} broadcast(b), dimensions={}
  vs = f32[8]{0} multiply(v, bb)
  gg = f32[8]{0} multiply(g, g)
  v2 = f32[8]{0} add(vs, gg)
  ROOT s = f32[8]{0} sqrt(v2)
}

ENTRY e {
  v = f32[8]{0} parameter(0)
  g = f32[8]{0} parameter(1)
  w = f32[8]{0} parameter(2)
  t = (f32[8]{0}, f32[8]{0}) tuple(v, g)
  v1 = f32[8]{0} get-tuple-element(t), index=0
  d = f32[8]{0} fusion(v1, g), kind=kLoop, calls=fused
  n = f32[8]{0} negate(w)
  l = f32[8]{0} sqrt(n)
  ROOT r = (f32[8]{0}, f32[8]{0}) tuple(d, l)
}
""")
    assert nonnegative_parameters(m) == {0}  # v; not g (squared), not w (negated first)
    v, g, w = make_inputs(m, seed=0)[0]  # the inputs compare() makes
    assert v.min() >= 0 and g.min() < 0 and w.min() < 0
    d, l = run(compile(m, "cpu", "stock"), [v, g, w])
    assert not np.isnan(d).any() and np.isnan(l).any()
    cmp = compare(m, m)
    assert cmp.verdict == "exact" and cmp.outputs[1].non_finite == int(np.isnan(l).sum())
    assert "NaN/inf in both, at the same places" in str(cmp.outputs[1])


def test_corpus_train_steps_run_without_nan():
    import corpus

    e = next(corpus.load("llama3-tiny-train-f32"))
    m = parse(e.text("before_optimizations"))
    outs = run(compile(m, "cpu", "stock"), make_inputs(m, seed=0)[0])
    assert sum(int(np.isnan(o.astype(np.float64)).sum()) for o in outs) == 0
