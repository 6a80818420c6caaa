"""Every fusion pass on every runnable corpus module (XLA:CPU, through the
pre-scheduler hook): outputs equal to stock XLA, and XLA compiles exactly the
fusions our passes wrote. ``BEST`` chains every pass but priority; ``PRIORITY``
covers the priority pass (on the decode steps, to keep the suite short; the
bench runs it everywhere)."""

from __future__ import annotations

import pytest

from hlo_tools import HloOpcode


from xla_bridge import jax_internals  # noqa: E402

if not jax_internals.hook_supported():
    pytest.skip("needs jax.extend.xla pipeline hooks", allow_module_level=True)

import corpus  # noqa: E402
from hlo_lab.study import gpu_study, ours  # noqa: E402
from passes.registry import BEST, PRIORITY  # noqa: E402
from xla_bridge.measure import STOCK, Measurement  # noqa: E402
from xla_bridge.runner import compare  # noqa: E402

CPU = Measurement("cpu")

RUNNABLE = sorted(e.name for e in corpus.load() if e.meta.get("runnable") and not e.meta.get("sharded"))


def _text(name: str) -> str:
    return next(e for e in corpus.load() if e.name == name).text("before_optimizations")


@pytest.fixture(scope="module")
def stock():
    cache = {}

    def get(name):
        if name not in cache:
            cache[name] = CPU.compile(_text(name), STOCK)
        return cache[name]

    return get


def _fusions(module) -> set[str]:
    return {i.name for i in module.entry if i.opcode is HloOpcode.FUSION}


def _check(name: str, spec: str, stock) -> None:
    mine = CPU.compile(_text(name), ours(spec, "cpu"))
    written = _fusions(mine.hook.after)
    assert written and _fusions(mine.optimized_module) == written, "XLA changed our fusions"
    verdict = compare(stock(name), mine)
    assert verdict.verdict in ("exact", "close"), str(verdict)


def test_the_corpus_has_runnable_modules():
    assert len(RUNNABLE) >= 15


@pytest.mark.parametrize("name", RUNNABLE)
def test_best_pipeline_equal_and_kept(name, stock):
    _check(name, BEST, stock)


@pytest.mark.parametrize("name", [n for n in RUNNABLE if "decode" in n])
def test_priority_pipeline_equal_and_kept(name, stock):
    _check(name, PRIORITY, stock)


def test_xla_gpu_keeps_our_fusions_deviceless():
    """XLA:GPU for an H100, compiled here without a GPU: BEST as written at the
    post-scheduler hook, every fusion we wrote is in XLA:GPU's optimized module."""
    if not jax_internals.cuda_plugin_available():
        pytest.skip("no XLA:GPU compiler here: the CUDA plugin is not installed")
    g = gpu_study("llama3-tiny-decode-f32", _text("llama3-tiny-decode-f32"), BEST, "h100", mode="as-written")
    assert g.fusions_written > 0 and g.kept
    assert g.ours.kernels > 0 and g.ours.bytes > 0 and g.ours.predicted_us > 0
