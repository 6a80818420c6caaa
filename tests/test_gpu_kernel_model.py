"""Our GPU kernel model (hlo_analysis.gpu_kernel_model) against XLA:GPU's own
GpuPerformanceModel: the formulas one by one, and the per-kernel agreement on a
real deviceless XLA:GPU compile of a corpus module."""

from __future__ import annotations

import math

import numpy as np
import pytest

import corpus
import hlo_tools
from hlo_analysis import devices, roofline
from hlo_lab.measured import xla_gpu_model
from hlo_analysis import gpu_kernel_model as g
from hlo_analysis.cost import KernelTime, analyze
from hlo_analysis.rank_stats import spearman
from xla_bridge import jax_internals

H100 = devices.load("h100")
PER_BLOCK = 1.98e9 * 32  # bytes/s one block can move: clock x memory_transactions_per_clock


def test_adjust_bandwidth_caps_few_blocks():
    assert g.adjust_bandwidth(3.35e12, 1, H100) == pytest.approx(PER_BLOCK)
    assert g.adjust_bandwidth(3.35e12, 10, H100) == pytest.approx(10 * PER_BLOCK)
    assert g.adjust_bandwidth(3.35e12, 1000, H100) == 3.35e12  # many blocks: DRAM-bound


def test_read_time_tiers():
    blocks = 10_000  # no block cap
    mib = 2**20
    # first read from DRAM; re-reads of a buffer that fits L1 (2 KiB x 132 SMs) at 2.5 x 8
    small = g.OperandRead(total=3 * 100_000, net=100_000, element_bytes=4)
    assert g.read_seconds(small, blocks, H100) == pytest.approx(1e5 / 3.35e12 + 2e5 / (3.35e12 * 20))
    # fits L2 (50 MiB) but not L1: re-reads at 2.5x
    mid = g.OperandRead(total=2 * 10 * mib, net=10 * mib, element_bytes=4)
    assert g.read_seconds(mid, blocks, H100) == pytest.approx(10 * mib / 3.35e12 + 10 * mib / (3.35e12 * 2.5))
    # does not fit L2, uncoalesced bf16: every read wastes 62 of 64 bytes
    big = g.OperandRead(total=2 * 100 * mib, net=100 * mib, element_bytes=2, coalesced=False)
    assert g.read_seconds(big, blocks, H100) == pytest.approx(2 * 100 * mib / (3.35e12 * 2 / 64))
    # one block: everything at 63 GB/s
    assert g.read_seconds(small, 1, H100) == pytest.approx(3e5 / PER_BLOCK)


def test_compute_write_and_overlap():
    # a block of 2 threads does 2 x 3.96 flops per ns; 128 threads cap at fpus_per_core
    assert g.compute_seconds(20, g.Launch(1, 2), H100) == pytest.approx(20 / (3.96 * 2) * 1e-9)
    assert g.compute_seconds(1e6, g.Launch(500, 256), H100) == pytest.approx(1e6 / (3.96 * 128 * 132) * 1e-9)
    assert g.write_seconds(3.35e6, H100) == pytest.approx(1e-6)
    assert g.combine(1.0, 3.0) == pytest.approx(3.05)


def _module(body: str) -> hlo_tools.Module:
    return hlo_tools.parse("HloModule m\n\n" + body)


