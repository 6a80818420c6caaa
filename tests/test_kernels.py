"""hlo_analysis.kernels (a kernel as its own module, a region as one fusion) and
hlo_lab.measured.xla_fusion_log (XLA:GPU's priority-fusion dump and its replay)."""

from __future__ import annotations

import pytest

import corpus
from hlo_analysis import cost, kernels
from hlo_lab.measured import xla_fusion_log
from hlo_tools import parse
from hlo_tools.ir import Instruction
from hlo_tools.opcode import HloOpcode
from hlo_tools.shape import Shape
from xla_bridge import kernel_alone, jax_internals
from xla_bridge.hook_stage import HookStage
from xla_bridge.measure import AS_WRITTEN, Measurement
from xla_bridge.inputs import make_inputs
from xla_bridge.runner import compare_outputs, run

SOFTMAX_ROW = """HloModule softmax_row
%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}
ENTRY %main (x: f32[64,256]) -> f32[64] {
  %x = f32[64,256]{1,0} parameter(0)
  %e = f32[64,256]{1,0} exponential(%x)
  %z = f32[] constant(0)
  ROOT %r = f32[64]{0} reduce(%e, %z), dimensions={1}, to_apply=%add
}
"""


@pytest.fixture(scope="module")
def decode_cpu():
    """llama3-tiny-decode-f32 as XLA:CPU optimized it (the stored stage)."""
    return next(corpus.load("llama3-tiny-decode-f32")).module("cpu_after_optimizations")


def _pick(module, want: list[str]) -> list[Instruction]:
    """One kernel of each wanted kind: 'kLoop', 'kCustom' (a YNN dot fusion), 'copy'."""
    out = []
    for kind in want:
        for k in kernels.kernels_of(module):
            if (k.opcode is HloOpcode.FUSION and k.fusion_kind == kind) or k.opcode_text == kind:
                if k.called_computations and kind == "kLoop" and not any(
                        i.to_apply is not None for i in k.fused_computation):
                    continue  # prefer a loop fusion that calls a reducer: its copy is checked too
                out.append(k)
                break
    return out


def test_extract_kernel_copies_its_computations_and_shares_nothing(decode_cpu):
    k = _pick(decode_cpu, ["kLoop"])[0]
    m = kernels.extract_kernel(k)
    assert m.entry.root.name == k.name and m.entry.root.opcode is HloOpcode.FUSION
    assert len(m.entry.parameters) == len(set(map(id, k.operands)))
    originals = {id(c) for c in decode_cpu.computations}
    assert all(id(c) not in originals for c in m.computations)
    assert all(c.parent is m for c in m.computations)
    assert {c.name for c in m.computations} >= {c.name for c in k.fused_computation.make_embedded_computations_post_order()}
    jax_internals.xla_module_from_text(m.to_text())  # XLA's parser accepts it
    # the kernel's cost is the same alone as inside its module
    alone = cost.analyze(m).by_name()[k.name]
    inside = cost.analyze(decode_cpu).by_name()[k.name]
    assert (alone.flops, alone.bytes_accessed) == (inside.flops, inside.bytes_accessed)
    with pytest.raises(ValueError, match="not a kernel"):
        kernels.extract_kernel(decode_cpu.entry.parameters[0])


def _probe(module, kernel_name: str):
    """``module`` with ROOT = (the kernel's operands..., the kernel): one run gives
    the kernel's inputs and its value as computed inside the module."""
    probe = module.clone()
    probe.attributes = {}  # schedule, aliasing and entry layout no longer apply
    k = probe.entry.get_instruction(kernel_name)
    ops = list(dict.fromkeys(k.operands))
    # each probed value gets its own output buffer (a copy), as a tuple output would
    # otherwise alias a parameter or another output
    outs = [probe.entry.add_instruction(Instruction(f"probe.{v.name}", HloOpcode.COPY, v.shape, [v]))
            for v in ops + [k]]
    root = Instruction("probe", HloOpcode.TUPLE, Shape.tuple_of([o.shape for o in outs]), outs)
    probe.entry.add_instruction(root)
    probe.entry.root = root
    return probe, len(ops)


def _compile_exact(module):
    res = Measurement("cpu").compile(kernels.stand_in(module),
                                     AS_WRITTEN.hooked(kernel_alone.SwapIn(module), HookStage.PRE_SCHEDULER))
    assert res.hook.changed == 1
    return res


def test_extracted_kernels_run_alone_and_match_their_value_in_the_module(decode_cpu):
    picked = _pick(decode_cpu, ["kLoop", "kCustom", "copy"])
    assert len(picked) == 3
    for k in picked:
        probe, n = _probe(decode_cpu, k.name)
        values = run(_compile_exact(probe), make_inputs(probe)[0])
        operands, expected = values[:n], values[n]
        _, alone = kernel_alone.compile_alone(k)  # raises unless XLA runs exactly that kernel
        ran = kernels.kernels_of(alone.optimized_module)
        assert [r.opcode_text for r in ran] == [k.opcode_text], k.name
        got = run(alone, operands)
        assert got[0].shape == expected.shape
        assert compare_outputs([expected], got).verdict in ("exact", "close"), k.name


