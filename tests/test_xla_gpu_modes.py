"""The three ways to run a Python fusion pass on XLA:GPU (replace, on-top,
as-written), the GPU fusion profile and gpu-best, XLA's own GPU model read back
(docs/xla_gpu_modes.md).  XLA:GPU is compiled here without a GPU (the CUDA
plugin's deviceless compile); those tests skip, saying so, where the plugin is
missing.  The passes of gpu-best are also run on XLA:CPU with outputs compared."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import corpus
from hlo_analysis import devices
from hlo_lab.measured import xla_gpu_model
from hlo_analysis.rank_stats import spearman
from hlo_analysis.gpu_kernel_model import triton_kind
from hlo_analysis.gpu_legality import gpu_outputs_compatible
from hlo_analysis.roofline import roofline
from hlo_lab.cli import main
from hlo_lab.study import cpu_study, gpu_study_modes
from hlo_tools import parse
from passes.fusion.gpu_profile import FasterOn
from passes.registry import GPU_BEST, pass_names, parse_pipeline
from passes.registry import get_pass
from passes.fusion.decisions import labelled_for_cpu
from passes.dce import DeadCodeElimination
from passes.fusion.priority import GpuPriorityFusion, PriorityLog
from passes.fusion.producer_consumer import FusionLog, GpuProducerConsumerFusion, ProducerConsumerFusion
from xla_bridge import jax_internals
from xla_bridge.measure import FUSION_MODES, Measurement, XlaPipeline
from xla_bridge.compiler import disabled_passes

needs_xla_gpu = pytest.mark.skipif(not jax_internals.cuda_plugin_available(),
                                   reason="no XLA:GPU compiler here: the CUDA plugin is not installed")

DECODE = "llama3-tiny-decode-f32"


def _text(name: str) -> str:
    return next(corpus.load(name)).text("before_optimizations")


def test_modes_disable_only_what_they_replace():
    replace, as_written = disabled_passes("gpu", "replace"), disabled_passes("gpu", "as-written")
    assert "priority-fusion" in replace and "multi_output_fusion" in replace
    for kept in ("triton-gemm-rewriter", "triton-softmax-rewriter", "copy_fusion", "sort-iota-fusion"):
        assert kept not in replace and kept in as_written
    assert disabled_passes("gpu", "stock") == ()
    assert [XlaPipeline.fusion(lambda m: False, "gpu", mode).base for mode in FUSION_MODES] == \
        ["replace", "stock", "as-written"]
    with pytest.raises(ValueError, match="unknown fusion mode"):
        XlaPipeline.fusion(lambda m: False, "gpu", "sideways")


@needs_xla_gpu
def test_replace_keeps_xla_triton_gemms_as_written_does_not():
    m = Measurement("gpu", target="h100")
    replace = m.compile(_text(DECODE), XlaPipeline("replace")).optimized_text
    as_written = m.compile(_text(DECODE), XlaPipeline("as-written")).optimized_text
    assert "__triton_nested_gemm_fusion" in replace and "__cublas" not in replace
    assert "__triton" not in as_written and "__cublas$lt$matmul" in as_written


def test_gpu_outputs_compatible_follows_the_heroes():
    m = parse("""
HloModule m
add { a = f32[] parameter(0)  b = f32[] parameter(1)  ROOT s = f32[] add(a, b) }
ENTRY e {
  x = f32[8,64] parameter(0)
  z = f32[] constant(0)
  sq = f32[8,64] multiply(x, x)
  r1 = f32[8] reduce(x, z), dimensions={1}, to_apply=add
  r2 = f32[8] reduce(sq, z), dimensions={1}, to_apply=add
  c0 = f32[64] reduce(x, z), dimensions={0}, to_apply=add
  n = f32[8,64] negate(x)
  ROOT t = (f32[8], f32[8], f32[64], f32[8,64], f32[8,64]) tuple(r1, r2, c0, n, sq)
}""")
    get = m.entry.get_instruction
    assert gpu_outputs_compatible([get("r1"), get("r2")])  # a LayerNorm's two sums
    assert not gpu_outputs_compatible([get("r1"), get("c0")])  # rows vs columns
    assert not gpu_outputs_compatible([get("r1"), get("n")])  # a reduction and a loop output
    assert gpu_outputs_compatible([get("n"), get("sq")])


def test_gpu_profile_prices_each_fusion_and_refuses_slower_ones():
    """Fused, a row sum under a broadcast is recomputed for every element of its
    row: the GPU roofline prices that slower than two kernels.  On a real module
    the GPU pass refuses, with the model's reason, fusions the XLA:CPU-like pass
    makes (a power prologue into a tiny row reduction launches too few threads)."""
    m = parse("""