def test_flops_profile_launch_and_broadcast_reuse():
    m = _module(
        "%f (p: f32[64,32]) -> f32[64,32] {\n  %p = f32[64,32]{1,0} parameter(0)\n  %z = f32[] constant(0)\n"
        "  %r = f32[64]{0} reduce(%p, %z), dimensions={1}, to_apply=%add\n"
        "  %b = f32[64,32]{1,0} broadcast(%r), dimensions={0}\n  %s = f32[64,32]{1,0} subtract(%p, %b)\n"
        "  ROOT %e = f32[64,32]{1,0} exponential(%s)\n}\n\n"
        "%add (x: f32[], y: f32[]) -> f32[] {\n  %x = f32[] parameter(0)\n  %y = f32[] parameter(1)\n"
        "  ROOT %a = f32[] add(%x, %y)\n}\n\n"
        "ENTRY %e {\n  %a = f32[64,32]{1,0} parameter(0)\n"
        "  ROOT %fu = f32[64,32]{1,0} fusion(%a), kind=kLoop, calls=%f\n}\n")
    fu = m.entry.root
    n = 64 * 32
    # exp 79 + subtract 7 per element; the reduce (add: 7 per reduced element) is
    # recomputed for each of the 32 elements its broadcast feeds
    assert g.instruction_flops(fu) == pytest.approx(n * (79 + 7) + 32 * (n - 64) * 7)
    assert g.launch_dimensions(fu, H100) == g.Launch(16, 128)  # 2048 elements, 128 a block, no unroll
    (read,) = g.operand_reads(fu)
    assert (read.net, read.total) == (n * 4, 33 * n * 4)  # once by the subtract, 32 times by the reduce


def test_triton_launch_from_the_tile_config():
    m = _module(
        "%f (p: f32[8,512]) -> f32[8,512] {\n  %p = f32[8,512]{1,0} parameter(0)\n"
        "  ROOT %n = f32[8,512]{1,0} negate(%p)\n}\n\n"
        "ENTRY %e {\n  %a = f32[8,512]{1,0} parameter(0)\n"
        "  ROOT %fu = f32[8,512]{1,0} fusion(%a), kind=kCustom, calls=%f, backend_config={\"fusion_backend_config\":"
        "{\"kind\":\"__triton\",\"block_level_fusion_config\":{\"num_warps\":\"2\",\"output_tiles\":[{\"sizes\":[\"1\",\"128\"]}]}}}\n}\n")
    assert g.launch_dimensions(m.entry.root, H100) == g.Launch(8 * 4, 64)


#: Llama-3-8B's masked softmax as stock XLA:GPU emits it for H100 (1024 tokens, 32
#: heads): the causal mask arrives as a parameter that the kernel broadcasts
_SOFTMAX = (
    "%max (x: f32[], y: f32[]) -> f32[] {\n  %x = f32[] parameter(0)\n  %y = f32[] parameter(1)\n"
    "  ROOT %m = f32[] maximum(%x, %y)\n}\n\n"
    "%add (x: f32[], y: f32[]) -> f32[] {\n  %x = f32[] parameter(0)\n  %y = f32[] parameter(1)\n"
    "  ROOT %a = f32[] add(%x, %y)\n}\n\n"
    "%f (s: f32[32,1024,2048], mask: pred[1024,2048]) -> bf16[32,1024,2048] {\n"
    "  %mask = pred[1024,2048]{1,0} parameter(1)\n"
    "  %bm = pred[32,1024,2048]{2,1,0} broadcast(%mask), dimensions={1,2}\n"
    "  %s = f32[32,1024,2048]{2,1,0} parameter(0)\n  %low = f32[] constant(-2.38197633e+38)\n"
    "  %bl = f32[32,1024,2048]{2,1,0} broadcast(%low), dimensions={}\n"
    "  %sel = f32[32,1024,2048]{2,1,0} select(%bm, %s, %bl)\n  %ninf = f32[] constant(-inf)\n"
    "  %mx = f32[32,1024]{1,0} reduce(%sel, %ninf), dimensions={2}, to_apply=%max\n"
    "  %bmx = f32[32,1024,2048]{2,1,0} broadcast(%mx), dimensions={0,1}\n"
    "  %sub = f32[32,1024,2048]{2,1,0} subtract(%sel, %bmx)\n  %exp = f32[32,1024,2048]{2,1,0} exponential(%sub)\n"
    "  %zero = f32[] constant(0)\n  %sum = f32[32,1024]{1,0} reduce(%exp, %zero), dimensions={2}, to_apply=%add\n"
    "  %bs = f32[32,1024,2048]{2,1,0} broadcast(%sum), dimensions={0,1}\n"
    "  %div = f32[32,1024,2048]{2,1,0} divide(%exp, %bs)\n  ROOT %c = bf16[32,1024,2048]{2,1,0} convert(%div)\n}\n\n"
    "ENTRY %e {\n  %a = f32[32,1024,2048]{2,1,0} parameter(0)\n  %k = pred[1024,2048]{1,0} parameter(1)\n"
    "  ROOT %fu = bf16[32,1024,2048]{2,1,0} fusion(%a, %k), kind=kCustom, calls=%f, backend_config={\"fusion_backend_config\":"
    "{\"kind\":\"__triton\",\"block_level_fusion_config\":{\"num_warps\":\"8\",\"output_tiles\":[{\"sizes\":[\"8\",\"1\",\"2048\"]}]}}}\n}\n")


