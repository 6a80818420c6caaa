"""StableHLO rewrites (issue 35): MLIR's rewrite API found in this jaxlib, one
portable pattern library giving equal rewrite counts and equal outputs at the HLO
and StableHLO levels on the corpus, ``hlo opt`` on ``.mlir`` files, the pass
manager at the StableHLO level, and the docs' StableHLO pass run as written."""

from __future__ import annotations

import json
import re

import pytest

import corpus
from hlo_tools import parse
from hlo_tools.errors import HloParseError
from passes import PassError, PassManager
from passes.dce import DeadCodeElimination
from passes.portable import BroadcastsOfReshapes, ConvertsAfterTransposes, FoldReshapePairs
from xla_bridge.mlir_rewrite import StableHloModule, rewrite_api
from xla_bridge.bench import benchmark
from xla_bridge.runner import compare
from xla_bridge.stablehlo import from_module

from conftest import ROOT, run_hlo

TINY = sorted((e for e in corpus.load() if e.size == "tiny" and not e.sharded), key=lambda e: e.name)

SMALL = """module @m {
  func.func public @main(%arg0: tensor<2x16xf32>, %arg1: tensor<8x4xbf16>) -> (tensor<4x8xf32>, tensor<32xf32>) {
    %0 = stablehlo.reshape %arg0 : (tensor<2x16xf32>) -> tensor<4x8xf32>
    %1 = stablehlo.reshape %0 : (tensor<4x8xf32>) -> tensor<32xf32>
    %2 = stablehlo.convert %arg1 : (tensor<8x4xbf16>) -> tensor<8x4xf32>
    %3 = stablehlo.transpose %2, dims = [1, 0] : (tensor<8x4xf32>) -> tensor<4x8xf32>
    %4 = stablehlo.negate %3 : tensor<4x8xf32>
    %5 = stablehlo.negate %4 : tensor<4x8xf32>
    return %5, %1 : tensor<4x8xf32>, tensor<32xf32>
  }
}
"""


def test_the_rewrite_api_is_found_in_this_jaxlib():
    api = rewrite_api()
    assert hasattr(api, "RewritePatternSet") and hasattr(api, "walk_and_apply_patterns")


def test_a_portable_pattern_rewrites_as_often_at_both_levels_on_every_tiny_module():
    for entry in TINY:
        hlo = parse(entry.text("before_optimizations"))
        stable = StableHloModule(from_module(hlo, debug_info=False), entry.name)
        n_hlo, n_mlir = BroadcastsOfReshapes().apply(hlo), BroadcastsOfReshapes().apply(stable)
        assert n_hlo == n_mlir > 0, entry.name
        stable.verify()


#: one module of each family, each kind once or twice: the outputs after compile
COMPILED = ["gemma2-tiny-train-f32", "llama3-tiny-decode-f32", "mistral-tiny-prefill-f32",
            "mixtral-tiny-decode-f32", "qwen3_moe-tiny-prefill-f32"]


@pytest.mark.parametrize("name", COMPILED)
def test_both_levels_compile_to_the_original_outputs(name):
    hlo = parse(next(corpus.load(name)).text("before_optimizations"))
    stable = StableHloModule(from_module(hlo, debug_info=False), name)
    rewritten = hlo.clone()
    assert BroadcastsOfReshapes().apply(rewritten) == BroadcastsOfReshapes().apply(stable) > 0
    assert compare(hlo, rewritten).verdict == "exact"
    assert compare(hlo, stable).verdict == "exact"


def test_each_pattern_at_the_stablehlo_level():
    m = StableHloModule(SMALL)
    assert FoldReshapePairs().apply(m) == 1 and ConvertsAfterTransposes().apply(m) == 1
    m.verify()
    text = m.to_text()
    assert "stablehlo.reshape %arg0 : (tensor<2x16xf32>) -> tensor<32xf32>" in text
    assert "tensor<4x8xf32>) -> tensor<4x8xf32>" not in text.split("transpose")[1].split("\n")[0]
    assert re.search(r"stablehlo.transpose %arg1, dims = \[1, 0\] : \(tensor<8x4xbf16>\) -> tensor<4x8xbf16>", text)
    # compile, compare and bench take StableHLO modules as they take HLO ones
    assert compare(StableHloModule(SMALL), m).verdict == "exact"
    assert benchmark(StableHloModule(SMALL), m, reps=3, warmup=1, input_sets=1).verdict == "exact"


