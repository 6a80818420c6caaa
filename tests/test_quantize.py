"""Quantization what-ifs (issue 33): ``passes.quantize`` rewrites as HLO text
(FileCheck), a known answer on XLA:CPU (inputs exact in fp8: error 0), dot roles
on corpus modules, and what XLA:GPU makes of each form on a deviceless H100
compile (``hlo_analysis.quantization``, ``hlo quantize``)."""

from __future__ import annotations

import json

import numpy as np
import pytest

import corpus
from hlo_tools import parse
from hlo_tools.testing import assert_rewrite
from hlo_analysis.patterns import Patterns
from hlo_lab.quantize import quantize
from passes.quantize import QuantizeDots, _columns, dot_role
from xla_bridge.jax_internals import cuda_plugin_available, xla_module_from_text
from xla_bridge.runner import compare

from conftest import run_hlo

MATMUL = """HloModule m

ENTRY %main (x: bf16[16,64], w: bf16[64,32]) -> bf16[16,32] {
  %x = bf16[16,64]{1,0} parameter(0)
  %w = bf16[64,32]{1,0} parameter(1)
  ROOT %dot = bf16[16,32]{1,0} dot(%x, %w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}
"""

needs_plugin = pytest.mark.skipif(not cuda_plugin_available(),
                                  reason="XLA:GPU without a GPU needs the CUDA plugin (make venv)")


def test_fp8_is_a_dot_on_e4m3_operands_with_the_scales_after_it():
    assert_rewrite(MATMUL, QuantizeDots(form="fp8"), """
CHECK: %quantize_max_f32
CHECK: ENTRY
CHECK: %[[AMAX:.*]] = f32[] reduce({{.*}}), dimensions={0,1}, to_apply=%quantize_max_f32
CHECK: %[[QA:.*]] = f8e4m3fn[16,64]{1,0} convert(
CHECK: %[[QB:.*]] = f8e4m3fn[64,32]{1,0} convert(
CHECK: %dot.fp8 = f32[16,32]{1,0} dot(%[[QA]], %[[QB]]), lhs_contracting_dims={1}, rhs_contracting_dims={0}, metadata={op_name="hlo-quantize/dot"}
CHECK: multiply(%dot.fp8,
CHECK: ROOT {{.*}} = bf16[16,32]{1,0} convert(
""", accepted_by=xla_module_from_text)


def test_int8_accumulates_in_s32_and_int8w_keeps_a_scale_per_output_column():
    assert_rewrite(MATMUL, QuantizeDots(form="int8"), """
CHECK: round-nearest-even
CHECK: s8[16,64]{1,0} convert(
CHECK: s8[64,32]{1,0} convert(
CHECK: %dot.int8 = s32[16,32]{1,0} dot(
CHECK: f32[16,32]{1,0} convert(%dot.int8)
""", accepted_by=xla_module_from_text)
    assert_rewrite(MATMUL, QuantizeDots(form="int8w"), """
CHECK: %[[AMAX:.*]] = f32[32] reduce({{.*}}), dimensions={0}
CHECK: s8[64,32]{1,0} convert(
CHECK: bf16[64,32]{1,0} broadcast({{.*}}), dimensions={1}
CHECK: ROOT %dot.int8w = bf16[16,32]{1,0} dot(%x, {{.*}}), lhs_contracting_dims={1}
""", accepted_by=xla_module_from_text)


def test_qdq_dequantizes_before_a_dot_in_the_original_type():
    assert_rewrite(MATMUL, QuantizeDots(form="fp8-qdq"), """
CHECK: f8e4m3fn[16,64]{1,0} convert(
CHECK: %[[DA:.*]] = bf16[16,64]{1,0} multiply(
CHECK: %[[DB:.*]] = bf16[64,32]{1,0} multiply(
CHECK: ROOT %dot.qdq = bf16[16,32]{1,0} dot(%[[DA]], %[[DB]])
""", accepted_by=xla_module_from_text)


