"""cache-update-in-place: a stacked KV cache rebuilt from its updated windows
becomes in-place dynamic-update-slices of the cache, outputs equal on XLA:CPU;
and what it gives XLA:GPU on a full-size decode step, by both models."""

from __future__ import annotations

import numpy as np
import pytest

import corpus
import hlo_tools
from hlo_tools import HloOpcode, verify
from passes.base import split_on_input
from passes.cache_update import CacheUpdateInPlace
from passes.registry import parse_pipeline
from xla_bridge.jax_internals import cuda_plugin_available
from xla_bridge.runner import compare

DECODES = ["llama3-tiny-decode-f32", "gemma2-tiny-decode-f32", "mixtral-tiny-decode-f32"]


def _text(name: str) -> str:
    return next(e for e in corpus.load() if e.name == name).text("before_optimizations")


def _cache(module):
    """The stacked cache parameter and what the entry's root returns for it."""
    param = next(p for p in module.entry.parameters if p.name.startswith("cache"))
    out = next(o for o in module.entry.root.operands if o.shape.dims == param.shape.dims)
    return param, out


@pytest.mark.parametrize("name", DECODES)
def test_decode_cache_is_updated_in_place(name):
    text = _text(name)
    module = hlo_tools.parse(text)
    param, out = _cache(module)
    assert out.opcode is HloOpcode.CONCATENATE  # the model's code stacks the layers back
    assert CacheUpdateInPlace().run(module)
    verify(module)
    _, out = _cache(module)
    chain = []
    while out is not param:  # a chain of dynamic-update-slices of the cache parameter itself
        assert out.opcode is HloOpcode.DYNAMIC_UPDATE_SLICE, out.opcode
        chain.append(out)
        out = out.operand(0)
    layers = param.shape.dims[1]
    assert len(chain) == 2 * layers  # a K and a V update per layer
    assert all(c.operand(1).shape.num_elements < param.shape.num_elements // layers for c in chain)
    assert compare(text, module.to_text(), contained=True).verdict in ("exact", "close")
    assert not CacheUpdateInPlace().run(module)  # nothing left to rewrite


def test_only_an_updated_array_rebuilt_in_order_is_rewritten():
    """Of three rebuilds of ``p``: without an update (left alone), out of order
    (not a rebuild), and with an update (written into ``p``, its index clamped to
    the window as the window's own update clamps it)."""
    text = """HloModule m

ENTRY e {
  p = f32[4,6]{1,0} parameter(0)
  u = f32[4,1]{1,0} parameter(1)
  i = s32[] parameter(2)
  z = s32[] constant(0)
  a = f32[4,2]{1,0} slice(p), slice={[0:4], [0:2]}
  b = f32[4,4]{1,0} slice(p), slice={[0:4], [2:6]}
  same = f32[4,6]{1,0} concatenate(a, b), dimensions={1}
  swapped = f32[4,6]{1,0} concatenate(b, a), dimensions={1}
  a2 = f32[4,2]{1,0} dynamic-update-slice(a, u, z, i)
  c = f32[4,6]{1,0} concatenate(a2, b), dimensions={1}
  ROOT t = (f32[4,6]{1,0}, f32[4,6]{1,0}, f32[4,6]{1,0}) tuple(same, swapped, c)
}
"""
    module = hlo_tools.parse(text)
    assert CacheUpdateInPlace().run(module)
    root = module.entry.root
    assert [o.opcode for o in root.operands] == [HloOpcode.CONCATENATE, HloOpcode.CONCATENATE,
                                                 HloOpcode.DYNAMIC_UPDATE_SLICE]
    dus = root.operand(2)
    assert dus.operand(0).name == "p" and dus.operand(1).shape.dims == (4, 1)
    # an index past the window is clamped to the window (to 1, as a's own update does), not to p's 5
    for i in (0, 1, 5, -3):
        assert compare(text, module.to_text(), inputs=_inputs(i)).verdict == "exact", i


def _inputs(i: int):
    rng = np.random.default_rng(0)
    return [rng.standard_normal((4, 6), dtype=np.float32), rng.standard_normal((4, 1), dtype=np.float32),
            np.array(i, dtype=np.int32)]


def test_gpu_best_runs_it_on_the_module_as_given():
    first, hooked = split_on_input(parse_pipeline("gpu-best"))
    assert [p.name for p in first] == ["cache-update-in-place"]
    assert "cache-update-in-place" not in [p.name for p in hooked]


@pytest.mark.skipif(not cuda_plugin_available(), reason="XLA:GPU without a GPU needs the CUDA plugin (make venv)")
def test_full_size_decode_on_h100_by_both_models():
    """Llama-3 8B decode (8 sequences of 2048): stock XLA:GPU rewrites the whole
    4.3 GB stack every step; in place, both models predict it at least 1.8x faster."""
    from hlo_lab.study import gpu_study

    name = "llama3-full-decode-bf16"
    row = gpu_study(name, _text(name), "cache-update-in-place", "h100", mode="on-top")
    assert row.predicted_speedup > 1.8 and row.xla_where_priced_speedup > 1.8
    assert row.ours.xla_priced >= row.stock.xla_priced  # XLA's model priced as many kernels as on stock's side
