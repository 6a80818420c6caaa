"""Pipelines are passes: PassManager answers changed-or-not, nests, and keeps its
report apart; FixedPoint repeats one pass; the registry is an explicit table."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

import corpus
import hlo_tools
from passes import (PASSES, ComputationPass, FixedPoint, Pass, PassError, PassManager, available_passes, get_pass,
                    parse_pipeline)
from tests.passes_util import Flipper

#: What ``available_passes()`` answered before the table was explicit (checked
#: against the import-side-effect registry at commit 4c8a269): name -> class.
BEFORE = {
    # portable patterns, at the HLO and the StableHLO level (issue 35)
    "broadcast-of-reshape": "passes.portable.BroadcastsOfReshapes",
    "convert-after-transpose": "passes.portable.ConvertsAfterTransposes",
    "fold-reshape-pair": "passes.portable.FoldReshapePairs",
    # a stacked KV cache written in place (issue 36), first in gpu-best
    "cache-update-in-place": "passes.cache_update.CacheUpdateInPlace",
    "call-inliner": "passes.fusion.call_inliner.CallInliner",
    "cse": "passes.cse.CommonSubexpressionElimination",
    "dce": "passes.dce.DeadCodeElimination",
    "entry-layout-assignment": "passes.layout.EntryLayoutAssignment",
    # the XLA:GPU fusion profile (issue 17), registered like the others
    "gpu-multi-output-fusion": "passes.fusion.multi_output.GpuMultiOutputFusion",
    "gpu-priority-fusion": "passes.fusion.priority.GpuPriorityFusion",  # XLA:GPU's producer-first rule (issue 36)
    "gpu-producer-consumer-fusion": "passes.fusion.producer_consumer.GpuProducerConsumerFusion",
    "horizontal-fusion": "passes.fusion.horizontal.HorizontalFusion",
    "inline-fusions": "passes.fusion.outline.InlineFusions",
    "latency-hiding-scheduler": "passes.scheduling.LatencyHidingScheduler",
    "layout-normalization": "passes.layout.LayoutNormalization",
    "library-dot-fusion": "passes.fusion.library_dot.LibraryDotFusion",
    "memory-scheduler": "passes.scheduling.MemoryScheduler",
    "multi-output-fusion": "passes.fusion.multi_output.MultiOutputFusion",
    "priority-fusion": "passes.fusion.priority.PriorityFusion",
    "producer-consumer-fusion": "passes.fusion.producer_consumer.ProducerConsumerFusion",
    "reduction-epilogue-fusion": "passes.fusion.reduction_epilogue.ReductionEpilogueFusion",
    "simplify": "passes.simplify.AlgebraicSimplifier",
    "transpose-folding": "passes.layout.TransposeFolding",
    # converts and weight multiplies joined to XLA:GPU's Triton normalizations (issue 36)
    "triton-elementwise-fusion": "passes.fusion.triton_elementwise.TritonElementwiseFusion",
}

SRC = """HloModule m