def test_what_is_not_chosen_is_left_alone():
    assert_rewrite(MATMUL, QuantizeDots(form="fp8", skip=("dot",)), None)
    assert_rewrite(MATMUL, QuantizeDots(form="fp8", min_flops=2 * 16 * 64 * 32 + 1), None)
    s32 = MATMUL.replace("bf16", "s32")
    assert_rewrite(s32, QuantizeDots(form="fp8"), None)  # integer dots are not quantized
    with pytest.raises(ValueError, match="unknown form"):
        QuantizeDots(form="fp4")
    with pytest.raises(ValueError, match="unknown scope mlpp"):
        QuantizeDots(scope=("mlpp",))


def test_inputs_exact_in_fp8_give_error_zero():
    """A known answer: both operands hold small integers and their absolute maximum
    is 448, E4M3's largest value: each scale is 1, the quantized operands are the
    originals, and the f32 products and sums of small integers are exact."""
    text = MATMUL.replace("bf16", "f32")
    rng = np.random.default_rng(0)
    vals = np.array([0, 1, -1, 2, -2, 3, 4, -8, 16], dtype=np.float32)
    x = rng.choice(vals, (16, 64)).astype(np.float32)
    w = rng.choice(vals, (64, 32)).astype(np.float32)
    x[0, 0], w[0, 0] = 448, -448
    q = parse(text)
    assert QuantizeDots(form="fp8").run(q)
    c = compare(parse(text), q, backend="cpu", inputs=[x, w])
    assert c.verdict == "exact", str(c)
    x[1, 1] = 3.3  # not an E4M3 value at scale 1: now it differs
    assert compare(parse(text), q, backend="cpu", inputs=[x, w]).verdict != "exact"


def test_dot_roles_on_a_corpus_module():
    m = parse(next(corpus.load("llama3-tiny-prefill-f32")).text("before_optimizations"))
    p = Patterns(m)
    dots = [i for c in m.computations for i in c if i.opcode.value == "dot"]
    widest = max(_columns(d) for d in dots if "GQA attention" not in p.labels(d))
    roles = [dot_role(p, d, widest) for d in dots]
    # 2 layers: QK and PV attention dots, gate/up/down MLP dots, one vocabulary projection
    assert roles.count("attn") == 4 and roles.count("mlp") == 6 and roles.count("logits") == 1
    assert len(QuantizeDots(scope=("mlp", "logits")).chosen(m)) == 7


@needs_plugin
def test_direct_fp8_and_int8_lower_to_8bit_gemms_and_qdq_falls_back():
    m = parse(next(corpus.load("llama3-tiny-prefill-f32")).text("before_optimizations"))
    _, fp8 = quantize(m, form="fp8", error="none")
    _, int8 = quantize(m, form="int8", error="none")
    _, qdq = quantize(m, form="fp8-qdq", error="none")
    assert fp8.gemm_dots and fp8.lowered_share == 1.0 and not fp8.fallbacks
    assert all(set(d["types"]) == {"f8e4m3fn"} for d in fp8.gemm_dots)
    assert int8.lowered_share == 1.0 and all(set(d["types"]) == {"s8"} for d in int8.gemm_dots)
    # the documented QDQ pattern does not reach an fp8 kernel on a deviceless compile: named, not hidden
    assert qdq.lowered_share == 0.0 and len(qdq.fallbacks) == len(qdq.gemm_dots) > 0
    assert fp8.speed["gemm_before_s"] > 0 and fp8.speed["gemm_after_s"] > 0


@needs_plugin
def test_hlo_quantize_reports_lowering_error_and_speed(tmp_path):
    src = next(corpus.load("llama3-tiny-decode-f32")).path("before_optimizations")
    out = tmp_path / "q.hlo"
    r = run_hlo("quantize", src, "--dtype", "int8w", "--scope", "mlp", "--json", "-o", out)
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["form"] == "int8w" and d["dots"]
    # weight-only int8 counts as 8-bit where the GEMM reads the s8 weight; where XLA
    # dequantizes it in a kernel of its own first, each such dot is a warning
    gemm = [x for x in d["dots"] if x["gemm_at_stock"]]
    eight = [x for x in gemm if "s8" in x["reads"]]
    assert d["lowered_8bit_share"] == pytest.approx(sum(x["flops"] for x in eight) / sum(x["flops"] for x in gemm))
    assert r.stderr.count("does not run on 8 bits") == len(gemm) - len(eight) == len(d["fallbacks"])
    assert 0 < d["error"]["within_tolerance"] <= 1 and d["error"]["max_abs"] > 0
    assert d["speed"]["module_before_s"] > 0 and parse(out.read_text()).name == d["module"]
    r = run_hlo("quantize", src, "--dtype", "fp8-qdq", "--scope", "mlp", "--no-error")
    assert r.returncode == 0 and "warning: " in r.stderr and "does not run on 8 bits" in r.stderr
    r = run_hlo("quantize", src, "--scope", "nothing")
    assert r.returncode == 2 and "unknown scope nothing; use all or attn" in r.stderr
    r = run_hlo("quantize", src, "--dtype", "int8", "--gradients", "e5m2")
    assert r.returncode == 2 and "gradients=e5m2 needs an fp8 form" in r.stderr