def test_fused_region_prices_the_fusion_before_it_exists():
    m = parse(SOFTMAX_ROW)
    e, r = m.entry.get_instruction("e"), m.entry.get_instruction("r")
    region = kernels.fused_region([e, r], root=r)
    f = region.entry.root
    assert f.opcode is HloOpcode.FUSION and f.fusion_kind == "kInput"
    c = cost.analyze(region).by_name()[f.name]
    assert c.bytes_accessed == 64 * 256 * 4 + 64 * 4 + 4  # x, the result, the scalar init: not the exp
    assert c.transcendentals == 64 * 256
    alone = cost.analyze(kernels.extract_kernel(e)).by_name()["e"]
    assert alone.bytes_accessed == 2 * 64 * 256 * 4
    # a producer with other users is duplicated, not turned into a second output
    assert kernels.fused_region([e, r]).entry.root.shape.is_array


MULTI_OUTPUT_REDUCE = """HloModule multi_output_reduce

%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}

%fused_square_sum (p0: f32[64,256]) -> (f32[64,256], f32[]) {
  %p0 = f32[64,256]{1,0} parameter(0)
  %m = f32[64,256]{1,0} multiply(%p0, %p0)
  %flat = f32[16384]{0} bitcast(%m)
  %z = f32[] constant(0)
  %r = f32[] reduce(%flat, %z), dimensions={0}, to_apply=%add
  ROOT %t = (f32[64,256]{1,0}, f32[]) tuple(%m, %r)
}

ENTRY %main (x: f32[64,256], s: f32[]) -> (f32[], f32[64,256]) {
  %x = f32[64,256]{1,0} parameter(0)
  %s = f32[] parameter(1)
  %bs = f32[64,256]{1,0} broadcast(%s), dimensions={}
  %d = f32[64,256]{1,0} divide(%x, %bs)
  %f = (f32[64,256]{1,0}, f32[]) fusion(%d), kind=kInput, calls=%fused_square_sum
  %g0 = f32[64,256]{1,0} get-tuple-element(%f), index=0
  %g1 = f32[] get-tuple-element(%f), index=1
  ROOT %out = (f32[], f32[64,256]{1,0}) tuple(%g1, %g0)
}
"""


def test_a_multi_output_fusion_read_through_its_tuple_is_priced_as_itself():
    """A cluster of a multi-output reduce fusion and its get-tuple-elements is the
    same kernel: merged into a region, its outputs are read through the tuple, so
    the reduce stays the hero (one block for a reduce to a scalar), not a loop of
    get-tuple-elements over 128 blocks (MaxText on top of stock: an Adam update's
    select joined a 1-block reduce priced 1.2 us instead of 24.1)."""
    from hlo_analysis import devices
    from hlo_analysis.fusion_kind import gpu_fusion_kind
    from hlo_analysis.gpu_kernel_model import kernel_cost
    from passes.fusion.gpu_profile import FasterOn

    m = parse(MULTI_OUTPUT_REDUCE)
    f, g0, g1 = (m.entry.get_instruction(n) for n in ("f", "g0", "g1"))
    region = kernels.fused_region([f, g0, g1], kind=gpu_fusion_kind)
    fusion = region.entry.root
    assert fusion.fusion_kind == "kInput"
    assert not [i for i in fusion.fused_computation if i.opcode is HloOpcode.GET_TUPLE_ELEMENT]
    h100 = devices.load("h100")
    assert kernel_cost(fusion, h100).launch == kernel_cost(f, h100).launch
    assert kernel_cost(fusion, h100).launch.blocks == 1
    priced = FasterOn("h100")
    assert priced.time_s([f, g0, g1]) == pytest.approx(priced.time_s([f]), rel=1e-9)


@pytest.mark.parametrize("name", ["llama3-tiny-train-f32", "mixtral-tiny-train-f32"])
def test_every_multi_output_kernel_of_stock_is_priced_as_itself_with_its_outputs(name):
    """Each multi-output kernel XLA:GPU made, with its get-tuple-elements as one
    cluster, is priced as the kernel alone: its own label (XLA's kLoop transpose,
    a Triton fusion), and with two reductions inside, the first of its tuple as
    the hero, not whichever get-tuple-element comes first in the computation."""
    from passes.fusion.gpu_profile import FasterOn

    m = next(corpus.load(name)).module("gpu_h100_after_optimizations")
    priced = FasterOn("h100")
    checked = 0
    for k in kernels.kernels_of(m):
        outputs = list(k.users)
        if not k.shape.is_tuple or not outputs or any(u.opcode is not HloOpcode.GET_TUPLE_ELEMENT for u in outputs):
            continue
        checked += 1
        assert priced.time_s([k, *outputs]) == pytest.approx(priced.time_s([k]), rel=1e-9), k.name
    assert checked >= 25


