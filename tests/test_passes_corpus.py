"""The cleanup passes on real corpus modules: the result verifies, XLA's parser
accepts it, the instruction count never grows, and on runnable modules the
outputs equal the original's (through the XLA bridge on CPU)."""

from __future__ import annotations

import pytest

import corpus
import hlo_tools
import xla_bridge
from xla_bridge import jax_internals
from passes import PassManager, get_pass

_HAVE = (corpus.CORPUS_DIR / "manifest.json").exists()
_ENTRIES = list(corpus.load()) if _HAVE else []
# every module for verify/parse; every runnable single-device one for outputs
_RUN = [e for e in _ENTRIES if e.meta.get("runnable") and not e.meta.get("sharded")]


def _cleanup(module):
    return PassManager([get_pass("dce"), get_pass("cse"), get_pass("simplify")], fixed_point=True).run(module)


@pytest.mark.parametrize("entry", _ENTRIES, ids=[e.name for e in _ENTRIES])
def test_cleanup_verifies_and_xla_accepts(entry):
    module = hlo_tools.parse(entry.text("before_optimizations"), entry.name)
    before = module.instruction_count
    _cleanup(module)  # the manager verifies after each pass that changed something
    assert module.instruction_count < before, "pre-optimization LLM modules have dead/duplicate/trivial ops"
    jax_internals.xla_module_from_text(module.to_text())


@pytest.mark.parametrize("entry", _RUN, ids=[e.name for e in _RUN])
def test_cleanup_keeps_outputs(entry):
    original = hlo_tools.parse(entry.text("before_optimizations"), entry.name)
    rewritten = original.clone()
    _cleanup(rewritten)
    verdict = xla_bridge.compare(original, rewritten)
    assert verdict.ok, str(verdict)