SHARED = """HloModule m

ENTRY %main (x: bf16[16,64], w: bf16[64,32], v: bf16[64,32]) -> (bf16[16,32], bf16[16,32]) {
  %x = bf16[16,64]{1,0} parameter(0)
  %w = bf16[64,32]{1,0} parameter(1)
  %v = bf16[64,32]{1,0} parameter(2)
  %a = bf16[16,32]{1,0} dot(%x, %w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  %b = bf16[16,32]{1,0} dot(%x, %v), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT %t = (bf16[16,32]{1,0}, bf16[16,32]{1,0}) tuple(%a, %b)
}
"""


def test_per_channel_scales_broadcast_to_where_each_side_sits_in_the_output():
    assert_rewrite(MATMUL, QuantizeDots(form="fp8", granularity="channel"), """
CHECK: %[[SA:.*]] = f32[16] maximum(
CHECK: f8e4m3fn[16,64]{1,0} convert(
CHECK: %[[SB:.*]] = f32[32] maximum(
CHECK: f8e4m3fn[64,32]{1,0} convert(
CHECK: %dot.fp8 = f32[16,32]{1,0} dot(
CHECK: f32[16,32]{1,0} broadcast(%[[SA]]), dimensions={0}
CHECK: f32[16,32]{1,0} broadcast(%[[SB]]), dimensions={1}
""", accepted_by=xla_module_from_text)
    # per tensor for weight-only int8 when asked
    assert_rewrite(MATMUL, QuantizeDots(form="int8w", granularity="tensor"), """
CHECK: f32[] reduce({{.*}}), dimensions={0,1}
CHECK-NOT: f32[32] reduce
""", accepted_by=xla_module_from_text)


def test_delayed_scaling_takes_the_scales_as_entry_parameters():
    assert_rewrite(MATMUL, QuantizeDots(form="fp8", scales="parameter"), """
CHECK: ENTRY %main (x: bf16[16,64], w: bf16[64,32], quant.scale.x: f32[], quant.scale.w: f32[]) -> bf16[16,32]
CHECK-NOT: reduce(
CHECK: %quant.scale.x = f32[] parameter(2)
CHECK: %quant.scale.w = f32[] parameter(3)
CHECK: %dot.fp8 = f32[16,32]{1,0} dot(
""", accepted_by=xla_module_from_text)


def test_an_operand_two_dots_read_is_quantized_once():
    assert_rewrite(SHARED, QuantizeDots(form="fp8"), """
CHECK: f8e4m3fn[16,64]{1,0} convert(
CHECK-NOT: f8e4m3fn[16,64]{1,0} convert(
CHECK: %a.fp8 = f32[16,32]{1,0} dot(
CHECK: %b.fp8 = f32[16,32]{1,0} dot(
""", accepted_by=xla_module_from_text)


def test_gradients_in_e5m2_are_the_operands_reading_the_logits():
    m = parse(next(corpus.load("llama3-tiny-train-f32")).text("before_optimizations"))
    plan = QuantizeDots(form="fp8", gradients="e5m2").plan(m)
    logits = [c.dot for c in plan if c.role == "logits"]
    assert len(logits) == 1
    order = {id(i): n for n, i in enumerate(logits[0].parent)}
    grads = [c for c in plan if "f8e5m2" in (c.lhs, c.rhs)]
    forward = [c for c in plan if order[id(c.dot)] <= order[id(logits[0])]]
    # the forward pass (up to the logits) stays E4M3; the backward's dots take one
    # E5M2 operand each (XLA's fp8 GEMMs take no E5M2 x E5M2)
    assert forward and all(c.lhs == c.rhs == "f8e4m3fn" for c in forward)
    assert grads and all(order[id(c.dot)] > order[id(logits[0])] for c in grads)
    assert all((c.lhs, c.rhs).count("f8e5m2") == 1 for c in grads)
    assert len(grads) >= (len(plan) - len(forward)) // 2