HloModule m
add { a = f32[] parameter(0)  b = f32[] parameter(1)  ROOT s = f32[] add(a, b) }
ENTRY e {
  x = f32[4096,4096] parameter(0)
  z = f32[] constant(0)
  r = f32[4096] reduce(x, z), dimensions={1}, to_apply=add
  b = f32[4096,4096] broadcast(r), dimensions={0}
  ROOT d = f32[4096,4096] divide(x, b)
}""")
    get = m.entry.get_instruction
    faster = FasterOn("h100")
    assert faster.time_s([get("r"), get("b"), get("d")]) > faster.time_s([get("r")]) + faster.time_s([get("b"), get("d")])

    text = _text(DECODE)
    gpu, cpu = FusionLog(), FusionLog()
    GpuProducerConsumerFusion(log=gpu).run(parse(text))
    ProducerConsumerFusion(log=cpu).run(parse(text))
    priced_out = {pair for pair, reason in gpu.refused().items() if reason.startswith("cost:") and "predicted" in reason}
    assert priced_out & set(cpu.fused()), "the GPU profile refused nothing the CPU pass fuses"


SOFTMAX = """
HloModule softmax
max { a = f32[] parameter(0)  b = f32[] parameter(1)  ROOT m = f32[] maximum(a, b) }
add { a = f32[] parameter(0)  b = f32[] parameter(1)  ROOT s = f32[] add(a, b) }
ENTRY e {
  x = bf16[2048,4096] parameter(0)
  xf = f32[2048,4096] convert(x)
  ninf = f32[] constant(-inf)
  m = f32[2048] reduce(xf, ninf), dimensions={1}, to_apply=max
  mb = f32[2048,4096] broadcast(m), dimensions={0}
  s = f32[2048,4096] subtract(xf, mb)
  ex = f32[2048,4096] exponential(s)
  z = f32[] constant(0)
  r = f32[2048] reduce(ex, z), dimensions={1}, to_apply=add
  rb = f32[2048,4096] broadcast(r), dimensions={0}
  d = f32[2048,4096] divide(ex, rb)
  ROOT o = bf16[2048,4096] convert(d)
}"""


def test_gpu_priority_fusion_takes_a_producer_into_all_its_consumers():
    """A softmax as XLA:GPU's priority fusion makes it: three kernels (max, sum,
    normalize), ``exp(x - max)``, already a fusion of several instructions,
    recomputed inside the last two.  Fusing consumer by consumer never sees that
    exp's own kernel goes only when both take it, and leaves four; the GPU
    roofline prices the three faster."""
    dev = devices.load("h100")
    by_consumer, by_producer = parse(SOFTMAX), parse(SOFTMAX)
    GpuProducerConsumerFusion().run(by_consumer)
    log = PriorityLog()
    GpuPriorityFusion(log=log).run(by_producer)
    for m in (by_consumer, by_producer):
        DeadCodeElimination().run(m)
    kernels = [i for i in by_producer.entry if i.opcode.value == "fusion"]
    assert len(kernels) == 3 == len(roofline(by_producer, dev).kernels) < len(roofline(by_consumer, dev).kernels)
    assert roofline(by_producer, dev).time_s < roofline(by_consumer, dev).time_s
    assert ("ex", ("r", "d")) in [(p, c) for p, c, _, how in log.steps if how == "duplicate"]
    assert sum(i.opcode.value == "exponential" for k in kernels for i in k.fused_computation) == 2


PADDED_K = """HloModule kv
ENTRY e {
  k = bf16[1024,8,128] parameter(0)
  rope = bf16[1024,8,128] negate(k)
  z = bf16[] constant(0)
  padded = bf16[2048,8,128] pad(rope, z), padding=0_1024x0_0x0_0
  a = bf16[2048,1024] bitcast(padded)
  b = bf16[1,2048,8,128] bitcast(padded)
  ROOT r = (bf16[2048,1024], bf16[1,2048,8,128]) tuple(a, b)
}"""


@pytest.mark.parametrize("rules", [True, False])
def test_gpu_priority_fusion_follows_xlas_bitcast_rules(rules):
    """A padded K cache read through two bitcasts (by the attention GEMM and by the
    stack of caches): XLA:GPU fuses nothing into a lone bitcast and keeps the pad one
    kernel, which then takes its RoPE (here a negate), as stock does."""
    m, log = parse(PADDED_K), PriorityLog()
    GpuPriorityFusion(log=log, xla_bitcasts=rules).run(m)
    assert (log.refused().get(("padded", "a")) == "consumer is a lone bitcast: XLA:GPU keeps reading the producer") is rules
    assert ("rope", ("padded",), "merge") in [(p, c, how) for p, c, _, how in log.steps]


EXPERT_TRANSPOSE = """HloModule moe
fused_t {
  p = bf16[8,4096,1536]{2,1,0} parameter(0)
  ROOT t = bf16[8,1536,4096]{2,1,0} transpose(p), dimensions={0,2,1}
}
ENTRY e {
  x = bf16[8,4096,1536]{2,1,0} parameter(0)
  t = bf16[8,1536,4096]{2,1,0} fusion(x), kind=kInput, calls=fused_t
  g = bf16[8,768,4096]{2,1,0} slice(t), slice={[0:8], [0:768], [0:4096]}
  u = bf16[8,768,4096]{2,1,0} slice(t), slice={[0:8], [768:1536], [0:4096]}
  sg = bf16[8,768,4096]{2,1,0} logistic(g)
  a = bf16[8,768,4096]{2,1,0} multiply(g, sg)
  ROOT o = bf16[8,768,4096]{2,1,0} multiply(a, u)
}"""

#: as replace mode's hook module has it (Qwen3-MoE's prefill): the GEMM's output
#: transposed by a lone op, and SiLU written out
EXPERT_TRANSPOSE_UNFUSED = """HloModule moe
ENTRY e {
  p = bf16[196608,1024]{1,0} parameter(0)
  x = bf16[128,1536,1024]{2,1,0} bitcast(p)
  t = bf16[128,1024,1536]{2,1,0} transpose(x), dimensions={0,2,1}
  u = bf16[128,1024,768]{2,1,0} slice(t), slice={[0:128], [0:1024], [768:1536]}
  g = bf16[128,1024,768]{2,1,0} slice(t), slice={[0:128], [0:1024], [0:768]}
  one = bf16[] constant(1)
  onef = f32[] convert(one)
  bf = f32[128,1024,768]{2,1,0} broadcast(onef), dimensions={}
  n = bf16[128,1024,768]{2,1,0} negate(g)
  e = bf16[128,1024,768]{2,1,0} exponential(n)
  b1 = bf16[128,1024,768]{2,1,0} broadcast(one), dimensions={}
  a = bf16[128,1024,768]{2,1,0} add(e, b1)
  c = f32[128,1024,768]{2,1,0} convert(a)
  d = f32[128,1024,768]{2,1,0} divide(bf, c)
  c2 = bf16[128,1024,768]{2,1,0} convert(d)
  m = bf16[128,1024,768]{2,1,0} multiply(g, c2)
  ROOT r = bf16[128,1024,768]{2,1,0} multiply(u, m)
}"""


@pytest.mark.parametrize("text", [EXPERT_TRANSPOSE, EXPERT_TRANSPOSE_UNFUSED], ids=["on-top", "replace"])
def test_gpu_priority_fusion_keeps_a_transpose_out_of_the_slices_that_read_it(text):
    """Qwen3-MoE's expert GEMM output, transposed by its own kernel (stock's
    kInput fusion), then split in halves for the SiLU gate.  Fused into the
    slices' consumer, the transpose is no hero (XLA's FindNonTrivialHero stops at a
    slice): the loop emitter reads it uncoalesced, so XLA:GPU keeps it apart.
    Priced as the transpose emitter, it went into both the forward and the
    backward consumers, and XLA's remat then recomputed 48 expert GEMMs (on top:
    0.962 of stock).  Nor is it the hero of a multi-output fusion with the loop
    over its halves: that loop's output is not the size of the transpose's input
    (XLA's FindConsistentTransposeHero), so the fusion is a loop too."""
    m, log = parse(text), PriorityLog()
    GpuPriorityFusion(log=log).run(m)
    DeadCodeElimination().run(m)
    glu = m.entry.root
    transpose = glu.operands[0]  # the transpose's own kernel, a fusion or the lone op
    assert glu.opcode.value == "fusion" and len(glu.operands) == 1
    assert not any(i.opcode.value == "transpose" for i in glu.fused_computation)
    assert transpose.opcode.value in ("fusion", "transpose") and transpose.operands[0].name in ("x", "p")


RMSNORM = """HloModule rmsnorm
add { a = f32[] parameter(0)  b = f32[] parameter(1)  ROOT s = f32[] add(a, b) }
ENTRY e {
  x = bf16[4096,2304] parameter(0)
  w = bf16[2304] parameter(1)
  xf = f32[4096,2304] convert(x)
  sq = f32[4096,2304] multiply(xf, xf)
  z = f32[] constant(0)
  s = f32[4096] reduce(sq, z), dimensions={1}, to_apply=add
  k = f32[] constant(0.000434)
  kb = f32[4096] broadcast(k), dimensions={}
  mean = f32[4096] multiply(s, kb)
  eps = f32[] constant(1e-6)
  epsb = f32[4096] broadcast(eps), dimensions={}
  r = f32[4096] rsqrt(add(mean, epsb))
  rb = f32[4096,2304] broadcast(r), dimensions={0}
  n = f32[4096,2304] multiply(xf, rb)
  wf = f32[2304] convert(w)
  wb = f32[4096,2304] broadcast(wf), dimensions={1}
  y = f32[4096,2304] multiply(n, wb)
  ROOT o = bf16[4096,2304] convert(y)
}"""


@needs_xla_gpu
def test_triton_elementwise_fusion_joins_the_work_around_a_triton_norm():
    """With XLA's fusion off (replace), XLA:GPU still makes an RMSNorm a Triton
    fusion, and the converts and the weight multiply around it stay kernels of
    their own; joined to it, the module is one kernel again, as on stock, and
    XLA:GPU compiles the merged Triton fusion with its tiling."""
    without, with_ = (gpu_study_modes("rmsnorm", RMSNORM, spec, "h100", modes=("replace",))[0]
                      for spec in ("gpu-priority-fusion,dce", "gpu-priority-fusion,triton-elementwise-fusion,dce"))
    assert without.ours.kernels > with_.ours.kernels == with_.stock.kernels == 1
    assert with_.ours.predicted_us < without.ours.predicted_us / 2
    assert with_.ours.predicted_us == pytest.approx(with_.stock.predicted_us, rel=0.05)


def test_a_prologue_may_drop_unit_dimensions_only():
    """Llama's embedding reaches the first norm as bf16[1024,1,4096]: a loop fusion
    that bitcasts away the unit dimension and converts is tiled like the norm's
    rows (stock joins it); a bitcast that regroups dimensions is not."""
    from passes.fusion.triton_elementwise import _elementwise_kernel

    def kernel(shape_in: str, shape_mid: str) -> bool:
        m = parse(f"""HloModule k
f {{ p = bf16[{shape_in}] parameter(0)  b = bf16[{shape_mid}] bitcast(p)  ROOT c = f32[{shape_mid}] convert(b) }}
ENTRY e {{ x = bf16[{shape_in}] parameter(0)  ROOT k = f32[{shape_mid}] fusion(x), kind=kLoop, calls=f }}""")
        return _elementwise_kernel(m.entry.root)

    assert kernel("1024,1,4096", "1024,4096") and not kernel("1024,2,2048", "1024,4096")


@pytest.mark.parametrize("op, joins", [("f32[8,16] exponential(p)", True), ("s32[8,16] add(i, i)", True),
                                       ("s32[8,16] shift-right-arithmetic(i, i)", False), ("s32[8,16] xor(i, i)", True),
                                       ("s32[8,16] divide(i, i)", False)])
def test_a_prologue_holds_only_what_xlas_triton_emitter_supports(op, joins):
    """XLA's Triton emitter refuses what its support lists lack (Mixtral's router
    shifts s32: "Unsupported elementwise operation"), so such a kernel never joins; the
    ``and`` and ``xor`` it masks with are in stock's Triton fusion of the router."""
    from passes.fusion.triton_elementwise import _elementwise_kernel

    m = parse(f"""HloModule k
f {{ p = f32[8,16] parameter(0)  i = s32[8,16] convert(p)  o = {op}  ROOT c = f32[8,16] convert(o) }}
ENTRY e {{ x = f32[8,16] parameter(0)  ROOT k = f32[8,16] fusion(x), kind=kLoop, calls=f }}""")
    assert _elementwise_kernel(m.entry.root) is joins


GATHER_INTO_NORM = """HloModule g
add { a = f32[] parameter(0)  b = f32[] parameter(1)  ROOT s = f32[] add(a, b) }
norm { p = f32[1024,4096] parameter(0)  z = f32[] constant(0)  r = f32[1024] reduce(p, z), dimensions={1}, to_apply=add
       rb = f32[1024,4096] broadcast(r), dimensions={0}  ROOT o = f32[1024,4096] multiply(p, rb) }
ENTRY e {
  table = bf16[32000,4096] parameter(0)
  ids = s32[1024,1] parameter(1)
  g = bf16[1024,1,4096] gather(table, ids), offset_dims={1,2}, collapsed_slice_dims={}, start_index_map={0},
      index_vector_dim=1, slice_sizes={1,4096}
  b = bf16[1024,4096] bitcast(g)
  c = f32[1024,4096] convert(b)
  ROOT t = f32[1024,4096] fusion(c), kind=kCustom, calls=norm,
      backend_config={"fusion_backend_config":{"kind":"__triton","block_level_fusion_config":{"num_warps":"4",
      "output_tiles":[{"sizes":["1","4096"]}]}}}
}"""


@pytest.mark.parametrize("check", [True, False])
def test_priority_fusion_leaves_what_triton_cannot_emit_out_of_a_triton_prologue(check):
    """XLA:GPU's priority fusion meets the norm's Triton fusion already built and
    fuses into it only what Triton emits: the embedding gather stays a kernel and
    the norm takes the convert of it.  Ours runs before the Triton joins; without
    the check the gather takes the convert, which then stays out of the norm (the
    kernel writes f32 for the norm to read back)."""
    from passes.fusion.triton_elementwise import TritonElementwiseFusion

    m, log = parse(GATHER_INTO_NORM), PriorityLog()
    GpuPriorityFusion(log=log, triton_joins=check).run(m)
    TritonElementwiseFusion().run(m)
    DeadCodeElimination().run(m)
    norm = m.entry.root
    assert norm.name == "t" and not any(i.opcode.value == "gather" for i in norm.fused_computation)
    assert check is any(i.opcode.value == "convert" for i in norm.fused_computation)
    refused = log.refused().get(("g", "b"), "")
    assert check is ("would keep %c out of Triton fusion %t: Triton does not emit gather %g" == refused)


_SM_CONFIG = ('{"fusion_backend_config":{"kind":"__triton","block_level_fusion_config":{"num_warps":"4",'
              '"output_tiles":[{"sizes":["1","1","2048"]}]}}}')
WINDOW_MASK = f"""HloModule mask
max {{ a = f32[] parameter(0)  b = f32[] parameter(1)  ROOT m = f32[] maximum(a, b) }}
add {{ a = f32[] parameter(0)  b = f32[] parameter(1)  ROOT s = f32[] add(a, b) }}
sm {{ p = f32[32,1024,2048] parameter(0)  z = f32[] constant(-inf)  r = f32[32,1024] reduce(p, z), dimensions={{2}}, to_apply=max
     rb = f32[32,1024,2048] broadcast(r), dimensions={{0,1}}  d = f32[32,1024,2048] subtract(p, rb)
     e = f32[32,1024,2048] exponential(d)  zero = f32[] constant(0)
     s = f32[32,1024] reduce(e, zero), dimensions={{2}}, to_apply=add  sb = f32[32,1024,2048] broadcast(s), dimensions={{0,1}}
     q = f32[32,1024,2048] divide(e, sb)  ROOT o = bf16[32,1024,2048] convert(q) }}
ENTRY e {{
  s0 = f32[32,1024,2048] parameter(0)
  s1 = f32[32,1024,2048] parameter(1)
  i0 = s32[1024,2048] iota(), iota_dimension=0
  i1 = s32[1024,2048] iota(), iota_dimension=1
  w = s32[] constant(4096)
  wb = s32[1024,2048] broadcast(w), dimensions={{}}
  lo = s32[1024,2048] subtract(i0, wb)
  causal = pred[1024,2048] compare(i0, i1), direction=GE
  window = pred[1024,2048] compare(i1, lo), direction=GT
  mask = pred[1024,2048] and(causal, window)
  mb = pred[32,1024,2048] broadcast(mask), dimensions={{1,2}}
  big = f32[] constant(-1e30)
  bb = f32[32,1024,2048] broadcast(big), dimensions={{}}
  x0 = f32[32,1024,2048] select(mb, s0, bb)
  x1 = f32[32,1024,2048] select(mb, s1, bb)
  t0 = bf16[32,1024,2048] fusion(x0), kind=kCustom, calls=sm, backend_config={_SM_CONFIG}
  t1 = bf16[32,1024,2048] fusion(x1), kind=kCustom, calls=sm, backend_config={_SM_CONFIG}
  ROOT r = (bf16[32,1024,2048], bf16[32,1024,2048]) tuple(t0, t1)
}}"""


@pytest.mark.parametrize("check", [True, False])
def test_a_mask_two_softmaxes_broadcast_stays_a_kernel_of_its_own(check):
    """Mistral's sliding-window mask, read by every layer's softmax and broadcast
    there over 32 heads: copied into each, every block of each softmax recomputes its
    tile of it, which XLA's tiled model prices slower than reading it; stock computes
    it once, and so does the check (without it, both softmaxes compute it)."""
    from passes.fusion.triton_elementwise import TritonElementwiseFusion

    m, log = parse(WINDOW_MASK), PriorityLog()
    GpuPriorityFusion(log=log, triton_joins=check).run(m)
    TritonElementwiseFusion().run(m)
    DeadCodeElimination().run(m)
    softmaxes = [i for i in m.entry if i.name in ("t0", "t1")]
    assert len(softmaxes) == 2 and all(any(i.opcode.value == "select" for i in t.fused_computation) for t in softmaxes)
    assert all(check is not any(i.opcode.value == "iota" for i in t.fused_computation) for t in softmaxes)
    assert check is any("would recompute %mask in every block of Triton fusion %t0" in r for r in log.refused().values())
    if not check:  # the model agrees with the decision: the module with the check is faster
        checked = parse(WINDOW_MASK)
        for p in (GpuPriorityFusion(), TritonElementwiseFusion(), DeadCodeElimination()):
            p.run(checked)
        dev = devices.load("h100")
        assert roofline(checked, dev).time_s < roofline(m, dev).time_s


MASK_BEFORE_AND_AFTER = WINDOW_MASK.replace("""  ROOT r = (bf16[32,1024,2048], bf16[32,1024,2048]) tuple(t0, t1)""", """  zero = bf16[] constant(0)
  zb = bf16[32,1024,2048] broadcast(zero), dimensions={}
  y0 = bf16[32,1024,2048] select(mb, t0, zb)
  ROOT r = (bf16[32,1024,2048], bf16[32,1024,2048]) tuple(y0, t1)""")


@pytest.mark.parametrize("check", [True, False])
def test_a_mask_applied_after_the_softmax_too_stays_a_kernel_of_its_own(check):
    """Mixtral masks the probabilities again after its softmax (``where(mask, p, 0)``):
    the select becomes the softmax's epilogue, and the mask copied into it would be
    recomputed in every block as surely as in the prologue; the check keeps it out
    of both (without it, the epilogue brings it in)."""
    from passes.fusion.triton_elementwise import TritonElementwiseFusion

    m, log = parse(MASK_BEFORE_AND_AFTER), PriorityLog()
    GpuPriorityFusion(log=log, triton_joins=check).run(m)
    TritonElementwiseFusion().run(m)
    DeadCodeElimination().run(m)
    t0 = next(i for i in m.entry if i.name == "t0")
    assert sum(i.opcode.value == "select" for i in t0.fused_computation) == 2  # prologue and epilogue joined
    assert check is not any(i.opcode.value == "iota" for i in t0.fused_computation)
    refused = [r for r in log.refused().values() if "would recompute %mask in every block of Triton fusion %t0" in r]
    assert len(refused) == (2 if check else 0)  # the prologue's copy of the mask and the epilogue's


def test_a_joined_triton_fusion_gets_the_tiling_the_tiled_model_prefers():
    """The select joins the softmax's Triton fusion, whose one-row tiles ([1, 1, 2048],
    4 warps) came with it; the joined fusion is tiled again as XLA tiles a new one, by
    the tiled model: [8, 1, 2048] with 8 warps, stock's own tiling of Llama-3-8B's
    masked softmax (the mask's row read once per 8 heads)."""
    from hlo_analysis.gpu_kernel_model import kernel_cost
    from passes.fusion.triton_elementwise import TritonElementwiseFusion

    m = parse(WINDOW_MASK)
    GpuPriorityFusion().run(m)
    TritonElementwiseFusion().run(m)
    t0 = next(i for i in m.entry if i.name == "t0")
    config = t0.backend_config["fusion_backend_config"]["block_level_fusion_config"]
    assert (config["output_tiles"], config["num_warps"]) == ([{"sizes": ["8", "1", "2048"]}], "8")
    dev = devices.load("h100")
    chosen = kernel_cost(t0, dev).exec_s
    t0.backend_config = {"fusion_backend_config": {"kind": "__triton", "block_level_fusion_config": {
        "num_warps": "4", "output_tiles": [{"sizes": ["1", "1", "2048"]}]}}}
    assert chosen < kernel_cost(t0, dev).exec_s


_ROUTER_SM = ('{"fusion_backend_config":{"kind":"__triton","block_level_fusion_config":{"num_warps":"1",'
              '"output_tiles":[{"sizes":["16","2"]}]}}}')
ROUTER = f"""HloModule router
add {{ a = f32[] parameter(0)  b = f32[] parameter(1)  ROOT s = f32[] add(a, b) }}
norm {{ p = f32[1024,2] parameter(0)  z = f32[] constant(0)  s = f32[1024] reduce(p, z), dimensions={{1}}, to_apply=add
       sb = f32[1024,2] broadcast(s), dimensions={{0}}  q = f32[1024,2] divide(p, sb)  ROOT o = bf16[1024,2] convert(q) }}
hot {{ w = bf16[1024,2] parameter(0)  ids = s32[1024,2] parameter(1)
      ib = s32[1024,2,8] broadcast(ids), dimensions={{0,1}}  io = s32[1024,2,8] iota(), iota_dimension=2
      eq = pred[1024,2,8] compare(ib, io), direction=EQ  wb = bf16[1024,2,8] broadcast(w), dimensions={{0,1}}
      z = bf16[] constant(0)  zb = bf16[1024,2,8] broadcast(z), dimensions={{}}  sel = bf16[1024,2,8] select(eq, wb, zb)
      c = f32[1024,2,8] convert(sel)  zf = f32[] constant(0)  r = f32[1024,8] reduce(c, zf), dimensions={{1}}, to_apply=add
      t = f32[8,1024] transpose(r), dimensions={{1,0}}  ROOT o = bf16[8,1024] convert(t) }}
mix {{ x = bf16[1024,4096] parameter(0)  h = bf16[8,1024] parameter(1)  e = bf16[8,1024,4096] parameter(2)
      hb = bf16[8,1024,4096] broadcast(h), dimensions={{0,1}}  m = bf16[8,1024,4096] multiply(hb, e)
      c = f32[8,1024,4096] convert(m)  zf = f32[] constant(0)  s = f32[1024,4096] reduce(c, zf), dimensions={{0}}, to_apply=add
      sc = bf16[1024,4096] convert(s)  ROOT o = bf16[1024,4096] add(x, sc) }}
ENTRY e {{
  p = f32[1024,2] parameter(0)
  ids = s32[1024,2] parameter(1)
  x = bf16[1024,4096] parameter(2)
  experts = bf16[8,1024,4096] parameter(3)
  t = bf16[1024,2] fusion(p), kind=kCustom, calls=norm, backend_config={_ROUTER_SM}
  h = bf16[8,1024] fusion(t, ids), kind=kLoop, calls=hot
  ROOT r = bf16[1024,4096] fusion(x, h, experts), kind=kLoop, calls=mix
}}"""


@pytest.mark.parametrize("kind", ["kLoop", "kInput"])
def test_a_triton_fusion_takes_its_consumer_of_new_dimensions_when_the_tiled_model_prices_it_faster(kind):
    """Mixtral's router: the top-2 weights' normalization (a Triton fusion,
    [1024, 2]), their one-hot spread over the 8 experts and transpose ([8, 1024]),
    the experts' weighted sum and the residual add ([1024, 4096]).  XLA:GPU's priority
    fusion makes the three one Triton fusion, tiled afresh, as the tiled model finds
    every instruction's tile and prices the one kernel faster; so does the pass, in
    two joins, each priced so before it is made.  Qwen3's router (top 8 of 128) reaches
    the pass with the one-hot's sum as a reduction fusion (kInput): joined the same."""
    from hlo_analysis.gpu_kernel_model import instruction_tiles, kernel_cost
    from passes.fusion.triton_elementwise import TritonElementwiseFusion

    dev = devices.load("h100")
    text = ROUTER.replace("kind=kLoop, calls=hot", f"kind={kind}, calls=hot")
    apart = parse(text)
    three = sum(kernel_cost(i, dev).exec_s for i in apart.entry if i.opcode.value == "fusion")
    m = parse(text)
    assert TritonElementwiseFusion().run(m)
    root = m.entry.root
    assert [i.opcode.value for i in m.entry if i.opcode.value != "parameter"] == ["fusion"]
    config = root.backend_config["fusion_backend_config"]
    assert config["kind"] == "__triton" and {"iota", "transpose", "divide"} <= {i.opcode.value for i in root.fused_computation}
    sizes = [int(s) for s in config["block_level_fusion_config"]["output_tiles"][0]["sizes"]]
    tiles = instruction_tiles(root.fused_computation, sizes)
    assert all(len(tiles[id(i)]) == len(i.shape.dims) for i in root.fused_computation if i.shape.is_array)
    assert kernel_cost(root, dev).exec_s < three


_QK_SM = ('{"fusion_backend_config":{"kind":"__triton","block_level_fusion_config":{"num_warps":"4",'
          '"output_tiles":[{"sizes":["1","16","128"]}]}}}')
QK_NORM_ROPE = f"""HloModule qk
add {{ a = f32[] parameter(0)  b = f32[] parameter(1)  ROOT s = f32[] add(a, b) }}
norm {{ p = f32[1024,32,128] parameter(0)  sq = f32[1024,32,128] multiply(p, p)  z = f32[] constant(0)
       r = f32[1024,32] reduce(sq, z), dimensions={{2}}, to_apply=add  e = f32[] constant(1e-06)
       eb = f32[1024,32] broadcast(e), dimensions={{}}  a = f32[1024,32] add(r, eb)  q = f32[1024,32] rsqrt(a)
       qb = f32[1024,32,128] broadcast(q), dimensions={{0,1}}  ROOT o = f32[1024,32,128] multiply(p, qb) }}
ENTRY e {{
  x = bf16[1024,5120] parameter(0)
  w = bf16[128] parameter(1)
  cos = bf16[1024,128] parameter(2)
  s = bf16[1024,4096] slice(x), slice={{[0:1024], [0:4096]}}
  b = bf16[1024,32,128] bitcast(s)
  c = f32[1024,32,128] convert(b)
  t = f32[1024,32,128] fusion(c), kind=kCustom, calls=norm, backend_config={_QK_SM}
  wf = f32[128] convert(w)
  wb = f32[1024,32,128] broadcast(wf), dimensions={{2}}
  m = f32[1024,32,128] multiply(t, wb)
  h = bf16[1024,32,128] convert(m)
  cb = bf16[1024,32,128] broadcast(cos), dimensions={{0,2}}
  hc = bf16[1024,32,128] multiply(h, cb)
  lo = bf16[1024,32,64] slice(h), slice={{[0:1024], [0:32], [0:64]}}
  hi = bf16[1024,32,64] slice(h), slice={{[0:1024], [0:32], [64:128]}}
  n = bf16[1024,32,64] negate(hi)
  rot = bf16[1024,32,128] concatenate(n, lo), dimensions={{2}}
  rs = bf16[1024,32,128] multiply(rot, cb)
  ROOT y = bf16[1024,32,128] add(hc, rs)
}}"""


@pytest.mark.parametrize("check", [True, False])
def test_a_qk_norm_takes_its_head_split_prologue_and_its_weight_multiply(check):
    """Qwen3's q/k norm, as XLA:GPU's replace mode hands it over: the norm's Triton
    fusion reads the heads as a slice and bitcast of the QKV GEMM's output converted
    to f32, writes f32, and RoPE reads the weight multiply converted to bf16.  The
    prologue joins (the tiles follow the bitcast that splits 4096 into 32 heads of
    128).  The epilogue joins only if our priority fusion leaves the weight multiply
    out of RoPE's kernels: it does, as the norm's f32 output is the larger round
    trip, and the norm then writes bf16, as stock's does."""
    from passes.fusion.triton_elementwise import TritonElementwiseFusion

    m, log = parse(QK_NORM_ROPE), PriorityLog()
    GpuPriorityFusion(log=log, triton_joins=check).run(m)
    TritonElementwiseFusion().run(m)
    DeadCodeElimination().run(m)
    norm = next(i for i in m.entry if triton_kind(i) == "__triton")
    assert {"slice", "bitcast"} <= {i.opcode.value for i in norm.fused_computation}
    assert (norm.shape.element_type.value == "bf16") is check
    refused = log.refused().get(("h", "hc"), "")
    assert check is refused.startswith("would keep %h out of Triton fusion %t's epilogue")


def test_a_consumer_triton_cannot_emit_stays_a_kernel_of_its_own():
    """The same router shifting the expert ids in the one-hot's kernel: Triton emits
    no s32 arithmetic shift (XLA: "Unsupported elementwise operation"), so that
    kernel is no Triton fusion's to take, and neither is the sum after it."""
    from passes.fusion.triton_elementwise import TritonElementwiseFusion

    m = parse(ROUTER.replace("ib = s32[1024,2,8] broadcast(ids)", """sh = s32[1024,2] shift-right-arithmetic(ids, ids)
      ib = s32[1024,2,8] broadcast(sh)"""))
    assert not TritonElementwiseFusion().run(m)
    assert [i.name for i in m.entry if i.opcode.value == "fusion"] == ["t", "h", "r"]


_LOGITS_SM = ('{"fusion_backend_config":{"kind":"__triton","block_level_fusion_config":{"num_warps":"1",'
              '"output_tiles":[{"sizes":["4","8"]}]}}}')
SPLIT_K_LOGITS = f"""HloModule logits
add {{ a = f32[] parameter(0)  b = f32[] parameter(1)  ROOT s = f32[] add(a, b) }}
partials {{ p = f32[16,1024,8] parameter(0)  z = f32[] constant(0)
           r = f32[1024,8] reduce(p, z), dimensions={{0}}, to_apply=add  ROOT c = bf16[1024,8] convert(r) }}
sm {{ x = bf16[1024,8] parameter(0)  f = f32[1024,8] convert(x)  z = f32[] constant(0)
     s = f32[1024] reduce(f, z), dimensions={{1}}, to_apply=add  sb = f32[1024,8] broadcast(s), dimensions={{0}}
     q = f32[1024,8] divide(f, sb)  ROOT o = bf16[1024,8] convert(q) }}
ENTRY e {{
  p = f32[16,1024,8] parameter(0)
  k = bf16[1024,8] fusion(p), kind=kLoop, calls=partials
  ROOT t = bf16[1024,8] fusion(k), kind=kCustom, calls=sm, backend_config={_LOGITS_SM}
}}"""


@pytest.mark.parametrize("partials, joins", [(1, True), (2, False)])
def test_a_triton_fusion_takes_a_split_k_reduce_as_its_prologue(partials, joins):
    """Mixtral's router logits come from a split-K GEMM: its 16 partial sums are
    reduced (and converted) in a loop fusion the router's softmax alone reads.  XLA's
    priority fusion puts that reduce in the softmax's Triton fusion, as the tiled
    model tiles it ([16, 4, 8] per block) and prices one kernel faster; so does the
    pass.  A reduce over two dimensions is not on Triton's support list: no join."""
    from passes.fusion.triton_elementwise import TritonElementwiseFusion

    text = SPLIT_K_LOGITS
    if partials == 2:
        text = text.replace("f32[16,1024,8]", "f32[4,4,1024,8]").replace("dimensions={0}", "dimensions={0,1}")
    m = parse(text)
    assert TritonElementwiseFusion().run(m) is joins
    t = m.entry.root
    assert t.opcode.value == "fusion" and triton_kind(t) == "__triton"
    assert ("reduce" in {i.opcode.value for i in t.fused_computation if i.shape.dims != (1024,)}) is joins
    assert len([i for i in m.entry if i.opcode.value == "fusion"]) == (1 if joins else 2)


@pytest.mark.parametrize("line, emits", [
    ("f32[1024,8] reduce(p3, z), dimensions={0}, to_apply=add", True),  # a split-K GEMM's partial sums
    ("f32[8] reduce(p3, z), dimensions={0,1}, to_apply=add", False),
    ("f32[16,1,8] slice(p3), slice={[0:16], [0:1], [0:8]}", True),
    ("f32[16,1030,8] pad(p3, z), padding=0_0x0_6x0_0", True),
    ("f32[16,1030,8] pad(p3, z), padding=0_0x6_0x0_0", False),
    ("s32[16,1024,8] shift-right-arithmetic(i3, i3)", False),
    ("s32[16,1024,8] and(i3, i3)", True),
])
def test_triton_emits_what_xlas_support_list_takes(line, emits):
    """``triton_emits`` follows XLA's Triton support list (support.cc): one-dimension
    reduces, slices and high pads yes; several reduced dimensions, low pads and
    integer shifts no."""
    from passes.fusion.triton_elementwise import triton_emits

    m = parse(f"""HloModule k
add {{ a = f32[] parameter(0)  b = f32[] parameter(1)  ROOT s = f32[] add(a, b) }}
ENTRY e {{ p3 = f32[16,1024,8] parameter(0)  i3 = s32[16,1024,8] convert(p3)  z = f32[] constant(0)
          ROOT r = {line} }}""")
    assert triton_emits(m.entry.root) is emits


SILU = """HloModule silu
ENTRY e {
  g = bf16[1024,14336] parameter(0)
  u = bf16[1024,14336] parameter(1)
  x = f32[1024,14336] convert(g)
  n = f32[1024,14336] negate(x)
  e = f32[1024,14336] exponential(n)
  one = f32[] constant(1)
  ob = f32[1024,14336] broadcast(one), dimensions={}
  d = f32[1024,14336] divide(ob, f32[1024,14336] add(e, ob))
  m = f32[1024,14336] multiply(x, d)
  c = bf16[1024,14336] convert(m)
  ROOT o = bf16[1024,14336] multiply(u, c)
}"""


def test_priority_fusion_computes_a_value_once_per_kernel():
    """SwiGLU's gate: ``convert(g)`` is read by the negate and by the multiply, so the
    queue copies it into both, and the two clusters merge later into one kernel.
    One copy stays (as in stock's kernel): XLA's model priced the second convert at
    +0.66 us on each of Llama-3-8B's 32 layers."""
    m, log = parse(SILU), PriorityLog()
    GpuPriorityFusion(log=log).run(m)
    DeadCodeElimination().run(m)
    assert ("x", ("n", "m"), "duplicate") in [(p, c, how) for p, c, _, how in log.steps]
    (kernel,) = [i for i in m.entry if i.opcode.value == "fusion"]
    converts = [i for i in kernel.fused_computation if i.opcode.value == "convert" and i.shape.element_type.value == "f32"]
    assert len(converts) == 1


def _rms(name: str, x: str) -> str:
    """RMSNorm lines of ``x`` (f32[4096,2304]) into ``name``, weighted by parameter w_``name``."""
    return f"""
  sq_{name} = f32[4096,2304] multiply({x}, {x})
  s_{name} = f32[4096] reduce(sq_{name}, z), dimensions={{1}}, to_apply=add
  mean_{name} = f32[4096] multiply(s_{name}, kb)
  r_{name} = f32[4096] rsqrt(add(mean_{name}, epsb))
  rb_{name} = f32[4096,2304] broadcast(r_{name}), dimensions={{0}}
  n_{name} = f32[4096,2304] multiply({x}, rb_{name})
  wf_{name} = f32[2304] convert(parameter_w_{name})
  w_{name} = f32[4096,2304] broadcast(wf_{name}), dimensions={{1}}
  {name} = f32[4096,2304] multiply(n_{name}, w_{name})"""


#: Gemma-2's sandwich norms: the attention output's norm, the residual add, the next
#: norm; the feed-forward output's norm added to the same residual.
SANDWICH = """HloModule sandwich
add { a = f32[] parameter(0)  b = f32[] parameter(1)  ROOT s = f32[] add(a, b) }
ENTRY e {
  attn = bf16[4096,2304] parameter(0)
  mlp = bf16[4096,2304] parameter(1)
  x = f32[4096,2304] parameter(2)
  parameter_w_post = bf16[2304] parameter(3)
  parameter_w_pre = bf16[2304] parameter(4)
  parameter_w_post2 = bf16[2304] parameter(5)
  z = f32[] constant(0)
  k = f32[] constant(0.000434)
  kb = f32[4096] broadcast(k), dimensions={}
  eps = f32[] constant(1e-6)
  epsb = f32[4096] broadcast(eps), dimensions={}
  attn_f = f32[4096,2304] convert(attn)
  mlp_f = f32[4096,2304] convert(mlp)""" + _rms("post", "attn_f") + """
  h = f32[4096,2304] add(x, post)""" + _rms("pre", "h") + _rms("post2", "mlp_f") + """
  out = f32[4096,2304] add(h, post2)
  pre_b = bf16[4096,2304] convert(pre)
  ROOT t = (bf16[4096,2304], f32[4096,2304]) tuple(pre_b, out)
}"""
#: The same with Gemma-2's bf16 residual stream: each norm's output converted to bf16
#: before its residual add, the sum converted to f32 for the next norm.
SANDWICH_BF16 = (SANDWICH.replace("x = f32[4096,2304] parameter(2)", "x = bf16[4096,2304] parameter(2)")
                 .replace("h = f32[4096,2304] add(x, post)",
                          "post_b = bf16[4096,2304] convert(post)\n  h = bf16[4096,2304] add(x, post_b)\n"
                          "  h_f = f32[4096,2304] convert(h)")
                 .replace("(h, h)", "(h_f, h_f)").replace("multiply(h, rb_pre)", "multiply(h_f, rb_pre)")
                 .replace("out = f32[4096,2304] add(h, post2)",
                          "post2_b = bf16[4096,2304] convert(post2)\n  out = bf16[4096,2304] add(h, post2_b)")
                 .replace("(bf16[4096,2304], f32[4096,2304]) tuple", "(bf16[4096,2304], bf16[4096,2304]) tuple"))


@needs_xla_gpu
@pytest.mark.parametrize("text", [SANDWICH, SANDWICH_BF16], ids=["f32", "bf16"])
def test_triton_elementwise_fusion_duplicates_a_norm_into_the_next_as_stock_does(text):
    """Gemma-2's sandwich norms in replace mode: the attention output's norm is read
    by the next norm (through the residual add) and by the second residual add.
    Duplicated into both, as stock's priority fusion does, the module is stock's two
    Triton kernels of two reductions each, and XLA:GPU compiles them (kept).  With a
    bf16 residual the norm's f32 output is a larger round trip than the residual
    add's, yet the add still goes into the next residual add (``_epilogue_tail``:
    a Triton fusion reads it)."""
    row = gpu_study_modes("sandwich", text, "gpu-priority-fusion,triton-elementwise-fusion,dce", "h100",
                          modes=("replace",))[0]
    assert row.kept and row.ours.kernels == row.stock.kernels == 2
    assert row.ours.predicted_us <= row.stock.predicted_us * 1.02


def test_gpu_best_names_the_gpu_passes():
    names = [p.name for p in parse_pipeline("gpu-best")]
    assert names == pass_names(GPU_BEST)
    assert "library-dot-fusion" not in names and "gpu-producer-consumer-fusion" in names


@needs_xla_gpu
def test_gpu_study_in_each_mode_on_top_beats_stock():
    rows = {r.mode: r for r in gpu_study_modes(DECODE, _text(DECODE), GPU_BEST, "h100")}
    assert set(rows) == set(FUSION_MODES)
    for r in rows.values():
        assert r.kept, r.mode  # XLA:GPU compiled every fusion we wrote
        assert r.stock.xla_priced > 0 and r.stock.kernels > 0
    top = rows["on-top"]
    # one cost model on both sides: every figure comes from our analyses of both optimized modules
    assert top.ours.kernels < top.stock.kernels
    # producer-first fusion may re-read a duplicated producer's operands to save a launch
    # (here 724 bytes of 1.1 MB for one kernel fewer), as XLA:GPU's priority fusion does
    assert top.ours.bytes <= top.stock.bytes * 1.001
    assert top.predicted_speedup > 1.0


@needs_xla_gpu
def test_calibrated_roofline_agrees_with_xla_where_xla_priced():
    """Over the kernels XLA priced itself (GEMMs apart: XLA prices them at the
    CUDA-core rate), our roofline's body time and XLA's estimate agree per kernel."""
    module = xla_gpu_model.compile_priced(_text(DECODE), "h100").optimized_module
    ours = {(k.computation, k.name): k.time_s - k.launch_s for k in roofline(module, devices.load("h100")).kernels}
    pairs = [(ours[(i.parent.name, i.name)], est.exec_s) for i, est in xla_gpu_model.priced(module)
             if not xla_gpu_model.is_gemm_fusion(i)]
    assert len(pairs) >= 10
    assert sum(a for a, _ in pairs) == pytest.approx(sum(b for _, b in pairs), rel=0.05)
    assert spearman([a for a, _ in pairs], [b for _, b in pairs]) > 0.95


@needs_xla_gpu
def test_xla_where_priced_runs_a_scan_body_once_per_layer():
    """MaxText scans its layers: XLA:GPU keeps the while loop, and each kernel of its
    body runs once per layer.  The XLA-where-priced time counts those runs as the
    roofline does (it counted each body kernel once: MaxText's tiny train step
    381 us against the roofline's 496)."""
    entry = next(corpus.load("maxtext-llama-tiny-train-f32", root=Path(corpus.CORPUS_DIR) / "third_party"))
    module = xla_gpu_model.compile_priced(entry.text("before_optimizations"), "h100").optimized_module
    dev = devices.load("h100")
    r = roofline(module, dev)
    assert max(k.executions for k in r.kernels) > 1
    t = xla_gpu_model.module_time(module, dev)
    assert t.priced > 0
    assert t.seconds == pytest.approx(r.time_s, rel=0.05)
    assert t.seconds > 1.1 * sum(k.time_s for k in r.kernels)  # the body's kernels, each once


#: Greedy sampling's argmax over a prefill's logits: a variadic reduce of the values
#: (converted to f32) and an iota of their indices.
ARGMAX = """HloModule argmax
mx { a = f32[] parameter(0)  ai = s32[] parameter(1)  b = f32[] parameter(2)  bi = s32[] parameter(3)
     g = pred[] compare(a, b), direction=GE  v = f32[] select(g, a, b)  i = s32[] select(g, ai, bi)
     ROOT t = (f32[], s32[]) tuple(v, i) }
ENTRY e {
  x = bf16[2,1024,1024]{2,1,0} parameter(0)
  c = f32[2,1024,1024]{2,1,0} convert(x)
  io = s32[2,1024,1024]{2,1,0} iota(), iota_dimension=2
  ninf = f32[] constant(-inf)
  z = s32[] constant(0)
  r = (f32[2,1024]{1,0}, s32[2,1024]{1,0}) reduce(c, io, ninf, z), dimensions={2}, to_apply=mx
  ROOT g1 = s32[2,1024]{1,0} get-tuple-element(r), index=1
}"""


@needs_xla_gpu
def test_an_argmax_takes_its_inputs_as_stock_does():
    """XLA:GPU fuses an argmax's convert and iota into its reduction (one kernel); so
    does `gpu-priority-fusion`, a variadic reduce being a fusion's root like any
    reduce.  Replace mode: stock's kernel count and time, and XLA keeps the fusion."""
    row = gpu_study_modes("argmax", ARGMAX, "gpu-priority-fusion,dce", "h100", modes=("replace",))[0]
    assert row.kept and row.ours.kernels == row.stock.kernels == 1
    assert row.ours.predicted_us <= row.stock.predicted_us * 1.01


def test_an_argmax_fused_keeps_outputs_equal_on_xla_cpu():
    """The same fusion on XLA:CPU (its loop emitter takes the variadic reduce as the
    fusion's root): outputs equal to stock's."""
    row = cpu_study("argmax", ARGMAX, labelled_for_cpu([get_pass("gpu-priority-fusion")]), reps=2, warmup=1)
    assert row.outputs == "exact" and row.kept
    reduces = [i for c in row.after.computations for i in c if i.opcode.value == "reduce"]
    assert len(reduces) == 1 and {o.opcode.value for o in reduces[0].operands} >= {"convert", "iota"}


@pytest.mark.parametrize("spec", ["gpu-priority-fusion", "gpu-producer-consumer-fusion", "gpu-multi-output-fusion",
                                  "gpu-best"])
def test_gpu_best_passes_keep_outputs_equal_on_xla_cpu(spec):
    """Backend-neutral rewrites: each GPU pass of gpu-best (its other passes are
    XLA:CPU's own, tested in test_fusion_corpus) and all of it run on XLA:CPU's
    module at its hook, outputs compared with stock XLA:CPU."""
    pipeline = labelled_for_cpu([get_pass(n) for n in pass_names(spec)])
    row = cpu_study(DECODE, _text(DECODE), pipeline, reps=2, warmup=1)
    assert row.outputs in ("exact", "close"), (spec, row.outputs)
    assert row.kept


@needs_xla_gpu
def test_hlo_bench_target_json(tmp_path, capsys):
    """``hlo bench --target``: no GPU, so both sides are compared by model, one JSON
    object with the sides' figures and whether XLA kept our fusions."""
    path = tmp_path / "decode.hlo"
    path.write_text(_text(DECODE))
    assert main(["bench", str(path), "--target", "h100", "--passes", "gpu-best", "--mode", "on-top", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    for side in ("stock", "ours"):
        assert {"kernels", "bytes", "flops", "predicted_us", "xla_where_priced_us"} <= set(out[side])
    assert out["fusions_kept"] is True and out["measured"] is False and out["mode"] == "on-top"
    assert out["ours"]["kernels"] < out["stock"]["kernels"]


def test_hlo_bench_target_refuses_what_it_cannot_do(tmp_path, capsys):
    path = tmp_path / "decode.hlo"
    path.write_text(_text(DECODE))
    assert main(["bench", str(path), "--target", "h999", "--passes", "gpu-best"]) == 2
    assert "--target: unknown device 'h999'" in capsys.readouterr().err
    assert main(["bench", str(path), "--mode", "on-top", "--passes", "gpu-best"]) == 2
    assert "--mode needs --target" in capsys.readouterr().err
    assert main(["bench", str(path), "--target", "h100"]) == 2
    assert "--target needs --passes" in capsys.readouterr().err


def test_gpu_passes_never_fuse_away_a_buffer_copy():
    """At the post-scheduler hook a copy is one copy insertion made (a donated KV
    cache read before it is written in place): fusing it into its readers would
    make them read the buffer itself.  Llama-3-8B decode lost its 4.3 GB cache
    copy this way (predicted 2.63x, from a copy that must stay)."""
    m = parse("""HloModule m
ENTRY e {
  p = f32[64,4096] parameter(0)
  c = f32[64,4096] copy(p)
  s1 = f32[8,4096] slice(c), slice={[0:8], [0:4096]}
  s2 = f32[8,4096] slice(c), slice={[8:16], [0:4096]}
  n1 = f32[8,4096] negate(s1)
  n2 = f32[8,4096] exponential(s2)
  ROOT t = (f32[8,4096], f32[8,4096], f32[64,4096]) tuple(n1, n2, c)
}""")
    log = PriorityLog()
    GpuPriorityFusion(log=log).run(m)
    assert m.entry.get_instruction("c").opcode.value == "copy"
    assert not any(x.opcode.value == "copy" for f in m.entry if f.fused_computation is not None
                   for x in f.fused_computation)  # not recomputed inside the readers either
    assert any(p == "c" and "copy insertion" in d.reason for p, _, d in log.entries if not d)


#: One weight's Adam step: the new moments (written out) and the parameter update
#: that reads them (a train step's tail, per weight).
ADAM = """HloModule adam
ENTRY e {
  p = bf16[8,256,512]{2,1,0} parameter(0)
  g = bf16[8,256,512]{2,1,0} parameter(1)
  m = f32[8,256,512]{2,1,0} parameter(2)
  v = f32[8,256,512]{2,1,0} parameter(3)
  c1 = f32[] parameter(4)
  c2 = f32[] parameter(5)
  gf = f32[8,256,512]{2,1,0} convert(g)
  b1 = f32[8,256,512]{2,1,0} broadcast(f32[] constant(0.9)), dimensions={}
  nb1 = f32[8,256,512]{2,1,0} broadcast(f32[] constant(0.1)), dimensions={}
  mb = f32[8,256,512]{2,1,0} multiply(m, b1)
  gb = f32[8,256,512]{2,1,0} multiply(gf, nb1)
  m1 = f32[8,256,512]{2,1,0} add(mb, gb)
  b2 = f32[8,256,512]{2,1,0} broadcast(f32[] constant(0.999)), dimensions={}
  nb2 = f32[8,256,512]{2,1,0} broadcast(f32[] constant(0.001)), dimensions={}
  g2 = f32[8,256,512]{2,1,0} multiply(gf, gf)
  vb = f32[8,256,512]{2,1,0} multiply(v, b2)
  g2b = f32[8,256,512]{2,1,0} multiply(g2, nb2)
  v1 = f32[8,256,512]{2,1,0} add(vb, g2b)
  bc1 = f32[8,256,512]{2,1,0} broadcast(c1), dimensions={}
  bc2 = f32[8,256,512]{2,1,0} broadcast(c2), dimensions={}
  mh = f32[8,256,512]{2,1,0} divide(m1, bc1)
  vh = f32[8,256,512]{2,1,0} divide(v1, bc2)
  eps = f32[8,256,512]{2,1,0} broadcast(f32[] constant(1e-08)), dimensions={}
  lr = f32[8,256,512]{2,1,0} broadcast(f32[] constant(0.001)), dimensions={}
  num = f32[8,256,512]{2,1,0} multiply(mh, lr)
  den = f32[8,256,512]{2,1,0} add(f32[8,256,512]{2,1,0} sqrt(vh), eps)
  step = f32[8,256,512]{2,1,0} divide(num, den)
  pf = f32[8,256,512]{2,1,0} convert(p)
  p1 = bf16[8,256,512]{2,1,0} convert(f32[8,256,512]{2,1,0} subtract(pf, step))
  ROOT t = (bf16[8,256,512]{2,1,0}, f32[8,256,512]{2,1,0}, f32[8,256,512]{2,1,0}) tuple(p1, m1, v1)
}"""



@needs_xla_gpu
@pytest.mark.parametrize("producer_consumer", [True, False])
def test_adam_makes_one_kernel_of_three_outputs_as_stock_does(producer_consumer):
    """Stock XLA:GPU makes one weight's Adam step one loop kernel with three outputs
    (the new parameter and both moments): its multi-output fusion moves the moments
    into the update that reads them.  Priority fusion alone leaves them a kernel of
    their own, since duplicating them into the update costs more than it saves;
    `gpu-multi-output-fusion`'s producer-consumer half joins them, at stock's time.
    Without it: two kernels, slower."""
    from passes.fusion.multi_output import GpuMultiOutputFusion

    passes = [GpuPriorityFusion(), GpuMultiOutputFusion(producer_consumer=producer_consumer), DeadCodeElimination()]
    row = gpu_study_modes("adam", ADAM, passes, "h100", modes=("replace",))[0]
    assert row.kept and row.stock.kernels == 1
    if producer_consumer:
        assert row.ours.kernels == 1
        assert row.ours.predicted_us <= row.stock.predicted_us * 1.01
    else:
        assert row.ours.kernels == 2 and row.ours.predicted_us > row.stock.predicted_us * 1.1


def test_adam_in_one_kernel_keeps_outputs_equal_on_xla_cpu():
    """The same three-output fusion on XLA:CPU: outputs equal to stock's."""
    row = cpu_study("adam", ADAM, labelled_for_cpu([GpuPriorityFusion(), get_pass("gpu-multi-output-fusion"),
                                                     DeadCodeElimination()]), reps=2, warmup=1)
    assert row.outputs == "exact" and row.kept
    fusions = [i for i in row.after.entry if i.opcode.value == "fusion" and i.shape.byte_size > 4]  # not XLA's scalar 1/c
    assert len(fusions) == 1 and fusions[0].shape.is_tuple and len(fusions[0].shape.tuple_shapes) == 3


#: A per-head norm's scale computed on the transposed sums ([4,4,128], rsqrt) and
#: applied, broadcast over the 64 lanes of each head, in the transpose feeding attention.
RSQRT_SCALE = """HloModule qk_norm_scale
ENTRY e {
  ss = f32[4,128,4]{2,1,0} parameter(0)
  y = bf16[4,128,4,64]{3,2,1,0} parameter(1)
  t = f32[4,4,128]{2,1,0} transpose(ss), dimensions={0,2,1}
  inv = f32[4,4,128]{2,1,0} broadcast(f32[] constant(0.015625)), dimensions={}
  mean = f32[4,4,128]{2,1,0} multiply(t, inv)
  eps = f32[4,4,128]{2,1,0} broadcast(f32[] constant(1e-06)), dimensions={}
  r = f32[4,4,128]{2,1,0} rsqrt(f32[4,4,128]{2,1,0} add(mean, eps))
  yf = f32[4,128,4,64]{3,2,1,0} convert(y)
  yt = f32[4,4,64,128]{3,2,1,0} transpose(yf), dimensions={0,2,3,1}
  br = f32[4,4,64,128]{3,2,1,0} broadcast(r), dimensions={0,1,3}
  ROOT o = bf16[4,4,64,128]{3,2,1,0} convert(f32[4,4,64,128]{3,2,1,0} multiply(yt, br))
}"""


@needs_xla_gpu
@pytest.mark.parametrize("expensive_reuse", [False, True])
def test_an_rsqrt_read_64_times_joins_its_consumer_when_the_model_prices_it(expensive_reuse):
    """XLA:GPU's priority fusion has no rule against recomputing an expensive
    producer per reused element: its cost model counts the reads (and an f32 rsqrt
    is cheap there). Stock duplicates the rsqrt into the transpose kernel: one
    kernel. `gpu-priority-fusion` asks the same way (``expensive_reuse`` off); with
    XLA:CPU's rule on, the rsqrt stays a kernel of its own, slower."""
    passes = [GpuPriorityFusion(expensive_reuse=expensive_reuse), DeadCodeElimination()]
    row = gpu_study_modes("rsqrt_scale", RSQRT_SCALE, passes, "h100", modes=("replace",))[0]
    assert row.kept and row.stock.kernels == 1
    if expensive_reuse:
        assert row.ours.kernels == 2 and row.ours.predicted_us > 1.5 * row.stock.predicted_us
    else:
        assert row.ours.kernels == 1 and row.ours.predicted_us <= row.stock.predicted_us * 1.01


def _threefry_like_loop() -> str:
    """Four rounds of a threefry-like mix of two u32 arrays, in a while loop (as
    ``jax.random`` lowers): after XLA:GPU's copy insertion, control edges order
    each round's reads of the old loop state before its in-place writers."""
    rounds = []
    for n, r in zip(range(1, 5), (13, 15, 26, 6)):
        p = n - 1
        rounds.append(f"""
  rc{n} = u32[] constant({r})
  lc{n} = u32[] constant({32 - r})
  br{n} = u32[8,256]{{1,0}} broadcast(rc{n}), dimensions={{}}
  bl{n} = u32[8,256]{{1,0}} broadcast(lc{n}), dimensions={{}}
  sl{n} = u32[8,256]{{1,0}} shift-left(b{p}, br{n})
  sr{n} = u32[8,256]{{1,0}} shift-right-logical(b{p}, bl{n})
  rot{n} = u32[8,256]{{1,0}} or(sl{n}, sr{n})
  a{n} = u32[8,256]{{1,0}} add(a{p}, b{p})
  b{n} = u32[8,256]{{1,0}} xor(rot{n}, a{n})""")
    state = "(s32[], u32[8,256]{1,0}, u32[8,256]{1,0})"
    return f"""HloModule threefry_like

body {{
  s = {state} parameter(0)
  i = s32[] get-tuple-element(s), index=0
  a0 = u32[8,256]{{1,0}} get-tuple-element(s), index=1
  b0 = u32[8,256]{{1,0}} get-tuple-element(s), index=2
  one = s32[] constant(1)
  next = s32[] add(i, one){"".join(rounds)}
  ROOT t = {state} tuple(next, a4, b4)
}}

cond {{
  c = {state} parameter(0)
  ci = s32[] get-tuple-element(c), index=0
  n = s32[] constant(5)
  ROOT lt = pred[] compare(ci, n), direction=LT
}}

ENTRY e {{
  x = u32[8,256]{{1,0}} parameter(0)
  y = u32[8,256]{{1,0}} parameter(1)
  z = s32[] constant(0)
  init = {state} tuple(z, x, y)
  w = {state} while(init), condition=cond, body=body
  ra = u32[8,256]{{1,0}} get-tuple-element(w), index=1
  rb = u32[8,256]{{1,0}} get-tuple-element(w), index=2
  ROOT r = (u32[8,256]{{1,0}}, u32[8,256]{{1,0}}) tuple(ra, rb)
}}
"""


@needs_xla_gpu
def test_a_loop_body_ordered_by_control_edges_fuses_as_stock_does():
    """In replace mode our passes run after XLA:GPU's copy insertion, whose control
    edges order the reads of the loop state before its in-place writers.  The
    rounds read that state element for element, so one kernel keeps that order:
    the fusion takes the edges that leave it and the body is stock's two kernels
    (the counter and the rounds).  Refusing every instruction with a control edge
    left eight (own sampler's ``generate`` in replace: 0.729 -> 0.975)."""
    from hlo_lab.study import gpu_passes, ours

    res = Measurement("gpu", target="h100").compile(_threefry_like_loop(),
                                                    ours(gpu_passes("gpu-best", "h100"), "gpu", "replace"))
    seen = parse(res.hook.seen[-1])
    assert any(i.control_predecessors for c in seen.computations for i in c)
    whiles = [i for c in res.optimized_module.computations for i in c if i.opcode.value == "while"]
    body = whiles[0].called_computation_map["body"][0]
    kernels = [i for i in body if i.opcode.value == "fusion"]
    assert len(kernels) == 2, [k.name for k in kernels]
    rounds = max(kernels, key=lambda k: len(list(k.fused_computation)))
    assert rounds.shape.is_tuple and len(rounds.shape.tuple_shapes) == 2