def test_a_broadcast_parameter_is_read_once_per_tile_as_xla_indexes_it():
    """The mask's tile is the output tile's [1, 2048] in the broadcast's dimensions,
    read by each of the 4 x 1024 tiles: 8 MB (not the 64 MB of one whole mask per head).
    XLA's indexing-cost-model wrote 127.556 us for this kernel (compute 121.358, memory
    121.488; jaxlib 0.12.0.1, deviceless H100 compile of llama3-full-prefill-bf16)."""
    fu = _module(_SOFTMAX).entry.root
    c = g.kernel_cost(fu, H100)
    assert c.launch == g.Launch(4 * 1024, 256)
    mask_bytes = 1024 * 2048
    assert c.read_s == pytest.approx(g.read_seconds(g.OperandRead(32 * mask_bytes * 4, 32 * mask_bytes * 4, 4), 4096, H100)
                                     + g.read_seconds(g.OperandRead(4096 * 2048, mask_bytes, 1), 4096, H100))
    assert c.exec_s * 1e6 == pytest.approx(127.556, rel=0.005)
    assert c.memory_s * 1e6 == pytest.approx(121.488, rel=0.005)


_WEIGHTED = (
    "%f (x: f32[1024,4096], w: bf16[4096]) -> f32[1024,4096] {\n  %x = f32[1024,4096]{1,0} parameter(0)\n"
    "  %w = bf16[4096]{0} parameter(1)\n  %wf = f32[4096]{0} convert(%w)\n"
    "  %bw = f32[1024,4096]{1,0} broadcast(%wf), dimensions={1}\n  ROOT %y = f32[1024,4096]{1,0} multiply(%x, %bw)\n}\n\n"
    "ENTRY %e {\n  %a = f32[1024,4096]{1,0} parameter(0)\n  %b = bf16[4096]{0} parameter(1)\n"
    "  ROOT %fu = f32[1024,4096]{1,0} fusion(%a, %b), kind=kCustom, calls=%f, backend_config={\"fusion_backend_config\":"
    "{\"kind\":\"__triton\",\"block_level_fusion_config\":{\"num_warps\":\"4\",\"output_tiles\":[{\"sizes\":[\"1\",\"4096\"]}]}}}\n}\n")


def test_a_tiled_kernel_computes_each_instruction_once_per_block():
    """XLA's tiled model counts every instruction's padded tile in every block
    (EstimateRunTimeForTiledHloComputation): the weight's convert, broadcast along
    the rows, is computed by each of the 1024 row blocks, not once."""
    fu = _module(_WEIGHTED).entry.root
    body = {i.name: i for i in fu.fused_computation}
    c = g.kernel_cost(fu, H100)
    per_block = g.instruction_flops(body["wf"]) + g.instruction_flops(body["y"]) / 1024
    assert c.launch.blocks == 1024
    assert c.flops == pytest.approx(1024 * per_block)
    assert g.instruction_tiles(fu.fused_computation, [1, 4096])[id(body["wf"])] == [4096]



