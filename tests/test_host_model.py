"""The host roofline's measured parts: per-thunk times from XLA's trace
(xla_bridge.trace), the cache bandwidth curve and the per-opcode costs
(hlo_lab.measured: host_bench, op_profile), all on the real XLA:CPU.

These check what the figures are made of; how they compare (a thunk against a
whole execute, a library call against a launch, exp against add) is a
measurement: ``bench/host_model.py`` prints those ratios."""

from __future__ import annotations

import json
import math

import pytest

import corpus
import hlo_tools
from hlo_analysis import cost, devices, kernels, op_profile, roofline
from hlo_lab.measured import op_profile as profiling
from hlo_lab.measured.host_bench import compiled_kernel
from passes.fusion import producer_consumer
from xla_bridge.compiler import compile as xla_compile
from xla_bridge.inputs import make_inputs
from xla_bridge.trace import _is_host_transfer, spans, thunk_times

from passes_util import SOFTMAX_CHAIN


# -- xla_trace ---------------------------------------------------------------------
def test_spans_pair_each_event_with_its_end_event():
    events = [
        ("fusion.1", 100.0, 103.0), ("end: fusion.1", 110.0, 111.0),   # finished on the pool: 10 ns
        ("copy.2", 120.0, 125.0),                                         # no end event: its own 5 ns
        ("fusion.1", 200.0, 204.0), ("end: fusion.1", 203.0, 203.5),     # end inside its own event: 4 ns
        ("ThunkExecutor::Execute", 90.0, 300.0), ("$python frame", 0.0, 1.0),
    ]
    got = spans(events)
    assert got == {"fusion.1": [10.0, 4.0], "copy.2": [5.0]}
    assert spans(events, {"copy.2"}) == {"copy.2": [5.0]}


@pytest.fixture(scope="module")
def decode_compiled():
    e = next(corpus.load("llama3-tiny-decode-f32"))
    return xla_compile(e.text("before_optimizations"), "cpu", "stock")


def test_thunk_times_cover_every_kernel_of_a_corpus_module(decode_compiled):
    res = decode_compiled
    ks = kernels.kernels_of(res.optimized_module)
    sets = make_inputs(res.optimized_module, sets=2)
    reps = 6
    times = thunk_times(res, sets, [k.name for k in ks], reps=reps)
    assert set(times) == {k.name for k in ks}
    assert all(len(t.samples_us) == reps and min(t.samples_us) > 0 for t in times.values())
    # How each span pairs with its end event: test_spans_pair_each_event_with_its_end_event;
    # a thunk's time against a whole execute's: bench/host_model.py.


# -- host_bench / op_profile ---------------------------------------------------------
@pytest.mark.parametrize("op", sorted(profiling._CHAINS))
def test_each_profiled_chain_reaches_codegen_whole(op):
    """XLA's simplifier must not fold a profiled chain: its one kernel keeps every step."""
    _, kernel = compiled_kernel(profiling._chain_module(op))
    assert sum(1 for i in kernel.fused_computation if i.opcode_text == op) == profiling.STEPS


def test_compute_seconds_sums_the_profile_over_a_fusion_body():
    m = hlo_tools.parse(SOFTMAX_CHAIN)
    producer_consumer.ProducerConsumerFusion().run(m)
    fusions = [i for i in m.entry if i.opcode_text == "fusion"]
    assert fusions
    profile = {"exponential": 3e-9, "subtract": 1e-10, "multiply": 2e-11, "reduce": 7e-11}
    per_element = {**profile, "negate": 1 / 1e9}  # negate is not profiled: one flop at the vector rate
    for f in fusions:
        want = 0.0
        for i in f.fused_computation:
            if i.opcode_text == "reduce":
                want += (i.operands[0].shape.num_elements - i.shape.num_elements) * profile["reduce"]
            elif i.opcode_text in per_element:
                want += i.shape.num_elements * per_element[i.opcode_text]
        assert want > 0
        assert op_profile.compute_seconds(f, profile, 1e9, 1e8) == pytest.approx(want)
    dot = hlo_tools.parse(
        "HloModule d\n\nENTRY %e {\n  %a = f32[8,8]{1,0} parameter(0)\n"
        "  ROOT %d = f32[8,8]{1,0} dot(%a, %a), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n}\n")
    assert op_profile.compute_seconds(dot.entry.root, profile, 1e9, 1e8) is None  # matmuls keep the GEMM rate


