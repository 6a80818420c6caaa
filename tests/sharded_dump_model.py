"""Writes a real XLA dump of a sharded train step (a 2x4 data x model mesh), as a user would.

Run as a script in a fresh process (XLA reads XLA_FLAGS once, at start-up, and the
8 host devices must exist before jax starts):

    python tests/sharded_dump_model.py OUT [--partitioner shardy|gspmd]

Only the train step's module is dumped (``before_optimizations`` and
``cpu_after_optimizations``). Its pre-optimization module holds what the bundled
sharded corpus modules do not: sharding annotations as custom-calls
(``with_sharding_constraint`` -> ``Sharding``; ``shard_map`` ->
``xla.sdy.GlobalToLocalShape`` / ``LocalToGlobalShape`` with Shardy,
``SPMDFullToShardShape`` / ``SPMDShardToFullShape`` with GSPMD), collectives written
by hand inside the ``shard_map`` (psum, all-gather, psum-scatter, ppermute), a ``scan``
over layers (a while loop), ``jax.random`` and an Adam step.
"""

from __future__ import annotations

import argparse
import os
import sys

MESH = (2, 4)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--partitioner", choices=("shardy", "gspmd"), default="shardy")
    args = ap.parse_args(argv)
    os.environ["XLA_FLAGS"] = (f"--xla_force_host_platform_device_count={MESH[0] * MESH[1]} "
                               f"--xla_dump_to={args.out} --xla_dump_hlo_as_text "
                               "--xla_dump_hlo_module_re=train_step")
    os.environ["JAX_PLATFORMS"] = "cpu"

    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    jax.config.update("jax_use_shardy_partitioner", args.partitioner == "shardy")
    mesh = Mesh(np.array(jax.devices()[: MESH[0] * MESH[1]]).reshape(MESH), ("batch", "model"))

    def S(*spec):
        return NamedSharding(mesh, P(*spec))

    d, f, b, t, v = 64, 256, 8, 16, 512

    def mlp(h, w1, w2):
        def local(h, w1, w2):
            a = jax.nn.gelu(h @ w1)
            y = jax.lax.psum(a @ w2, "model")
            g = jax.lax.all_gather(y, "model", axis=2, tiled=True)[..., :d]
            r = jax.lax.psum_scatter(g, "model", scatter_dimension=2, tiled=True)
            r = jax.lax.ppermute(r, "model", [(i, (i + 1) % MESH[1]) for i in range(MESH[1])])
            r = jax.lax.all_gather(r, "model", axis=2, tiled=True)
            return y + 0.0 * r

        return jax.shard_map(local, mesh=mesh, in_specs=(P("batch", None, None), P(None, "model"), P("model", None)),
                             out_specs=P("batch", None, None), check_vma=False)(h, w1, w2)

    def loss(params, x, y, key):
        emb, w1, w2, g, out = params
        h = jax.lax.with_sharding_constraint(emb[x], S("batch", None, None))
        h = h + 0.01 * jax.random.normal(key, h.shape)

        def layer(h, _):
            mu = h.mean(-1, keepdims=True)
            var = ((h - mu) ** 2).mean(-1, keepdims=True)
            return h + mlp((h - mu) * jax.lax.rsqrt(var + 1e-5) * g, w1, w2), None

        h, _ = jax.lax.scan(layer, h, None, length=2)
        logits = jax.lax.with_sharding_constraint(h @ out, S("batch", None, "model"))
        lp = jax.nn.log_softmax(logits)
        return -jnp.mean(jnp.take_along_axis(lp, y[..., None], -1))

    def train_step(params, m, vv, x, y, key):
        k1, k2 = jax.random.split(key)
        value, grads = jax.value_and_grad(loss)(params, x, y, k1)
        m = jax.tree.map(lambda a, g: 0.9 * a + 0.1 * g, m, grads)
        vv = jax.tree.map(lambda a, g: 0.999 * a + 0.001 * g * g, vv, grads)
        params = jax.tree.map(lambda p, a, c: p - 1e-3 * a / (jnp.sqrt(c) + 1e-8), params, m, vv)
        return params, m, vv, value, k2

    pshard = (S(None, "model"), S(None, "model"), S("model", None), S(), S(None, "model"))

    def fresh():
        shapes = ((v, d), (d, f), (f, d), (d,), (d, v))
        return jax.device_put(tuple(jnp.full(s, 0.02, jnp.float32) for s in shapes), pshard)

    x = jax.device_put(jnp.zeros((b, t), jnp.int32), S("batch", None))
    step = jax.jit(train_step, in_shardings=(pshard, pshard, pshard, S("batch", None), S("batch", None), S()),
                   out_shardings=(pshard, pshard, pshard, S(), S()), donate_argnums=(0, 1, 2))
    value = step(fresh(), fresh(), fresh(), x, x, jax.random.PRNGKey(0))[3]
    print(f"loss {float(value):.6f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
