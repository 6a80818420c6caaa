"""Real modules to draw, for tests, benchmarks and notebooks: the bundled corpus
when it is there, else modules lowered and compiled by jax on the spot (a
genuine before/after of XLA:CPU's fusion passes). jax is imported only here,
and only when a jax module is asked for."""

from __future__ import annotations

import functools
import gzip
import os
from pathlib import Path

import hlo_tools

ROOT = Path(__file__).resolve().parent.parent  # the repository root
MODULES = ROOT / "corpus" / "modules"


def corpus_module(name: str, stage: str) -> hlo_tools.Module | None:
    """A stage of a bundled corpus module (via ``corpus.load`` once the manifest
    exists, else the stored file), or None when it is not bundled."""
    try:
        import corpus

        if (corpus.CORPUS_DIR / "manifest.json").exists():
            for entry in corpus.load(name):
                if stage in entry.files:
                    return entry.module(stage)
            return None
    except ImportError:
        pass
    path = MODULES / name / f"{stage}.hlo.txt.gz"
    if path.exists():
        return hlo_tools.parse(gzip.decompress(path.read_bytes()).decode(), source=str(path))
    return None


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


def jax_pair(layers: int = 1) -> tuple[hlo_tools.Module, hlo_tools.Module]:
    before, after = jax_texts(layers)
    return hlo_tools.parse(before, source="<jax before>"), hlo_tools.parse(after, source="<xla:cpu after>")