def test_compute_seconds_charges_unprofiled_ops_their_xla_flops():
    """A scatter is neither elementwise nor a reduce: its combiner's flops, as XLA
    counts them, run at the vector rate rather than for free."""
    m = hlo_tools.parse(
        "HloModule s\n\n%add {\n  %x = f32[] parameter(0)\n  %y = f32[] parameter(1)\n"
        "  ROOT %s = f32[] add(%x, %y)\n}\n\nENTRY %e {\n  %o = f32[64,8]{1,0} parameter(0)\n"
        "  %i = s32[16,1]{1,0} parameter(1)\n  %u = f32[16,8]{1,0} parameter(2)\n"
        "  ROOT %r = f32[64,8]{1,0} scatter(%o, %i, %u), update_window_dims={1}, inserted_window_dims={0},"
        " scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=%add\n}\n")
    flops = cost.CostAnalysis(m).instruction(m.entry.root).flops
    assert flops == 16 * 8
    assert op_profile.compute_seconds(m.entry.root, {}, 1e9, 1e8) == pytest.approx(flops / 1e9)


def test_host_transfers_are_not_device_work():
    assert _is_host_transfer("MemcpyH2D") and _is_host_transfer("MemcpyDtoH") and _is_host_transfer("Memcpy HtoD")
    assert not any(map(_is_host_transfer, ("MemcpyD2D", "Memset", "loop_add_fusion", "gemm_fusion_dot")))


# -- devices: bandwidth curve, cache ------------------------------------------------
def test_bandwidth_curve_interpolates_in_log_bytes_and_holds_at_the_ends():
    d = devices.Device(name="t", kind="cpu", peak_flops={"f32": 1e11}, vector_flops=1e10, transcendentals_per_s=1e9,
                       memory_bandwidth=2e10, launch_overhead_s=1e-6,
                       bandwidth_curve=[[4096, 3e10], [1024, 1e10], [16384, 9e10]])
    assert d.bandwidth_curve == ((1024.0, 1e10), (4096.0, 3e10), (16384.0, 9e10))  # sorted, tuples
    assert d.bandwidth_at(10) == 1e10 and d.bandwidth_at(1e9) == 9e10
    assert d.bandwidth_at(2048) == pytest.approx(2e10)  # halfway in log(bytes)
    assert devices.load("h100").bandwidth_at(1024) == 3.35e12  # no curve: flat
    again = devices.Device.from_dict(json.loads(d.to_json()))
    assert again == d


def _measured(x: float) -> bool:
    return math.isfinite(x) and x > 0


def test_host_spec_is_measured_through_xla():
    h = devices.host()
    assert h.extra["spec_version"] == devices.HOST_SPEC_VERSION
    assert len(h.bandwidth_curve) >= 10 and all(_measured(r) for _, r in h.bandwidth_curve)
    assert _measured(h.launch_overhead_s) and _measured(h.library_call_overhead_s)
    assert {"add", "exponential", "divide", "reduce"} <= set(h.op_seconds)
    assert all(_measured(s) for s in h.op_seconds.values())
    assert len(set(h.op_seconds.values())) > 1  # one figure per opcode, not one rate for all


