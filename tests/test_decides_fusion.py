"""A pass says whether it decides fusion, and every route that picks "inside XLA or
on the text" asks it: the three pipelines the module-path rule got wrong (a user's
``--load`` fusion pass, ``PassManager([PriorityFusion()])``, ``FixedPoint(PriorityFusion())``)
are measured through the hook, XLA's own fusion off, and a cleanup stays on the text."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import corpus
import hlo_tools
from hlo_lab.cli.args import user_pipeline
from hlo_lab.debug.rewrite import default_pipeline, measure_rewrite, rewrite_route
from passes import FixedPoint, FusionPass, PassManager, decides_fusion, get_pass, registry
from passes.fusion.call_inliner import CallInliner
from passes.fusion.priority import PriorityFusion
from xla_bridge.measure import Measurement

DOCS = Path(__file__).resolve().parent.parent / "docs" / "writing_a_pass.md"


@pytest.fixture(scope="module")
def users_fusion_pass(tmp_path_factory):
    """The docs' ElementwiseFusion, loaded as ``--load`` loads a user's file; taken
    out of the registry afterwards (other tests check the built-in table)."""
    block = next(b for b in re.findall(r"```python\n(.*?)```", DOCS.read_text(), re.S) if "class ElementwiseFusion" in b)
    path = tmp_path_factory.mktemp("user") / "elementwise.py"
    path.write_text(block)
    before = dict(registry.USER_PASSES)
    yield user_pipeline([str(path)], "elementwise-fusion")
    registry.USER_PASSES.clear()
    registry.USER_PASSES.update(before)


def _unwrapped(passes: list) -> list:
    """XLA:CPU hands the hook every op in a one-op fusion: the docs' pass, written
    for bare ops, runs after ``inline-fusions`` there (docs/writing_a_pass.md)."""
    return [get_pass("inline-fusions"), *passes]


@pytest.fixture(scope="module")
def module():
    return hlo_tools.parse(next(e for e in corpus.load() if e.name == "llama3-tiny-decode-f32").text("before_optimizations"))


def test_each_pass_says_whether_it_decides_fusion(users_fusion_pass):
    assert decides_fusion(users_fusion_pass)
    assert PassManager([PriorityFusion()]).decides_fusion
    assert FixedPoint(PriorityFusion()).decides_fusion
    assert PassManager([get_pass("dce"), PassManager([FixedPoint(PriorityFusion())])]).decides_fusion
    assert not PassManager([get_pass("dce"), get_pass("cse")]).decides_fusion
    assert not CallInliner().decides_fusion  # in passes/fusion, but a cleanup: the module path said otherwise
    assert issubclass(PriorityFusion, FusionPass) and not decides_fusion([lambda m: False])


@pytest.mark.parametrize("case", ["users --load pass", "PassManager([PriorityFusion()])", "FixedPoint(PriorityFusion())"])
def test_fusion_pipelines_are_measured_inside_xla(case, users_fusion_pass, module):
    passes = {"users --load pass": users_fusion_pass,
              "PassManager([PriorityFusion()])": [PassManager([PriorityFusion()])],
              "FixedPoint(PriorityFusion())": [FixedPoint(PriorityFusion())]}[case]
    pipeline, on_text, route = rewrite_route(passes, "cpu")
    assert not on_text and pipeline.base == "as-written" and pipeline.pass_ is not None, route
    assert default_pipeline(passes) == "as-written"
    measured = _unwrapped(passes) if case == "users --load pass" else passes
    res, _ = measure_rewrite(Measurement("cpu", contained=True), module, measured, reps=2)
    assert res is not None and res.pipeline_b.startswith("as-written") and res.hook_b.changed
    assert res.verdict in ("exact", "close"), res.verdict


def test_a_cleanup_runs_on_the_text_and_both_sides_compile_stock(module):
    pipeline, on_text, _ = rewrite_route([get_pass("dce"), get_pass("cse")], "cpu")
    assert on_text and pipeline.base == "stock" and pipeline.pass_ is None


def test_bench_and_bisect_hook_the_same_baseline(module, tmp_path):
    """``--hook`` with the same passes: bench and bisect compile B on the same base
    (XLA's fusion off for a fusion pipeline, stock for cleanups)."""
    from hlo_lab.debug.bisect import bisect_passes
    from tests.conftest import run_hlo

    path = tmp_path / "decode.hlo"
    path.write_text(module.to_text())
    for spec, base in (("best", "as-written"), ("dce,cse", "stock")):
        done = run_hlo("bench", path, "--passes", spec, "--hook", "pre-scheduler", "--reps", "2", "--no-record")
        assert done.returncode == 0, done.stderr
        assert f"at pre-scheduler, B {base}" in done.stdout.splitlines()[0], done.stdout
        res = bisect_passes(module, get_pipeline(spec), hook="pre-scheduler")
        assert res.pipeline == f"{base} + passes at pre-scheduler", res.pipeline


def get_pipeline(spec: str) -> list:
    from passes.registry import parse_pipeline

    return parse_pipeline(spec)