@needs_plugin
def test_e5m2_gradients_lower_to_8bit_gemms_and_extracted_dots_give_errors():
    m = parse(next(corpus.load("llama3-tiny-train-f32")).text("before_optimizations"))
    _, r = quantize(m, form="fp8", gradients="e5m2", error="dots")
    assert r.lowered_share == 1.0 and any("f8e5m2" in d["types"] for d in r.gemm_dots)
    assert r.error["on"].endswith("distinct dots extracted") and 0 < r.error["within_tolerance"] < 1
    assert all(0 <= d["error"]["within_tolerance"] <= 1 for d in r.dots)


@needs_plugin
def test_a_full_size_module_lowers_at_least_95_percent_to_8bit_and_names_each_fallback():
    """llama3 decode: XLA's dot merger joins the gate and up projections (they share
    their input) into one GEMM that keeps one's metadata; both count."""
    m = parse(next(corpus.load("llama3-full-decode-bf16")).text("before_optimizations"))
    _, r = quantize(m, form="fp8", error="none")
    assert r.lowered_share >= 0.95, [d["dot"] for d in r.fallbacks]
    merged = [d for d in r.dots if d["merged_with"]]
    assert merged and all(d["eight_bit"] and d["gemm"] for d in merged)


def test_quantization_headroom_in_the_scan_is_the_8bit_ceiling_of_the_gemms():
    from hlo_analysis import cost, devices, roofline
    from hlo_analysis.quantization import gemms, headroom_s
    from hlo_lab import scan
    entry = next(corpus.load("llama3-full-prefill-bf16"))
    m = parse(entry.text("gpu_h100_after_optimizations"))
    h100 = devices.load("h100")
    mc = cost.analyze(m)
    rf = roofline.roofline(m, h100, mc)
    names = {g.name for g in gemms(m, mc)}
    gemm_s = sum(k.time_s * k.executions for k in rf.kernels if k.name in names)
    saved = headroom_s(m, h100, rf)
    # compute-bound bf16 GEMMs at twice the rate save at most half their time, and some
    assert 0.2 * gemm_s < saved <= 0.5 * gemm_s + 1e-12
    assert headroom_s(m, devices.load("host"), roofline.roofline(m, devices.load("host"), mc)) is None
    row = scan.analyze_module(m, label="prefill", device="h100")
    assert row["quantization_headroom_s"] == pytest.approx(saved)


def test_prequantized_weights_arrive_8bit_with_their_scale():
    """The weight only the dot reads becomes an E4M3 parameter; the activation is
    still quantized in the module, its scale a parameter (delayed scaling)."""
    assert_rewrite(MATMUL, QuantizeDots(form="fp8", scales="parameter", weights="parameter"), """
CHECK: ENTRY %main (x: bf16[16,64], w: f8e4m3fn[64,32], quant.scale.x: f32[], quant.scale.w: f32[]) -> bf16[16,32]
CHECK-DAG: %w = f8e4m3fn[64,32]{1,0} parameter(1)
CHECK-DAG: f8e4m3fn[16,64]{1,0} convert(
CHECK: %dot.fp8 = f32[16,32]{1,0} dot({{.*}}, %w)
""", accepted_by=xla_module_from_text)
    # a weight something else reads too (a train step's optimizer) stays as it is
    assert_rewrite(SHARED.replace("tuple(%a, %b)", "tuple(%a, %b)").replace(
        "(bf16[16,32]{1,0}, bf16[16,32]{1,0}) tuple(%a, %b)", "(bf16[16,32]{1,0}, bf16[16,32]{1,0}, bf16[64,32]{1,0}) "
        "tuple(%a, %b, %w)").replace("-> (bf16[16,32], bf16[16,32])", "-> (bf16[16,32], bf16[16,32], bf16[64,32])"),
        QuantizeDots(form="fp8", weights="parameter"), """
CHECK: %w = bf16[64,32]{1,0} parameter(1)
CHECK: %v = f8e4m3fn[64,32]{1,0} parameter(2)
""", accepted_by=xla_module_from_text)