@pytest.mark.parametrize("x, shape_op, tile, tracked", [
    ("f32[4,8]", "f32[8,4] transpose(%x), dimensions={1,0}", [1, 1], True),
    ("f32[4,8]", "f32[1,4,8] bitcast(%x)", [1, 1, 1], True),
    ("f32[4,8]", "f32[32] reshape(%x)", [16], True),  # [2, 8] of x
    ("f32[4,8]", "f32[32] reshape(%x)", [4], True),  # [1, 4] of x
    ("f32[32]", "f32[4,8] bitcast(%x)", [2, 8], True),  # [16] of x
    ("f32[32]", "f32[4,8] bitcast(%x)", [2, 4], False),  # two runs of 4: no one tile of x
    ("f32[4,6]", "f32[6,4] bitcast(%x)", [1, 4], False)])  # both sides split: not followed
def test_tiles_every_instruction_only_when_each_keeps_its_dimensions(x, shape_op, tile, tracked):
    """A fusion becomes a Triton fusion of its own only when every instruction's tile
    is known dimension by dimension.  A bitcast or reshape that merges or splits
    dimensions is followed when one tile of its operand reads the same elements
    (``reshaped_tile``); otherwise ``instruction_tiles`` falls back to the tile's size."""
    op = shape_op.split(" ", 1)[0]
    body = _module(f"ENTRY %e {{\n  %x = {x}{{{','.join(str(i) for i in reversed(range(x.count(',') + 1)))}}} parameter(0)\n"
                   f"  %y = {shape_op}\n  ROOT %z = {op} negate(%y)\n}}\n").entry
    assert g.tiles_every_instruction(body, tile) is tracked


def test_the_qk_norm_prologue_reads_one_tile_of_the_gemm_output():
    """Qwen3's q/k norm reads its heads as a bitcast of a slice of the QKV GEMM's output,
    [1024, 4096] -> [1024, 32, 128]: a tile of whole heads is one run of a row."""
    body = _module("ENTRY %e {\n  %x = bf16[1024,5120]{1,0} parameter(0)\n"
                   "  %s = bf16[1024,4096]{1,0} slice(%x), slice={[0:1024], [0:4096]}\n"
                   "  %b = bf16[1024,32,128]{2,1,0} bitcast(%s)\n  ROOT %c = f32[1024,32,128]{2,1,0} convert(%b)\n}\n").entry
    tiles = g.instruction_tiles(body, [1, 16, 128])
    named = {i.name: tiles[id(i)] for i in body}
    assert named["s"] == [1, 2048] and named["x"] == [1, 2048]
    assert g.reshaped_tile([1024, 32, 128], [2, 16, 64], [1024, 4096]) is None


