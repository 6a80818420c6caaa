"""Small hand-written HLO modules for the XLA bridge's tests, benches and docs,
and one jax model lowered and compiled on the spot (``jax_texts``)."""

from __future__ import annotations

import functools
import os

FUSION_KLOOP = '''\
HloModule fusion_kloop, entry_computation_layout={(f32[32,64]{1,0}, f32[32,64]{1,0})->f32[32,64]{1,0}}

%fused_add_mul (p0: f32[32,64], p1: f32[32,64]) -> f32[32,64] {
  %p0 = f32[32,64]{1,0} parameter(0)
  %p1 = f32[32,64]{1,0} parameter(1)
  %add = f32[32,64]{1,0} add(%p0, %p1)
  ROOT %mul = f32[32,64]{1,0} multiply(%add, %p1)
}

ENTRY %main (x: f32[32,64], y: f32[32,64]) -> f32[32,64] {
  %x = f32[32,64]{1,0} parameter(0)
  %y = f32[32,64]{1,0} parameter(1)
  %my_fusion = f32[32,64]{1,0} fusion(%x, %y), kind=kLoop, calls=%fused_add_mul
  %sub = f32[32,64]{1,0} subtract(%my_fusion, %x)
  ROOT %exp = f32[32,64]{1,0} exponential(%sub)
}
'''

INDICES = '''\
HloModule indices, entry_computation_layout={(bf16[16,8]{1,0}, s32[], s64[], s32[3,1]{1,0})->(bf16[4,8]{1,0}, bf16[3,2,8]{2,1,0}, bf16[16,8]{1,0})}

ENTRY %main (p: bf16[16,8], i: s32[], j: s64[], idx: s32[3,1]) -> (bf16[4,8], bf16[3,2,8], bf16[16,8]) {
  %p = bf16[16,8]{1,0} parameter(0)
  %i = s32[] parameter(1)
  %j = s64[] parameter(2)
  %idx = s32[3,1]{1,0} parameter(3)
  %c = s32[] convert(%j)
  %z = s32[] constant(0)
  %s = bf16[4,8]{1,0} dynamic-slice(%p, %i, %z), dynamic_slice_sizes={4,8}
  %g = bf16[3,2,8]{2,1,0} gather(%p, %idx), offset_dims={1,2}, collapsed_slice_dims={}, start_index_map={0}, index_vector_dim=1, slice_sizes={2,8}
  %u = bf16[16,8]{1,0} dynamic-update-slice(%p, %s, %c, %z)
  ROOT %r = (bf16[4,8]{1,0}, bf16[3,2,8]{2,1,0}, bf16[16,8]{1,0}) tuple(%s, %g, %u)
}
'''

TWO_BRANCHES = '''\
HloModule two_branches, entry_computation_layout={(f32[16,16]{1,0}, f32[16,16]{1,0})->(f32[16,16]{1,0}, f32[16,16]{1,0})}

ENTRY %main (x: f32[16,16], y: f32[16,16]) -> (f32[16,16], f32[16,16]) {
  %x = f32[16,16]{1,0} parameter(0)
  %y = f32[16,16]{1,0} parameter(1)
  %e = f32[16,16]{1,0} exponential(%x)
  %t = f32[16,16]{1,0} tanh(%y)
  ROOT %r = (f32[16,16]{1,0}, f32[16,16]{1,0}) tuple(%e, %t)
}
'''

UNFUSED = '''\
HloModule unfused, entry_computation_layout={(f32[32,64]{1,0}, f32[32,64]{1,0})->f32[32,64]{1,0}}

ENTRY %main (x: f32[32,64], y: f32[32,64]) -> f32[32,64] {
  %x = f32[32,64]{1,0} parameter(0)
  %y = f32[32,64]{1,0} parameter(1)
  %add = f32[32,64]{1,0} add(%x, %y)
  %mul = f32[32,64]{1,0} multiply(%add, %y)
  %sub = f32[32,64]{1,0} subtract(%mul, %x)
  ROOT %exp = f32[32,64]{1,0} exponential(%sub)
}
'''


@functools.lru_cache(maxsize=None)
def jax_texts(layers: int = 1, width: int = 16) -> tuple[str, str]:
    """(before, after) HLO text of a small jitted MLP: jax's lowering, and
    XLA:CPU's optimized (fused) module."""
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    import jax
    import jax.numpy as jnp

    def mlp(x, ws):
        for w in ws:
            x = jnp.tanh(x @ w + 1.0) * 2.0
        return x.sum(axis=-1)

    x = jnp.ones((8, width), jnp.float32)
    ws = [jnp.ones((width, width), jnp.float32) for _ in range(layers)]
    lowered = jax.jit(mlp).lower(x, ws)
    return lowered.compiler_ir("hlo").as_hlo_text(), lowered.compile().as_text()
