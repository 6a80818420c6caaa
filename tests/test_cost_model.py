"""The one cost model (hlo_analysis.cost) as its callers use it: the kernel rule,
the fusion-traffic model of the fusion passes, the scheduler's coarse work, the
roofline time, and the one fusion-kind rule."""

from __future__ import annotations

import dataclasses

import pytest

from hlo_analysis import cost, devices, opportunities, roofline
from hlo_analysis.cost import KernelTime, bytes_saved, element_flops, is_kernel, reread_bytes, unfused_bytes
from hlo_analysis.fusion_kind import fusion_kind, loop_kind
from hlo_analysis.overlap import CostModel
from hlo_tools import parse
from hlo_tools.opcode import NO_KERNEL

MODULE = """HloModule m

%fused_bcast (p: f32[]) -> f32[256] {
  %p = f32[] parameter(0)
  ROOT %b = f32[256]{0} broadcast(%p), dimensions={}
}

%fused_exp (q: f32[256]) -> f32[256] {
  %q = f32[256]{0} parameter(0)
  ROOT %e = f32[256]{0} exponential(%q)
}

%add (x: f32[], y: f32[]) -> f32[] {
  %x = f32[] parameter(0)
  %y = f32[] parameter(1)
  ROOT %s = f32[] add(%x, %y)
}

ENTRY %main (a: f32[256], w: f32[256,64], s: f32[]) -> (f32[], f32[64], f32[256]) {
  %a = f32[256]{0} parameter(0)
  %w = f32[256,64]{1,0} parameter(1)
  %s = f32[] parameter(2)
  %c = f32[] constant(0)
  %wrapped = f32[256]{0} fusion(%s), kind=kLoop, calls=%fused_bcast
  %bcast = f32[256]{0} broadcast(%s), dimensions={}
  %exp = f32[256]{0} exponential(%a)
  %m1 = f32[256]{0} multiply(%exp, %wrapped)
  %m2 = f32[256]{0} multiply(%exp, %bcast)
  %f = f32[256]{0} fusion(%m2), kind=kLoop, calls=%fused_exp
  %bc = f32[1,256]{1,0} bitcast(%m1)
  %dot = f32[1,64]{1,0} dot(%bc, %w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  %row = f32[64]{0} bitcast(%dot)
  %r = f32[] reduce(%f, %c), dimensions={0}, to_apply=%add
  %barrier = (f32[], f32[64]) opt-barrier((f32[], f32[64]) tuple(%r, %row))
  %r2 = f32[] get-tuple-element(%barrier), index=0
  %row2 = f32[64]{0} get-tuple-element(%barrier), index=1
  ROOT %out = (f32[], f32[64], f32[256]) tuple(%r2, %row2, %f)
}
"""


@pytest.fixture
def module():
    return parse(MODULE)


def _get(module, name):
    return module.entry.get_instruction(name)


def test_one_rule_says_which_instructions_run_a_kernel(module):
    ran = {i.name for i in module.entry if is_kernel(i)}
    assert ran == {"wrapped", "bcast", "exp", "m1", "m2", "f", "dot", "r"}
    assert all(i.opcode in NO_KERNEL for i in module.entry if i.name not in ran)
    assert roofline.kernel_instructions is cost.kernel_instructions  # the roofline counts kernels by the same rule
    assert {k.name for k in roofline.roofline(module, devices.load("h100")).kernels} == ran


def test_xla_bytes_for_ops_that_run_no_kernel(module):
    by_name = cost.analyze(module).by_name()
    assert by_name["a"].bytes_accessed == by_name["bc"].bytes_accessed == by_name["r2"].bytes_accessed == 0
    # HloCostAnalysis still charges a tuple its index table and an opt-barrier its data
    assert by_name["out"].bytes_accessed == 3 * cost.POINTER_SIZE
    assert by_name["barrier"].bytes_accessed > 0


def test_bytes_saved_by_a_fusion_and_the_rereads_of_a_duplicate(module):
    exp, m1, m2 = _get(module, "exp"), _get(module, "m1"), _get(module, "m2")
    assert bytes_saved(exp, [m1, m2], duplicate=False) == 1024 * 3  # one write, two reads
    assert bytes_saved(exp, [m1], duplicate=True) == 1024 - 1024  # one read saved, its operand read again
    bcast, wrapped = _get(module, "bcast"), _get(module, "wrapped")
    assert bytes_saved(bcast, [m2], duplicate=True) == 1024  # a broadcast's input stays in cache
    # priority fusion also sees through XLA:CPU's one-op fusion around a broadcast
    assert reread_bytes(wrapped) == 4 and reread_bytes(wrapped, wrapped_broadcast=True) == 0


def test_the_schedulers_coarse_work_and_rates(module):
    dot, f = _get(module, "dot"), _get(module, "f")
    assert element_flops(dot) == 2 * 64 * 256
    assert element_flops(f) == 256 + 256  # the fused body, its parameter included
    model = CostModel()
    spec = devices.SCHEDULING_H100
    assert (model.flops_per_s, model.bytes_per_s, model.link_bytes_per_s, model.async_latency_s) == (
        spec.vector_flops, spec.memory_bandwidth, spec.collective_bandwidth, spec.collective_overhead_s)
    assert model.compute_seconds(dot) == max(element_flops(dot) / spec.vector_flops,
                                             unfused_bytes(dot) / spec.memory_bandwidth)
    assert model.compute_seconds(_get(module, "bc")) == 0.0  # a bitcast runs nothing


def test_kernel_time_is_the_roofline():
    assert KernelTime(2.0, 1.0, 0.5).time_s == 2.5
    assert KernelTime(2.0, 1.0, 0.5).bound == "compute"
    assert KernelTime(1.0, 2.0, 0.5).bound == "memory"
    assert KernelTime(1.0, 2.0, 3.0).bound == "launch"


def test_opportunities_price_with_the_vector_roofline(module):
    # opportunities price a would-be kernel with the vector roofline (no kernel
    # structure yet); a device without XLA:GPU's launch figures gets the same
    # (with them, the roofline prices kernels by gpu_kernel_model: see test_gpu_kernel_model)
    h100 = dataclasses.replace(devices.load("h100"), sms=0)
    est = {k.name: k for k in roofline.roofline(module, h100).kernels}
    exp = est["exp"]  # no matmul, no op profile on a GPU: the vector roofline
    assert exp.time_s == KernelTime(exp.compute_s, exp.memory_s, h100.launch_overhead_s).time_s
    assert opportunities._time(exp.flops, exp.transcendentals, exp.bytes_accessed, h100) == exp.time_s


def test_one_fusion_kind_rule(module):
    entry = module.entry
    reduce_region = [_get(module, n) for n in ("f", "r")]
    dot_region = [_get(module, n) for n in ("m1", "bc", "dot")]
    assert fusion_kind(reduce_region, [entry.get_instruction("r")]) == "kInput"
    assert fusion_kind(dot_region, [entry.get_instruction("dot")]) == "kOutput"
    assert fusion_kind(dot_region, [entry.get_instruction("dot")], output_fusion=False) == "kLoop"
    assert loop_kind(reduce_region, [entry.get_instruction("r")]) == "kLoop"
