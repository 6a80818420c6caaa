"""Real modules to draw, for tests, benchmarks and notebooks: the bundled corpus
when it is there, else modules lowered and compiled by jax on the spot (a
genuine before/after of XLA:CPU's fusion passes, ``xla_bridge.examples``)."""

from __future__ import annotations

from pathlib import Path

import corpus
import hlo_tools
from hlo_tools.parser import read_hlo_text
from xla_bridge.examples import jax_texts

ROOT = Path(__file__).resolve().parent.parent  # the repository root
MODULES = ROOT / "corpus" / "modules"


def corpus_module(name: str, stage: str) -> hlo_tools.Module | None:
    """A stage of a bundled corpus module (via ``corpus.load`` once the manifest
    exists, else the stored file), or None when it is not bundled."""
    if (corpus.CORPUS_DIR / "manifest.json").exists():
        for entry in corpus.load(name):
            if stage in entry.files:
                return entry.module(stage)
        return None
    path = MODULES / name / f"{stage}.hlo.txt.gz"
    if path.exists():
        return hlo_tools.parse(read_hlo_text(path), source=str(path))
    return None


def jax_pair(layers: int = 1) -> tuple[hlo_tools.Module, hlo_tools.Module]:
    before, after = jax_texts(layers)
    return hlo_tools.parse(before, source="<jax before>"), hlo_tools.parse(after, source="<xla:cpu after>")
