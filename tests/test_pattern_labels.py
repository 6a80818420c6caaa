"""Pattern labels come from structure, on real modules held apart: a label is
found where the model has the pattern and not where it does not (LayerNorm in
the jax model of tests/dump_model.py, RMSNorm in Llama-3; MoE routing in
Mixtral and Qwen3-MoE, not in Llama-3 nor in an argmax; a KV-cache update in
decode steps, not in train steps; ...)."""

from __future__ import annotations

import functools

import numpy as np
import pytest

import corpus
from hlo_analysis import devices, opportunities
from hlo_analysis.patterns import (GELU, GQA, KV_CACHE, LABELS, LAYERNORM, MOE, OPTIMIZER, RMSNORM, ROPE, SOFTMAX,
                                      SWIGLU, Patterns)
from hlo_tools import parse
from tests.dump_model import make_dump


@functools.cache
def _corpus(name: str, stage: str = "before_optimizations") -> frozenset[str]:
    return frozenset(Patterns(parse(next(corpus.load(name)).text(stage))).found())


@pytest.fixture(scope="module")
def jax_model(tmp_path_factory) -> dict[str, frozenset[str]]:
    """Labels of the train step and decode step that tests/dump_model.py compiles
    (a layer norm ``x - mean``, tanh GELU, Adam, an argmax), before and after XLA:CPU."""
    out = make_dump(tmp_path_factory.mktemp("dump"))
    found = {}
    for step in ("train_step", "decode"):
        for stage in ("before_optimizations", "cpu_after_optimizations"):
            (path,) = out.glob(f"*jit_{step}.{stage}.txt")
            found[f"{step}:{stage}"] = frozenset(Patterns(parse(path.read_text())).found())
    return found


def _from_jax(fn, *args) -> frozenset[str]:
    from xla_bridge import from_jax  # the bridge is the one place jax is imported

    return frozenset(Patterns(from_jax(fn, *args)).found())


def test_layernorm_is_not_rmsnorm(jax_model):
    for key, found in jax_model.items():
        assert LAYERNORM in found and RMSNORM not in found, key
    for name in ("llama3-tiny-train-f32", "mistral-tiny-prefill-f32", "qwen3_moe-tiny-decode-f32"):
        assert RMSNORM in _corpus(name) and LAYERNORM not in _corpus(name), name
    assert RMSNORM in _corpus("llama3-tiny-decode-f32", "cpu_after_optimizations")


def test_softmax_needs_max_exp_and_sum(jax_model):
    for name in ("llama3-tiny-train-f32", "gemma2-tiny-prefill-f32", "mixtral-tiny-decode-f32"):
        assert SOFTMAX in _corpus(name)
    assert SOFTMAX in _corpus("llama3-tiny-decode-f32", "cpu_after_optimizations")
    # exp without a max-subtract and a sum: silu's 1/(1+exp(-x)), the jax model's random normal
    assert all(SOFTMAX not in found for found in jax_model.values())


def test_gelu_tanh_and_erf_forms(jax_model):
    import jax
    import jax.numpy as jnp

    assert GELU in jax_model["train_step:before_optimizations"]  # jax.nn.gelu: the tanh form
    assert GELU in jax_model["train_step:cpu_after_optimizations"]
    assert GELU in _corpus("gemma2-tiny-train-f32")  # Gemma-2's GeGLU
    assert GELU not in _corpus("llama3-tiny-train-f32")  # SwiGLU
    x = jnp.ones((4, 32), jnp.float32)
    sqrt2 = np.float32(np.sqrt(2.0))
    assert GELU in _from_jax(lambda x: x * 0.5 * (1.0 + jax.lax.erf(x / sqrt2)), x)
    # a tanh that is not of x + c*x^3 (the jax model's fori_loop has one too) is no GELU
    assert GELU not in _from_jax(lambda x: jnp.tanh(x * 0.5) * x + jnp.tanh(x * x), x)


