"""The bundled corpus through XLA: every module small enough to run here compiles
(stock), runs, and agrees exactly with its own print re-parsed."""

from __future__ import annotations

from pathlib import Path

import pytest


import corpus
from hlo_tools import parse
from xla_bridge.jax_internals import cuda_plugin_available
from xla_bridge.compiler import compile
from xla_bridge.runner import compare

MANIFEST = Path(__file__).resolve().parent.parent / "corpus" / "manifest.json"


def runnable_entries():
    if not MANIFEST.exists():
        return []
    return [e for e in corpus.load() if e.runnable and not e.sharded and e.size == "tiny"]


ENTRIES = runnable_entries()


@pytest.mark.parametrize("entry", ENTRIES, ids=lambda e: e.name)
def test_corpus_module_runs_and_its_reprint_agrees_exactly(entry):
    m = entry.module("before_optimizations")
    cmp = compare(m, parse(m.to_text()))
    assert cmp.verdict == "exact", str(cmp)


@pytest.mark.skipif(not cuda_plugin_available(), reason="jax's CUDA plugin is not installed")
def test_corpus_module_compiles_for_h100_without_a_gpu():
    entry = next(e for e in ENTRIES if "decode" in e.name)
    res = compile(entry.module("before_optimizations"), target="h100")
    kinds = {k for _, k in res.fusions()}
    assert {"kLoop", "kInput"} <= kinds, kinds
    assert res.device == "NVIDIA H100 80GB HBM3"
