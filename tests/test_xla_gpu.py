"""XLA:GPU: deviceless compiles for named targets (needs jax's CUDA plugin, no
GPU), and running on a real GPU (skips without one)."""

from __future__ import annotations

import pytest


from hlo_tools import parse
from hlo_tools.opcode import HloOpcode
from xla_bridge.jax_internals import XlaCompileError, backend_available, cuda_plugin_available, hook_supported
from xla_bridge.compiler import compile
from xla_bridge.runner import compare, run
from xla_bridge.examples import FUSION_KLOOP, UNFUSED
from xla_bridge.targets import UnknownTargetError, device_description, target_config

needs_plugin = pytest.mark.skipif(not cuda_plugin_available(),
                                  reason="jax's CUDA plugin is not installed (pip install --no-deps jax-cuda12-plugin "
                                         "jax-cuda12-pjrt at jaxlib's version)")

MATMUL = """HloModule matmul_softmax
%max (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %m = f32[] maximum(%a, %b)
}
ENTRY %main (x: bf16[128,256], w: bf16[256,128]) -> f32[128] {
  %x = bf16[128,256]{1,0} parameter(0)
  %w = bf16[256,128]{1,0} parameter(1)
  %d = bf16[128,128]{1,0} dot(%x, %w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  %f = f32[128,128]{1,0} convert(%d)
  %c = f32[] constant(-inf)
  %r = f32[128]{0} reduce(%f, %c), dimensions={1}, to_apply=%max
  ROOT %e = f32[128]{0} exponential(%r)
}
"""


def fused_bodies(res):
    return {i.name: [x.opcode.value for x in i.fused_computation if x.opcode is not HloOpcode.PARAMETER]
            for c in res.optimized_module.computations for i in c if i.opcode is HloOpcode.FUSION}


@needs_plugin
def test_target_configs_by_name():
    text = target_config("h100")
    assert device_description(text) == "NVIDIA H100 80GB HBM3"
    with pytest.raises(UnknownTargetError, match="unknown GPU target 'h1000'"):
        target_config("h1000")


@needs_plugin
def test_deviceless_h100_stock_shows_xla_gpu_fusions():
    res = compile(MATMUL, target="h100")
    assert res.backend == "gpu" and res.device == "NVIDIA H100 80GB HBM3" and not res.runnable
    kinds = {k for _, k in res.fusions()}
    assert "kCustom" in kinds or "kInput" in kinds  # Triton GEMM / reduction fusions
    assert res.memory  # compiled memory stats exist without a device
    with pytest.raises(XlaCompileError, match="without a device"):
        run(res, [])


@needs_plugin
@pytest.mark.skipif(not hook_supported(), reason="as-written on GPU hands XLA the module through jax.extend.xla's hook")
def test_deviceless_h100_as_written_keeps_a_hand_written_fusion():
    written = fused_bodies(compile(parse(FUSION_KLOOP), target="h100", pipeline="as-written"))
    assert ["add", "multiply"] in written.values()
    stock = fused_bodies(compile(parse(FUSION_KLOOP), target="h100", pipeline="stock"))
    assert ["add", "multiply"] not in stock.values()
    assert any("exponential" in b and "add" in b for b in stock.values())  # priority fusion merged it all


@pytest.mark.skipif(not backend_available("gpu"), reason="no GPU visible to jax")
def test_on_a_real_gpu_as_written_and_stock_agree():
    cmp = compare(parse(UNFUSED), parse(FUSION_KLOOP), backend="gpu", pipeline_b="as-written")
    assert cmp.ok, str(cmp)