def test_gqa_attention_needs_repeated_kv_heads():
    import jax
    import jax.numpy as jnp

    def attention(q, k, v):
        groups = q.shape[2] // k.shape[2]
        k, v = jnp.repeat(k, groups, axis=2), jnp.repeat(v, groups, axis=2)
        s = jnp.einsum("bqhd,bkhd->bhqk", q, k)
        return jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(s, -1), v)

    q, kv2, kv4 = (jnp.ones((2, 8, h, 16), jnp.float32) for h in (4, 2, 4))
    assert GQA in _from_jax(attention, q, kv2, kv2)
    mha = _from_jax(attention, q, kv4, kv4)
    assert SOFTMAX in mha and GQA not in mha
    for name in ("llama3-tiny-train-f32", "mistral-tiny-decode-f32", "qwen3_moe-tiny-prefill-f32"):
        assert GQA in _corpus(name), name  # 2 KV heads for 4 query heads
    assert GQA in _corpus("llama3-tiny-prefill-f32", "cpu_after_optimizations")


def test_moe_routing_needs_topk_indices_that_pick_experts(jax_model):
    for name in ("mixtral-tiny-train-f32", "qwen3_moe-tiny-decode-f32"):
        assert MOE in _corpus(name), name
        assert MOE in _corpus(name, "cpu_after_optimizations"), name  # XLA's TopK custom-call
    for name in ("llama3-tiny-train-f32", "gemma2-tiny-decode-f32"):
        assert MOE not in _corpus(name), name
    # the jax model's decode returns an argmax: indices that pick nothing
    assert MOE not in jax_model["decode:before_optimizations"]


def test_kv_cache_update_only_in_decode(jax_model):
    for name in ("llama3-tiny-decode-f32", "gemma2-tiny-decode-f32", "mixtral-tiny-decode-f32"):
        assert KV_CACHE in _corpus(name) and KV_CACHE in _corpus(name, "cpu_after_optimizations"), name
    for name in ("llama3-tiny-train-f32", "qwen3_moe-tiny-train-f32"):
        assert KV_CACHE not in _corpus(name), name
    # the train step's fori_loop writes residuals with a dynamic-update-slice: a loop buffer, no cache
    assert KV_CACHE not in jax_model["train_step:before_optimizations"]


def test_swiglu_rope_and_optimizer_update(jax_model):
    llama = _corpus("llama3-tiny-train-f32")
    assert {SWIGLU, ROPE, OPTIMIZER} <= llama
    assert SWIGLU not in _corpus("gemma2-tiny-train-f32")  # GeGLU: gelu, not silu
    assert OPTIMIZER in jax_model["train_step:before_optimizations"] and OPTIMIZER in _corpus(
        "llama3-tiny-train-f32", "cpu_after_optimizations")
    assert OPTIMIZER not in _corpus("llama3-tiny-decode-f32")
    assert ROPE not in jax_model["train_step:before_optimizations"]  # no sin/cos rotation
    assert all(lab in _corpus("llama3-tiny-decode-f32") for lab in (ROPE, SWIGLU))


def test_every_label_has_a_test():
    """A label added to ``LABELS`` fails here until a test above finds it on a real module."""
    tested = {LAYERNORM, RMSNORM, SOFTMAX, GELU, GQA, MOE, KV_CACHE, SWIGLU, ROPE, OPTIMIZER}
    assert set(LABELS) == tested


def test_opportunities_carry_the_labels():
    """The KV-cache write of a decode step is labelled as such, never softmax."""
    module = parse(next(corpus.load("llama3-tiny-decode-f32")).text("before_optimizations"))
    opps = opportunities.find(module, devices.load("h100"))
    dus = [o for o in opps if o.consumer.startswith("dynamic_update_slice")]
    assert dus and all(o.pattern == KV_CACHE for o in dus)
    assert {o.pattern for o in opps} - {None} <= set(LABELS)