def test_a_loop_labelled_fusion_whose_root_is_a_transpose_is_emitted_by_the_transpose_emitter():
    """XLA picks its emitter from the roots' heroes, not from the kind label: its
    multi-output fusion of Qwen3-MoE's Adam update (the new parameter and its
    transpose) is labelled kLoop and tiled through shared memory, reads coalesced
    (XLA's estimate 1.5 ms; priced as uncoalesced loop reads, 31.3 ms).  A transpose
    behind a slice heads nothing: that fusion is a loop, and reads uncoalesced."""
    m = _module("""%f (p: bf16[64,256,512], q: bf16[64,256,512]) -> (bf16[64,256,512], bf16[64,512,256]) {
  %p = bf16[64,256,512]{2,1,0} parameter(0)
  %q = bf16[64,256,512]{2,1,0} parameter(1)
  %a = bf16[64,256,512]{2,1,0} add(%p, %q)
  %t = bf16[64,512,256]{2,1,0} transpose(%a), dimensions={0,2,1}
  ROOT %r = (bf16[64,256,512]{2,1,0}, bf16[64,512,256]{2,1,0}) tuple(%a, %t)
}

%g (p: bf16[64,256,512]) -> bf16[64,512,128] {
  %p = bf16[64,256,512]{2,1,0} parameter(0)
  %t = bf16[64,512,256]{2,1,0} transpose(%p), dimensions={0,2,1}
  %s = bf16[64,512,128]{2,1,0} slice(%t), slice={[0:64], [0:512], [0:128]}
  ROOT %n = bf16[64,512,128]{2,1,0} negate(%s)
}

ENTRY %e {
  %x = bf16[64,256,512]{2,1,0} parameter(0)
  %y = bf16[64,256,512]{2,1,0} parameter(1)
  %u = (bf16[64,256,512]{2,1,0}, bf16[64,512,256]{2,1,0}) fusion(%x, %y), kind=kLoop, calls=%f
  %v = bf16[64,512,128]{2,1,0} fusion(%x), kind=kLoop, calls=%g
  %w = bf16[64,512,128]{2,1,0} fusion(%x), kind=kInput, calls=%g
  ROOT %o = (bf16[64,512,128]{2,1,0}, bf16[64,512,128]{2,1,0}, (bf16[64,256,512]{2,1,0}, bf16[64,512,256]{2,1,0})) tuple(%v, %w, %u)
}
""")
    u, v, w = (next(i for i in m.entry if i.name == n) for n in "uvw")
    assert g.transpose_emitter(u) and g.coalesced(u)
    assert not g.transpose_emitter(v) and not g.coalesced(v)
    # labelled kInput (as a fusion with a tiled transpose inside is), still a loop:
    # Qwen3-MoE's expert GEMM transposed into the slices its SiLU halves read
    assert not g.transpose_emitter(w) and not g.coalesced(w)
    # a multi-output fusion of the transpose and a loop over half of it: the loop
    # output is not of the transpose's input size, so XLA finds no consistent hero
    half = _module("""%h (p: bf16[64,256,512]) -> (bf16[64,512,256], bf16[64,512,128]) {
  %p = bf16[64,256,512]{2,1,0} parameter(0)
  %t = bf16[64,512,256]{2,1,0} transpose(%p), dimensions={0,2,1}
  %s = bf16[64,512,128]{2,1,0} slice(%t), slice={[0:64], [0:512], [0:128]}
  %n = bf16[64,512,128]{2,1,0} negate(%s)
  ROOT %r = (bf16[64,512,256]{2,1,0}, bf16[64,512,128]{2,1,0}) tuple(%t, %n)
}

ENTRY %e {
  %x = bf16[64,256,512]{2,1,0} parameter(0)
  ROOT %m = (bf16[64,512,256]{2,1,0}, bf16[64,512,128]{2,1,0}) fusion(%x), kind=kInput, calls=%h
}
""")
    assert not g.transpose_emitter(half.entry.root) and not g.coalesced(half.entry.root)
    uncoalesced = g.kernel_cost(u, H100, reads=[g.OperandRead(r.total, r.net, r.element_bytes, False)
                                                 for r in g.operand_reads(u)])
    assert g.kernel_cost(u, H100).exec_s < uncoalesced.exec_s / 5


def test_the_hero_walk_passes_elementwise_ops_with_other_operands_but_not_a_reduce_or_a_second_transpose():
    """FindNonTrivialHero: from the root up unary ops, then a search through
    elementwise ops of up to three operands for the one tiled transpose, which
    only elementwise ops may read."""
    m = _module("""%f (p: f32[256,512], q: f32[512,256]) -> f32[512,256] {
  %p = f32[256,512]{1,0} parameter(0)
  %q = f32[512,256]{1,0} parameter(1)
  %t = f32[512,256]{1,0} transpose(%p), dimensions={1,0}
  %a = f32[512,256]{1,0} add(%t, %q)
  ROOT %n = f32[512,256]{1,0} negate(%a)
}

%g (p: f32[256,512]) -> f32[512,256] {
  %p = f32[256,512]{1,0} parameter(0)
  %t = f32[512,256]{1,0} transpose(%p), dimensions={1,0}
  %u = f32[512,256]{1,0} transpose(%p), dimensions={1,0}
  ROOT %a = f32[512,256]{1,0} add(%t, %u)
}

ENTRY %e {
  %x = f32[256,512]{1,0} parameter(0)
  %y = f32[512,256]{1,0} parameter(1)
  %one = f32[512,256]{1,0} fusion(%x, %y), kind=kLoop, calls=%f
  ROOT %two = f32[512,256]{1,0} fusion(%x), kind=kInput, calls=%g
}
""")
    one, two = (next(i for i in m.entry if i.name == n) for n in ("one", "two"))
    assert g.non_trivial_hero(one.fused_computation.root).name == "t"
    assert g.transpose_emitter(one)
    root = two.fused_computation.root
    assert g.non_trivial_hero(root) is root and not g.transpose_emitter(two)


