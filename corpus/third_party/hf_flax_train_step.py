"""A train step and a prefill step of a tiny Hugging Face Flax causal LM, for XLA dumps.

Run by corpus/third_party/hf_flax_dump.sh inside its own virtualenv (transformers 4.x, the
last line that ships Flax models), never the project's .venv:

    python hf_flax_train_step.py llama|gemma [--mesh]

The model comes from a config only (random init, no hub download, no weights), the data is
synthetic int32 tokens.  Everything that computes is under jax.jit, so the dump folder holds
the jitted modules only: jit_init_params, jit_init_opt_state, jit_train_step (cross-entropy,
jax.checkpoint on the loss, jax.grad, optax.adamw, params and optimizer state donated) and
jit_prefill_step (one forward pass that fills the KV cache, last-token logits).
  llama: f32 weights and activations.
  gemma: f32 weights, bf16 activations (dtype=jnp.bfloat16), f32 loss.
  --mesh: 8 host devices as a 2-D Mesh fsdp=4 x tensor=2; 2-D weights (embedding, attention
          and MLP kernels, their Adam moments) NamedSharding P('fsdp', 'tensor'), 1-D ones
          replicated, the batch P('fsdp', None).
"""
import sys

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

BATCH, SEQ, STEPS = 8, 32, 2


def build(name):
    tiny = dict(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=64)
    if name == "llama":
        from transformers import FlaxLlamaForCausalLM, LlamaConfig
        return FlaxLlamaForCausalLM(LlamaConfig(**tiny), _do_init=False)
    if name == "gemma":
        from transformers import FlaxGemmaForCausalLM, GemmaConfig
        return FlaxGemmaForCausalLM(GemmaConfig(head_dim=32, hidden_activation="gelu_pytorch_tanh", **tiny), dtype=jnp.bfloat16, _do_init=False)
    raise SystemExit(f"unknown model {name} (llama, gemma)")


def main():
    name, use_mesh = sys.argv[1], "--mesh" in sys.argv[2:]
    model = build(name)
    tx = optax.adamw(1e-3, weight_decay=0.01)

    def init_params():
        return model.init_weights(jax.random.PRNGKey(0), (1, 1))

    def init_opt_state(params):
        return tx.init(params)

    def loss_fn(params, ids):
        logits = model(ids, params=params, train=False).logits.astype(jnp.float32)
        return optax.softmax_cross_entropy_with_integer_labels(logits[:, :-1], ids[:, 1:]).mean()

    def train_step(params, opt_state, ids):
        loss, grads = jax.value_and_grad(jax.checkpoint(loss_fn))(params, ids)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    def prefill_step(params, ids):
        cache = model.init_cache(ids.shape[0], SEQ)
        pos = jnp.broadcast_to(jnp.arange(ids.shape[1], dtype=jnp.int32), ids.shape)
        out = model(ids, attention_mask=jnp.ones_like(ids), position_ids=pos, params=params, past_key_values=cache)
        return out.logits[:, -1].astype(jnp.float32), out.past_key_values

    ids = np.random.default_rng(0).integers(0, 256, (BATCH, SEQ), dtype=np.int32)
    if use_mesh:
        devices = np.array(jax.devices())
        assert devices.size == 8, f"--mesh needs 8 devices, got {devices.size}"
        mesh = Mesh(devices.reshape(4, 2), ("fsdp", "tensor"))

        def shard(x):  # by shape only, so the Adam moments get the spec of their weight
            two_d = x.ndim == 2 and x.shape[0] % 4 == 0 and x.shape[1] % 2 == 0
            return NamedSharding(mesh, P("fsdp", "tensor") if two_d else P())

        p_shard = jax.tree.map(shard, jax.eval_shape(init_params))
        o_shard = jax.tree.map(shard, jax.eval_shape(init_opt_state, jax.eval_shape(init_params)))
        d_shard = NamedSharding(mesh, P("fsdp", None))
        ids = jax.device_put(ids, d_shard)
        init_params_j = jax.jit(init_params, out_shardings=p_shard)
        init_opt_j = jax.jit(init_opt_state, in_shardings=(p_shard,), out_shardings=o_shard)
        train_j = jax.jit(train_step, in_shardings=(p_shard, o_shard, d_shard),
                          out_shardings=(p_shard, o_shard, NamedSharding(mesh, P())), donate_argnums=(0, 1))
        prefill_j = jax.jit(prefill_step, in_shardings=(p_shard, d_shard))
    else:
        init_params_j, init_opt_j = jax.jit(init_params), jax.jit(init_opt_state)
        train_j = jax.jit(train_step, donate_argnums=(0, 1))
        prefill_j = jax.jit(prefill_step)

    params = init_params_j()
    opt_state = init_opt_j(params)
    logits, _ = prefill_j(params, ids)
    losses = []
    for _ in range(STEPS):
        params, opt_state, loss = train_j(params, opt_state, ids)
        losses.append(float(loss))
    assert all(np.isfinite(losses)) and np.isfinite(np.asarray(logits)).all(), losses
    n = sum(x.size for x in jax.tree.leaves(params))
    print(f"{name}{' mesh' if use_mesh else ''}: {n} params on {len(jax.devices())} device(s), "
          f"loss {losses[0]:.4f} -> {losses[-1]:.4f}, prefill logits {tuple(logits.shape)}")


if __name__ == "__main__":
    main()