def test_the_pass_manager_runs_stablehlo_passes_dumps_mlir_and_refuses_hlo_only_ones(tmp_path):
    m = StableHloModule(SMALL)
    report = PassManager([FoldReshapePairs(), ConvertsAfterTransposes()], dump_dir=tmp_path).run_with_report(m)
    assert [r.changed for r in report.records] == [True, True]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["00.input.mlir", "01.fold_reshape_pair.mlir",
                                                          "02.convert_after_transpose.mlir"]
    with pytest.raises(PassError, match="dce runs on hlo modules, not stablehlo"):
        PassManager([DeadCodeElimination()]).run(m)
    with pytest.raises(HloParseError) as e:
        StableHloModule("module {\n  func.func @main( {\n}", "bad.mlir")
    assert (e.value.line, e.value.column) == (2, 19) and "expected non-function type" in e.value.format()


def test_hlo_opt_on_mlir_then_compare_is_exact(tmp_path):
    for entry in TINY[:1]:
        src, out = tmp_path / f"{entry.name}.mlir", tmp_path / f"{entry.name}.out.mlir"
        src.write_text(from_module(parse(entry.text("before_optimizations")), debug_info=False))
        r = run_hlo("opt", src, "--passes", "broadcast-of-reshape", "-o", out)
        assert r.returncode == 0, r.stderr
        assert out.read_text().startswith("module @") and "broadcast-of-reshape" in r.stdout
        r = run_hlo("compare", src, out)
        assert r.returncode == 0 and ": exact" in r.stdout, r.stdout + r.stderr
    # an HLO-only pass in the pipeline: converted to HLO, written back as StableHLO
    r = run_hlo("opt", src, "--passes", "broadcast-of-reshape,dce", "-o", out, "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["level"] == "hlo" and out.read_text().startswith("module @")


def test_the_docs_stablehlo_pass_runs_as_written(tmp_path):
    doc = (ROOT / "docs" / "stablehlo.md").read_text()
    code = doc.split("## A StableHLO pass in under 25 lines")[1].split("```python\n")[1].split("```")[0]
    assert len([line for line in code.splitlines() if line.strip()]) < 25  # lines of code
    (tmp_path / "mypass.py").write_text(code)
    (tmp_path / "m.mlir").write_text(SMALL)
    r = run_hlo("opt", tmp_path / "m.mlir", "--load", tmp_path / "mypass.py", "--passes", "drop-double-negate",
                "-o", tmp_path / "out.mlir")
    assert r.returncode == 0, r.stderr
    out = (tmp_path / "out.mlir").read_text()
    assert "stablehlo.negate" not in out
    assert compare(StableHloModule(SMALL).to_hlo(), StableHloModule(out).to_hlo()).verdict == "exact"


def test_fuel_stops_a_portable_pattern_at_both_levels():
    from passes.fuel import fuel

    entry = next(corpus.load("llama3-tiny-prefill-f32"))
    hlo = parse(entry.text("before_optimizations"))
    stable = StableHloModule(from_module(hlo, debug_info=False))
    with fuel(3) as f:
        assert BroadcastsOfReshapes().apply(stable) == 3
    with fuel(3) as g:
        assert BroadcastsOfReshapes().apply(hlo) == 3
    assert len(f.decisions) == len(g.decisions) == 3 and f.refused == g.refused > 0


def test_a_jaxlib_without_the_rewrite_api_is_told_so(monkeypatch):
    from xla_bridge import mlir_rewrite

    monkeypatch.setattr(mlir_rewrite, "_REWRITE_MODULES", ("jaxlib.mlir.no_such_rewrite",))
    mlir_rewrite.rewrite_api.cache_clear()
    try:
        with pytest.raises(mlir_rewrite.StableHloError, match="has no MLIR rewrite API .*jax 0.12 or newer"):
            mlir_rewrite.rewrite_api()
    finally:
        mlir_rewrite.rewrite_api.cache_clear()


def test_element_types_hlo_has_other_names_for():
    from xla_bridge.mlir_rewrite import hlo_element_type

    assert [hlo_element_type(t) for t in ("i1", "i32", "ui4", "si8", "f8E4M3FN", "f8E5M2FNUZ", "complex<f32>", "bf16")] \
        == ["pred", "s32", "u4", "s8", "f8e4m3fn", "f8e5m2fnuz", "c64", "bf16"]
    m = StableHloModule("""module @m {
  func.func public @main(%arg0: tensor<4x8xui4>) -> tensor<8x4xui8> {
    %0 = stablehlo.convert %arg0 : (tensor<4x8xui4>) -> tensor<4x8xui8>
    %1 = stablehlo.transpose %0, dims = [1, 0] : (tensor<4x8xui8>) -> tensor<8x4xui8>
    return %1 : tensor<8x4xui8>
  }
}
""")
    assert ConvertsAfterTransposes().apply(m) == 1
    m.verify()
    assert "stablehlo.transpose %arg0, dims = [1, 0] : (tensor<4x8xui4>) -> tensor<8x4xui4>" in m.to_text()
