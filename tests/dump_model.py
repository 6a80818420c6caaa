"""Writes a real XLA dump folder from a small jax model, as a user would.

Run as a script in a fresh process (XLA reads XLA_FLAGS once, at start-up):

    python tests/dump_model.py OUT [--per-pass] [--proto [--no-text]] [--gpu]

The model has what real dumps are made of and our corpus is not: a ``while``
loop (a ``fori_loop`` and every ``jax.random`` call), ``argmax`` (a variadic
reduce), a call returning a tuple (``jvp`` of ``jnp.where``), a multi-output
fusion (two reductions of one input), and a small Adam step.  ``--gpu`` also
compiles it for an H100 without a GPU (XLA:GPU, deviceless).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path


def _flags(out: Path, per_pass: bool, proto: bool, text: bool = True) -> str:
    flags = [f"--xla_dump_to={out}"] + (["--xla_dump_hlo_as_text"] if text else [])
    if proto:
        flags.append("--xla_dump_hlo_as_proto")
    if per_pass:
        flags.append("--xla_dump_hlo_pass_re=.*")
    return " ".join(flags)


def _model():
    import jax
    import jax.numpy as jnp

    def layer_norm(x, g):
        mu = x.mean(-1, keepdims=True)
        var = ((x - mu) ** 2).mean(-1, keepdims=True)
        return (x - mu) * jax.lax.rsqrt(var + 1e-5) * g

    def loss(params, x, key):
        w1, w2, g = params
        noise = jax.random.normal(key, x.shape) * 0.01
        h = layer_norm(x + noise, g) @ w1
        h = jnp.where(h > 0, h, 0.01 * h)  # jvp of where: a call returning a tuple
        h = jax.nn.gelu(h) @ w2

        def body(i, c):
            return c * 0.9 + jnp.tanh(c) * 0.1

        h = jax.lax.fori_loop(0, 3, body, h)  # a while loop with a tuple carry
        return jnp.mean(h**2)

    @jax.jit
    def train_step(params, m, v, x, key):
        k1, k2 = jax.random.split(key)
        l, grads = jax.value_and_grad(loss)(params, x, k1)
        m = jax.tree.map(lambda a, g: 0.9 * a + 0.1 * g, m, grads)
        v = jax.tree.map(lambda a, g: 0.999 * a + 0.001 * g * g, v, grads)
        params = jax.tree.map(lambda p, a, b: p - 1e-3 * a / (jnp.sqrt(b) + 1e-8), params, m, v)
        return params, m, v, l, k2

    @jax.jit
    def decode(params, x):
        w1, w2, g = params
        logits = layer_norm(x, g) @ w1
        stats = (logits.max(-1), logits.sum(-1))  # two reductions of one input: multi-output fusion
        return jnp.argmax(logits, axis=-1), stats

    return train_step, decode


def _args():
    import jax
    import jax.numpy as jnp

    key = jax.random.PRNGKey(0)
    d, f, b = 32, 64, 8
    params = (jnp.ones((d, f)) * 0.02, jnp.ones((f, d)) * 0.02, jnp.ones((d,)))
    zeros = jax.tree.map(jnp.zeros_like, params)
    x = jnp.ones((b, d))
    return params, zeros, x, key


def dump(out: Path, *, per_pass: bool = False, proto: bool = False, gpu: bool = False, text: bool = True) -> None:
    """Compiles and runs the model on XLA:CPU (and compiles it for XLA:GPU with
    ``gpu``) with dump flags set; must be the process's first use of jax."""
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " " + _flags(out, per_pass, proto, text)).strip()
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    import jax

    train_step, decode = _model()
    params, zeros, x, key = _args()
    params2, *_ = train_step(params, zeros, zeros, x, key)
    jax.block_until_ready(decode(params2, x))
    if gpu:
        _compile_gpu(decode, params, x)


def _compile_gpu(fn, params, x) -> None:
    import jax
    from jax.experimental import topologies

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from xla_bridge.targets import target_config

    topo = topologies.get_topology_desc("", platform="cuda", target_config=target_config("h100"), topology="1x1x1")
    sharding = jax.sharding.SingleDeviceSharding(topo.devices[0])
    spec = lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=sharding)  # noqa: E731
    fn.lower(jax.tree.map(spec, params), spec(x)).compile()


def gpu_flags() -> list[str]:
    """``["--gpu"]`` where a deviceless XLA:GPU compile can run here (the CUDA
    plugin and an H100 target config), else ``[]``."""
    try:
        import jax_plugins.xla_cuda12  # noqa: F401
    except ImportError:
        return []
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from xla_bridge.targets import target_names

    return ["--gpu"] if "h100" in target_names() else []


def make_dump(out: Path, *flags: str) -> Path:
    """Runs this script in a fresh process (XLA reads XLA_FLAGS once) into ``out``."""
    import subprocess

    env = dict(os.environ, JAX_PLATFORMS="cpu")
    env.pop("XLA_FLAGS", None)
    subprocess.run([sys.executable, str(Path(__file__).resolve()), str(out), *flags], check=True, env=env,
                   capture_output=True, timeout=300)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--per-pass", action="store_true")
    ap.add_argument("--proto", action="store_true")
    ap.add_argument("--gpu", action="store_true")
    ap.add_argument("--no-text", action="store_true", help="proto files only (with --proto)")
    a = ap.parse_args()
    dump(a.out, per_pass=a.per_pass, proto=a.proto, gpu=a.gpu, text=not a.no_text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