BATCHED = """HloModule m

ENTRY %main (x: f32[2,16,64], w: f32[2,64,32]) -> f32[2,16,32] {
  %x = f32[2,16,64]{2,1,0} parameter(0)
  %w = f32[2,64,32]{2,1,0} parameter(1)
  ROOT %dot = f32[2,16,32]{2,1,0} dot(%x, %w), lhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_batch_dims={0}, rhs_contracting_dims={1}
}
"""


@pytest.mark.parametrize("form", ["fp8", "int8"])
def test_per_channel_scales_of_a_batched_dot_give_error_zero_on_exact_inputs(form):
    """A known answer for per-channel scales: every row of x (per batch) and every
    column of w has its own absolute maximum, qmax times a power of two, and values
    that are exact at that scale: each scale is that power of two, the quantized
    operands are exact, and the outputs bitwise equal. Were a scale broadcast along
    the wrong output dimension, they would not be."""
    qmax = 448.0 if form == "fp8" else 127.0
    rng = np.random.default_rng(1)
    vals = np.array([0, 1, -1, 2, -3, 4, 8, -16], dtype=np.float32)
    x = rng.choice(vals, (2, 16, 64)).astype(np.float32)
    w = rng.choice(vals, (2, 64, 32)).astype(np.float32)
    x[:, :, 0], w[:, 0, :] = qmax, -qmax
    x *= (2.0 ** rng.integers(-3, 4, (2, 16, 1))).astype(np.float32)
    w *= (2.0 ** rng.integers(-3, 4, (2, 1, 32))).astype(np.float32)
    q = parse(BATCHED)
    assert QuantizeDots(form=form, granularity="channel").run(q)
    assert "f32[2,16]" in q.to_text() and "f32[2,32]" in q.to_text()  # one scale per batch row / column
    assert compare(parse(BATCHED), q, backend="cpu", inputs=[x, w]).verdict == "exact"
    if form == "int8":  # one scale for all: int8's small rows lose bits (E4M3's exponent keeps them)
        per_tensor = parse(BATCHED)
        QuantizeDots(form=form).run(per_tensor)
        assert compare(parse(BATCHED), per_tensor, backend="cpu", inputs=[x, w]).verdict != "exact"


def test_prequantized_weights_dequantize_in_the_original_type_and_a_weight_read_twice_stays():
    assert_rewrite(MATMUL, QuantizeDots(form="int8w", weights="parameter"), """
CHECK: %w = s8[64,32]{1,0} parameter(1)
CHECK: bf16[64,32]{1,0} convert(%w)
CHECK: %[[DQ:.*]] = bf16[64,32]{1,0} multiply(
CHECK: ROOT %dot.int8w = bf16[16,32]{1,0} dot(%x, %[[DQ]])
""", accepted_by=xla_module_from_text)
    square = """HloModule m

ENTRY %main (x: f32[16,16]) -> f32[16,16] {
  %x = f32[16,16]{1,0} parameter(0)
  ROOT %dot = f32[16,16]{1,0} dot(%x, %x), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}
"""
    # the dot reads x as its lhs too, which weight-only int8 keeps in f32
    assert_rewrite(square, QuantizeDots(form="int8w", weights="parameter"), """
CHECK: %x = f32[16,16]{1,0} parameter(0)
""", accepted_by=xla_module_from_text)