ENTRY e {
  x = f32[2,3]{1,0} parameter(0)
  d1 = f32[2,3]{1,0} negate(x)
  d2 = f32[2,3]{1,0} abs(x)
  d3 = f32[2,3]{1,0} exponential(x)
  ROOT t = f32[3,2]{1,0} transpose(x), dimensions={1,0}
}
"""


class _PeelOne(ComputationPass):
    """Removes one dead instruction per run: converges after as many runs as there are."""

    name = "peel-one"

    def run_on_computation(self, comp):
        dead = [i for i in comp.instructions if not i.users and not i.is_root and i.opcode_text != "parameter"]
        if dead:
            comp.remove_instruction(dead[0])
        return bool(dead)


class _Breaks(ComputationPass):
    name = "breaks"

    def run_on_computation(self, comp):
        comp.root.shape = hlo_tools.parse_shape("s32[7]")
        return True


def _real_module() -> hlo_tools.Module:
    if not (corpus.CORPUS_DIR / "manifest.json").exists():
        pytest.fail("the bundled corpus is missing")
    entry = next(e for e in corpus.load() if e.name == "llama3-tiny-prefill-f32")
    return hlo_tools.parse(entry.text("before_optimizations"), entry.name)


def test_a_pipeline_is_a_pass():
    assert issubclass(PassManager, Pass) and issubclass(FixedPoint, Pass)
    assert PassManager([]).name == "pipeline" and PassManager([], name="cleanup").name == "cleanup"


def test_run_answers_a_bool_false_when_nothing_changed():
    module = _real_module()
    cleanup = PassManager(parse_pipeline("dce,cse,simplify"), fixed_point=True)
    first = cleanup.run(module)
    assert first is True
    text = module.to_text()
    again = cleanup.run(module)
    assert again is False  # a truthy report here would tell XLA's hook the module changed
    assert module.to_text() == text


def test_run_with_report_keeps_the_records():
    module = hlo_tools.parse(SRC)
    report = PassManager([get_pass("dce"), get_pass("cse")]).run_with_report(module)
    assert report.changed and report.iterations == 1
    assert [(r.name, r.changed, r.instructions_before, r.instructions_after) for r in report.records] == [
        ("dce", True, 5, 2), ("cse", False, 2, 2)]


def test_nested_pipeline_runs_records_and_dumps_as_one_pass(tmp_path):
    flat, nested = _real_module(), _real_module()
    PassManager(parse_pipeline("dce,cse,simplify")).run(flat)
    cleanup = PassManager(parse_pipeline("dce,cse"), name="cleanup")
    report = PassManager([cleanup, get_pass("simplify")], dump_dir=tmp_path).run_with_report(nested)
    assert nested.to_text() == flat.to_text()
    outer = report.records[0]
    assert (outer.name, outer.changed) == ("cleanup", True)
    assert [r.name for r in outer.nested] == ["dce", "cse"]
    assert outer.instructions_before == outer.nested[0].instructions_before
    assert outer.instructions_after == outer.nested[-1].instructions_after
    lines = report.table().splitlines()
    assert [line.split()[0] for line in lines[1:]] == ["cleanup", "dce", "cse", "simplify"]
    assert lines[2].startswith("  dce") and lines[1].startswith("cleanup")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["00.input.hlo", "01.cleanup.hlo", "02.simplify.hlo"]


def test_nested_pipeline_failures_name_the_path():
    with pytest.raises(PassError, match="pass inner/breaks left an invalid module") as info:
        PassManager([get_pass("dce"), PassManager([_Breaks()], name="inner")]).run(hlo_tools.parse(SRC))
    assert info.value.ran == ("dce", "inner/breaks") and info.value.pass_name == "inner/breaks"
    # an inner pipeline that does not verify is verified by the outer one, as one pass
    with pytest.raises(PassError, match="pass inner left an invalid module"):
        PassManager([PassManager([_Breaks()], name="inner", verify=False)]).run(hlo_tools.parse(SRC))
    with pytest.raises(PassError, match="pipeline inner did not reach a fixed point in 3 iterations"):
        PassManager([PassManager([Flipper()], name="inner", fixed_point=True, max_iterations=3, verify=False)],
                    verify=False).run(hlo_tools.parse(SRC))


def test_fixed_point_pipeline_of_pipelines():
    module = hlo_tools.parse(SRC)
    inner = PassManager([_PeelOne()], name="peel")
    report = PassManager([inner], fixed_point=True).run_with_report(module)
    assert report.iterations == 4  # three dead instructions, then a round with no change
    assert [r.changed for r in report.records] == [True, True, True, False]
    assert module.instruction_count == 2


def test_fixed_point_converges():
    module = hlo_tools.parse(SRC)
    fix = FixedPoint(_PeelOne(), max_iterations=4)  # three changing runs, then one that changes nothing
    assert fix.name == "peel-one"
    assert fix.run(module) is True and module.instruction_count == 2
    assert fix.run(module) is False
    report = PassManager([fix, get_pass("dce")]).run_with_report(hlo_tools.parse(SRC))
    assert [(r.name, r.changed, r.instructions_after) for r in report.records] == [("peel-one", True, 2), ("dce", False, 2)]


def test_fixed_point_raises_past_the_limit():
    with pytest.raises(PassError, match="pass peel-one did not reach a fixed point in 3 iterations"):
        FixedPoint(_PeelOne(), max_iterations=3).run(hlo_tools.parse(SRC))
    with pytest.raises(PassError, match="pass flipper did not reach a fixed point in 25 iterations"):
        FixedPoint(Flipper()).run(hlo_tools.parse(SRC))


def test_the_registry_is_the_table_it_was():
    assert available_passes() == sorted(BEFORE)
    assert {name: f"{cls.__module__}.{cls.__qualname__}" for name, cls in PASSES.items()} == BEFORE
    assert all(cls.name == name and issubclass(cls, Pass) for name, cls in PASSES.items())
    assert type(get_pass("dce")) is PASSES["dce"]
    assert get_pass("entry-layout-assignment", parameter_layouts=((0, (0, 1)),)).parameter_layouts == ((0, (0, 1)),)
    with pytest.raises(KeyError, match="unknown pass 'nope'; available: broadcast-of-reshape, cache-update-in-place, "
                       "call-inliner, convert-after-transpose, cse, dce, "):
        get_pass("nope")
    with pytest.raises(KeyError, match="unknown pass 'nope'"):
        parse_pipeline("dce, nope")



def test_an_installed_package_reaches_the_cli_through_its_entry_point(tmp_path, monkeypatch):
    """A package that lists a pass under ``hlo_pass_lab.passes`` (a real dist-info
    folder on sys.path, as pip writes one) is found by name, by get_pass and by
    ``hlo opt --passes`` in a fresh process."""
    pkg = tmp_path / "site"
    (pkg / "my_passes.py").parent.mkdir()
    (pkg / "my_passes.py").write_text(
        "from dataclasses import dataclass\nfrom passes import Pass\n\n\n@dataclass(frozen=True)\n"
        "class Nothing(Pass):\n    name = 'do-nothing'\n\n    def run(self, module):\n        return False\n")
    info = pkg / "my_passes-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: my-passes\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[hlo_pass_lab.passes]\ndo-nothing = my_passes:Nothing\nbroken = my_passes:Gone\n")
    monkeypatch.syspath_prepend(str(pkg))
    assert "do-nothing" in available_passes()
    assert type(get_pass("do-nothing")).__name__ == "Nothing"
    with pytest.raises(KeyError, match="pass 'broken' from my_passes:Gone .* does not load: AttributeError"):
        get_pass("broken")
    module = tmp_path / "m.hlo"
    module.write_text(SRC)
    r = subprocess.run([sys.executable, "-m", "hlo_lab.cli", "opt", str(module), "--passes", "dce,do-nothing"],
                       capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(pkg)}, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "do-nothing" in r.stderr and r.stdout.startswith("HloModule m")  # the pass table, then the module


def test_a_pass_name_cannot_move_its_dump_out_of_the_folder(tmp_path):
    """--dump-dir names each file after the pass: a user's pass named "../../evil"
    writes 01.evil.hlo inside the folder (issue 39: names from user input)."""
    evil = PassManager(parse_pipeline("dce"), name="../../evil")
    dump = tmp_path / "d"
    PassManager([evil], dump_dir=dump).run_with_report(_real_module())
    assert sorted(p.name for p in dump.iterdir()) == ["00.input.hlo", "01.evil.hlo"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d"]