def test_stale_host_caches_are_measured_again(tmp_path, monkeypatch):
    """A cached spec from an older ``measure_host`` is measured again and replaced
    (here in a private cache folder, by a stand-in for the measurement)."""
    monkeypatch.setattr(devices, "CACHE_DIR", tmp_path)
    fresh = devices.Device(name="host", kind="cpu", peak_flops={"f32": 1e11}, vector_flops=1e10,
                           transcendentals_per_s=1e9, memory_bandwidth=2e10, launch_overhead_s=5e-7,
                           extra={"spec_version": devices.HOST_SPEC_VERSION})
    measured: list[devices.Device] = []
    monkeypatch.setattr(devices, "_HOST_MEASURER", lambda: measured.append(fresh) or fresh)
    stale = json.loads(fresh.to_json())
    stale["extra"] = {"spec_version": devices.HOST_SPEC_VERSION - 1}
    stale["launch_overhead_s"] = 123.0
    devices.host_cache_path().write_text(json.dumps(stale))
    assert devices.host() == fresh and len(measured) == 1
    assert devices.Device.from_dict(json.loads(devices.host_cache_path().read_text())) == fresh
    assert devices.host() == fresh and len(measured) == 1  # the replaced cache is current: read, not measured


def test_host_roofline_uses_the_curve_and_the_profile(decode_compiled):
    h = devices.host()
    m = decode_compiled.optimized_module
    by_name = cost.analyze(m).by_name()
    loops = [k for k in kernels.kernels_of(m) if k.opcode_text == "fusion" and k.fusion_kind == "kLoop"]
    assert loops
    for k in loops:
        est = roofline.estimate(k, by_name[k.name], h)
        assert est.memory_s == pytest.approx(est.bytes_accessed / h.bandwidth_at(est.bytes_accessed))
        assert est.compute_s == pytest.approx(op_profile.compute_seconds(k, h.op_seconds, h.vector_flops,
                                                                          h.transcendentals_per_s))


def test_matmuls_launch_as_library_calls_except_matrix_vector_products():
    d = devices.Device(name="t", kind="cpu", peak_flops={"f32": 1e11}, vector_flops=1e10, transcendentals_per_s=1e9,
                       memory_bandwidth=2e10, launch_overhead_s=4e-7, library_call_overhead_s=3e-6)
    m = hlo_tools.parse(
        "HloModule d\n\nENTRY %e {\n  %a = f32[4,64]{1,0} parameter(0)\n  %v = f32[1,64]{1,0} parameter(1)\n"
        "  %w = f32[64,64]{1,0} parameter(2)\n"
        "  %mm = f32[4,64]{1,0} dot(%a, %w), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
        "  %mv = f32[1,64]{1,0} dot(%v, %w), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
        "  ROOT %t = (f32[4,64]{1,0}, f32[1,64]{1,0}) tuple(%mm, %mv)\n}\n")
    r = {k.name: k for k in roofline.roofline(m, d).kernels}
    assert r["mm"].launch_s == 3e-6  # a library (YNNPACK / dot thunk) call
    assert r["mv"].launch_s == 4e-7  # XLA:CPU emits a GEMV loop for it
    assert {k.launch_s for k in roofline.roofline(m, devices.load("h100")).kernels} == {1e-6}  # GPUs: no such split


def test_the_host_is_measured_by_the_application_not_by_analysis(tmp_path, monkeypatch):
    """``hlo_analysis.devices`` never compiles: with no cached spec and no measurer
    registered it says who measures; ``hlo_lab`` registers the XLA:CPU one on import."""
    import hlo_lab  # noqa: F401 - registers the measurer
    from hlo_lab.measured.host import measure_host

    assert devices._HOST_MEASURER is not None and devices._HOST_MEASURER.__module__ == "hlo_lab"
    monkeypatch.setattr(devices, "CACHE_DIR", tmp_path)
    monkeypatch.setattr(devices, "_HOST_MEASURER", None)
    with pytest.raises(LookupError, match="no host spec at .* import hlo_lab"):
        devices.host()
    assert measure_host.__module__ == "hlo_lab.measured.host"