def test_a_small_dot_sharing_an_operand_is_not_taken_for_merged():
    """A router (1024x8) reads the input of an up projection (1024x4096): its flops
    are under 1% of the GEMM's, but the GEMM writes only the projection's output;
    a GEMM that writes up's and gate's outputs side by side holds both."""
    from hlo_analysis.quantization import Gemm
    from hlo_lab.quantize import found_gemms
    from passes.quantize import quantized_tag
    m = parse("""HloModule m

ENTRY %main (x: bf16[512,1024], w: bf16[1024,4096], r: bf16[1024,8], g: bf16[1024,4096]) -> (bf16[512,4096], bf16[512,8], bf16[512,4096]) {
  %x = bf16[512,1024]{1,0} parameter(0)
  %w = bf16[1024,4096]{1,0} parameter(1)
  %r = bf16[1024,8]{1,0} parameter(2)
  %g = bf16[1024,4096]{1,0} parameter(3)
  %up = bf16[512,4096]{1,0} dot(%x, %w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  %router = bf16[512,8]{1,0} dot(%x, %r), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  %gate = bf16[512,4096]{1,0} dot(%x, %g), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT %t = (bf16[512,4096]{1,0}, bf16[512,8]{1,0}, bf16[512,4096]{1,0}) tuple(%up, %router, %gate)
}
""")
    up, router, gate = (m.entry.get_instruction(n) for n in ("up", "router", "gate"))
    flops = 2 * 512 * 1024 * 4096
    alone = Gemm("fusion.1", "triton", (quantized_tag("up"),), ("f8e4m3fn",) * 2, flops * 1.001, (), 512 * 4096)
    assert found_gemms([up, router, gate], [alone])["router"] == (None, None)
    merged = Gemm("fusion.2", "triton", (quantized_tag("up"),), ("f8e4m3fn",) * 2, 2 * flops, (), 512 * 8192)
    found = found_gemms([up, router, gate], [merged])
    assert found["gate"] == (merged, "up") and found["router"] == (None, None)
    # Q, K and V merged into one GEMM (llama3 prefill: 32 + 8 + 8 heads): all three found
    three = Gemm("fusion.3", "triton", (quantized_tag("up"),), ("bf16",) * 2, 2 * flops + 2 * 512 * 1024 * 8, (),
                 512 * (4096 + 8 + 4096))
    assert {n: f[1] for n, f in found_gemms([up, router, gate], [three]).items()} == {
        "up": None, "router": "up", "gate": "up"}
    # split-K by 4 (a decode's small M): the GEMM writes four partial outputs
    split = Gemm("fusion.4", "triton", (quantized_tag("up"),), ("bf16",) * 2, 2.4 * flops, (), 4 * 512 * 8192)
    assert found_gemms([up, router, gate], [split])["gate"] == (split, "up")


def test_the_error_share_counts_elements_not_outputs():
    from hlo_lab.quantize import _summary
    from xla_bridge.runner import Comparison, OutputDiff

    def out(size, mismatches):
        return OutputDiff(0, (size,), "float32", False, mismatches == 0, 1.0, 1.0, mismatches, size, (0,), 0.0, 1.0,
                          1e-2, 1e-2)
    c = Comparison("mismatch", (out(1_000_000, 0), out(1, 1)))
    assert _summary([(c, 1.0)])["within_tolerance"] == pytest.approx(1 - 1e-6)
    # two extracted dots standing for 3 and 1 output elements: 3/4 of the weight on the first
    d = Comparison("mismatch", (out(10, 5),))
    assert _summary([(Comparison("exact", (out(10, 0),)), 3.0), (d, 1.0)])["within_tolerance"] == pytest.approx(
        (3 * 1.0 + 1 * 0.5) / 4)


def test_headroom_counts_only_what_the_gemm_multiplies():
    from hlo_analysis.quantization import _gemm_operands
    m = parse("""HloModule m

%gemm (p0: bf16[64,128], p1: bf16[128,256], p2: bf16[64,256]) -> bf16[64,256] {
  %p0 = bf16[64,128]{1,0} parameter(0)
  %p1 = bf16[128,256]{1,0} parameter(1)
  %p2 = bf16[64,256]{1,0} parameter(2)
  %d = bf16[64,256]{1,0} dot(%p0, %p1), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT %add = bf16[64,256]{1,0} add(%d, %p2)
}

ENTRY %main (a: bf16[64,128], b: bf16[128,256], residual: bf16[64,256]) -> bf16[64,256] {
  %a = bf16[64,128]{1,0} parameter(0)
  %b = bf16[128,256]{1,0} parameter(1)
  %residual = bf16[64,256]{1,0} parameter(2)
  ROOT %f = bf16[64,256]{1,0} fusion(%a, %b, %residual), kind=kCustom, calls=%gemm
}
""")
    assert [o.name for o in _gemm_operands(m.entry.root)] == ["a", "b"]  # not the residual the epilogue adds