def test_stand_in_keeps_the_signature():
    m = parse(SOFTMAX_ROW)
    s = kernels.stand_in(m)
    assert [p.shape for p in s.entry.parameters] == [p.shape for p in m.entry.parameters]
    assert s.entry.root.shape == m.entry.root.shape


DUMP = r'''
fusion_steps {
  producer_ineligible {
    producer_name: "slice.6.0"
    reason: "not fusing because there are only bitcast users"
  }
}
fusion_steps {
  update_priority {
    producer_name: "e.0"
    consumer_names: "r.0"
    us_fused: 1.5
    us_unfused: 2.75
  }
}
fusion_steps {
  fusion {
    fusion_name: "fusion"
    producer_name: "e.0"
    consumer_name: "r.0"
  }
}
gpu_device_info {
  threads_per_warp: 32
}
hlo_module_before_fusion: "HloModule m\n\nENTRY %main (x: f32[8]) -> f32[8] {\n  %x.0 = f32[8]{0} parameter(0)\n  %e.0 = f32[8]{0} exponential(%x.0)\n  ROOT %r.0 = f32[8]{0} negate(%e.0)\n}\n"
'''


def test_dump_parses_into_steps_and_replays():
    log = xla_fusion_log.parse_dump(DUMP, module_name="m")
    assert [type(s).__name__ for s in log.steps] == ["ProducerIneligible", "PriorityUpdate", "XlaFusionStep"]
    assert log.fused_pairs() == [("e.0", "r.0")]
    assert log.steps[1].us_unfused == 2.75 and log.ineligible()[0].reason.startswith("not fusing")
    assert log.before_fusion().entry.root.name == "r.0"
    ag = xla_fusion_log.agreement(log, "h100")
    (d,) = ag.decisions
    assert d.kind == "fused" and d.xla_fused and d.ours_fuse and ag.rate == 1.0
    assert d.ours_unfused_s > d.ours_fused_s  # two launches and a round trip vs one kernel
    assert len(ag.updates) == 1 and ag.update_rate == 1.0
    assert xla_fusion_log.base_name("integer_pow.22.3.clone.1") == "integer_pow.22"


def _no_deviceless_gpu() -> str | None:
    if not jax_internals.cuda_plugin_available():
        return ("jax's CUDA plugin is not installed, so there is no deviceless XLA:GPU compile and no "
                "priority-fusion log (pip install --no-deps jax-cuda12-plugin jax-cuda12-pjrt at jaxlib's version)")
    return None


@pytest.mark.skipif(_no_deviceless_gpu() is not None, reason=_no_deviceless_gpu() or "")
def test_every_kernel_of_an_h100_module_compiles_alone_without_a_gpu():
    """The GPU kernel bench's route (post-scheduler hook, scheduled module), deviceless."""
    entry = next(corpus.load("llama3-tiny-decode-f32"))
    m = Measurement("gpu", target="h100").compile(entry.text("before_optimizations")).optimized_module
    ks = kernels.kernels_of(m)
    assert len(ks) > 20
    for k in ks:
        _, res = kernel_alone.compile_alone(k, "gpu", target="h100")
        assert [r.name for r in kernels.kernels_of(res.optimized_module)] == [k.name]


@pytest.mark.skipif(_no_deviceless_gpu() is not None, reason=_no_deviceless_gpu() or "")
def test_priority_fusion_log_pairs_are_fused_in_xlas_module():
    entry = next(corpus.load("llama3-tiny-decode-f32"))
    log = xla_fusion_log.capture(entry.text("before_optimizations"), "h100")
    pairs = log.fused_pairs()
    assert pairs and log.before_fusion().entry is not None
    where = xla_fusion_log.fused_in_optimized(log)
    # pairs of instructions that existed before the pass (not fusions it made): both
    # ends must sit in one fusion of XLA's optimized module
    checked = [(p, c) for p, c in pairs
               if not p.startswith(("fusion", "bitcast")) and not c.startswith("fusion")]
    assert len(checked) >= 20
    same = [(p, c) for p, c in checked
            if where.get(xla_fusion_log.base_name(p), set()) & where.get(xla_fusion_log.base_name(c), set())]
    assert len(same) >= 0.9 * len(checked), set(checked) - set(same)
    ag = xla_fusion_log.agreement(log, "h100")
    assert ag.decisions and 0.0 <= ag.rate <= 1.0 and ag.skipped == 0