def test_recomputing_a_broadcast_value_pays_while_the_kernel_waits_on_memory():
    """Llama's causal mask, recomputed in each of the softmax's 4096 blocks instead
    of read: a compare or two per element hides under the kernel's memory time; a
    hundred do not (Mistral's sliding window is fourteen ops, per layer)."""
    fu = _module(_SOFTMAX).entry.root
    mask, elements = fu.operands[1], 1024 * 2048
    assert g.recompute_in_tiles_pays(fu, mask, 1.0 * elements, (1, 2), H100)
    assert not g.recompute_in_tiles_pays(fu, mask, 100.0 * elements, (1, 2), H100)
    row_max = next(i for i in fu.fused_computation if i.name == "mx")  # one [8, 1] tile per block: computed once
    assert g.recompute_in_tiles_pays(fu, row_max, 1e6 * 32 * 1024, (0, 1), H100)


def test_host_path_is_unchanged():
    """A CPU device keeps the plain roofline: max(compute, memory) + launch."""
    host = devices.Device(name="cpu-test", kind="cpu", peak_flops={"f32": 1e11}, vector_flops=1e10,
                          transcendentals_per_s=1e9, memory_bandwidth=2e10, launch_overhead_s=5e-7)
    m = _module("ENTRY %e {\n  %a = f32[1024]{0} parameter(0)\n  %x = f32[1024]{0} exponential(%a)\n"
                "  ROOT %y = f32[1024]{0} add(%x, %a)\n}\n")
    costs = analyze(m).by_name()
    for k in roofline.roofline(m, host).kernels:
        c = costs[k.name]
        want = KernelTime(c.flops / 1e10 + c.transcendentals / 1e9, c.bytes_accessed / 2e10, 5e-7)
        assert (k.compute_s, k.memory_s, k.time_s) == (want.compute_s, want.memory_s, want.time_s)


# -- against XLA -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def priced_decode():
    if not jax_internals.cuda_plugin_available():
        pytest.skip("jax's CUDA plugin is not installed: XLA:GPU cannot compile, even deviceless")
    (entry,) = list(corpus.load("llama3-tiny-decode-f32"))
    text = xla_gpu_model.compile_priced(entry.text("before_optimizations"), "h100").optimized_text
    return hlo_tools.parse(text)


def test_agrees_with_xla_per_kernel(priced_decode):
    ours = {(k.computation, k.name): k for k in roofline.roofline(priced_decode, H100).kernels}
    pairs = []
    for instr, est in xla_gpu_model.priced(priced_decode):
        if any(i.opcode.value == "dot" for i in instr.fused_computation):
            continue  # GEMMs: our tensor-core peak, XLA's CUDA-core rate (bench/gpu_cost_vs_xla.py)
        k = ours[(instr.parent.name, instr.name)]
        assert k.launch_s == 1e-6
        pairs.append((k.time_s - k.launch_s, est.exec_s))
    assert len(pairs) >= 15
    ratios = [a / b for a, b in pairs]
    assert spearman([a for a, _ in pairs], [b for _, b in pairs]) >= 0.95
    assert 0.9 <= float(np.median(ratios)) <= 1.1
    assert sum(0.5 <= r <= 2 for r in ratios) >= 0.9 * len(ratios)
    assert all(math.isfinite(r) for r in ratios)
