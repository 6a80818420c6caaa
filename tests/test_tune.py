"""``hlo tune``: decision sets replay exactly, forced edges decide, the search
runs real XLA on a corpus module, resumes after a kill without losing a
measured candidate, and writes a pass that ``hlo bench`` replays."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import time

import pytest

import corpus
from hlo_analysis.rank_stats import kendall_tau
from hlo_lab.cli import main
from hlo_tools import HloOpcode, parse
from passes import PassManager
from passes.fusion.decisions import DecisionFusion, FusionDecisions, save
from passes.registry import BEST, parse_pipeline
from passes.fusion.producer_consumer import ProducerConsumerFusion
from passes.fusion.profitability import ForcedEdges
from passes.registry import get_pass
from tests.conftest import ROOT, run_hlo
from xla_bridge.jax_internals import cuda_plugin_available

MODULE = "gemma2-tiny-decode-f32"


def _module_file() -> str:
    return str(next(corpus.load(MODULE)).path("before_optimizations"))


def test_kendall_tau():
    assert kendall_tau([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert kendall_tau([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    # 6 pairs: 5 concordant, 1 discordant (3 and 4 swapped)
    assert kendall_tau([1, 2, 3, 4], [1, 2, 4, 3]) == pytest.approx(4 / 6)
    assert kendall_tau([1, 1, 1], [1, 2, 3]) != kendall_tau([1, 1, 1], [1, 2, 3])  # nan: a constant list


CHAIN = """HloModule chain, entry_computation_layout={(f32[8]{0})->(f32[8]{0}, f32[8]{0})}

ENTRY %e (p: f32[8]) -> (f32[8], f32[8]) {
  %p = f32[8]{0} parameter(0)
  %a = f32[8]{0} multiply(%p, %p)
  %b = f32[8]{0} exponential(%a)
  %c = f32[8]{0} negate(%a)
  %d = f32[8]{0} add(%b, %p)
  ROOT %t = (f32[8]{0}, f32[8]{0}) tuple(%d, %c)
}
"""


def _fusion_bodies(m) -> list[set[str]]:
    return [{j.opcode.value for j in i.fused_computation if j.opcode is not HloOpcode.PARAMETER}
            for i in m.entry if i.opcode is HloOpcode.FUSION]


def test_forced_edges_decide_before_the_pass_rule():
    default = parse(CHAIN)
    ProducerConsumerFusion().run(default)
    # XLA:CPU's rule: the multiply has two users and is arithmetic, so it is not duplicated
    assert all("multiply" not in body for body in _fusion_bodies(default))
    forced = parse(CHAIN)
    ProducerConsumerFusion(decided=ForcedEdges({("a", "b"): True, ("a", "c"): True, ("b", "d"): False})).run(forced)
    bodies = _fusion_bodies(forced)
    assert sorted(sorted(b) for b in bodies) == [["exponential", "multiply"], ["multiply", "negate"]]
    assert forced.entry.root.operand(0).opcode is HloOpcode.ADD  # kept apart from the exponential


def test_decision_sets_round_trip_and_refuse_what_they_do_not_know(tmp_path):
    d = FusionDecisions(pipeline="best-no-sibling", max_operands=16, edges=[("x", "y", True), ("a", "b", False)])
    assert FusionDecisions.from_dict(json.loads(json.dumps(d.as_dict()))) == d
    assert d.key() == FusionDecisions.from_dict(d.as_dict()).key() != FusionDecisions().key()
    with pytest.raises(ValueError, match="unknown decision field"):
        FusionDecisions.from_dict({"pipelin": "best"})
    with pytest.raises(ValueError, match="unknown pipeline shape"):
        FusionDecisions.from_dict({"pipeline": "fastest"})
    path = tmp_path / "d.json"
    save(path, d, module="m")
    assert get_pass(f"replay:{path}") == DecisionFusion(d, None, str(path))
    with pytest.raises(KeyError, match="cannot read"):
        get_pass(f"replay:{tmp_path / 'missing.json'}")
    (tmp_path / "other.json").write_text('{"a": 1}')
    with pytest.raises(KeyError, match="not a decisions file"):
        get_pass(f"replay:{tmp_path / 'other.json'}")


@pytest.fixture(scope="module")
def prepared():
    from hlo_lab.tune import evaluate

    text = next(corpus.load(MODULE)).text("before_optimizations")
    return evaluate.prepare(text, "cpu", None)


def test_the_default_decision_set_is_best_and_replays_through_hlo_opt(prepared, tmp_path):
    from hlo_lab.tune.space import Space

    space = Space(prepared["seen"])
    proposal = space.price(FusionDecisions())
    best = parse(prepared["seen"])
    PassManager(parse_pipeline(BEST)).run(best)
    assert proposal.after_text == best.to_text()
    assert proposal.decided and proposal.predicted_us > 0
    # the replayable pass on the module XLA hands the hook gives the same module
    (tmp_path / "in.hlo").write_text(prepared["seen"])
    save(tmp_path / "d.json", proposal.decisions)
    assert main(["opt", str(tmp_path / "in.hlo"), "--passes", f"replay:{tmp_path / 'd.json'}",
                 "-o", str(tmp_path / "out.hlo")]) == 0
    assert (tmp_path / "out.hlo").read_text() == proposal.after_text


def test_stock_decisions_are_read_back_from_its_optimized_module(prepared):
    from hlo_lab.tune.space import Space, stock_decisions

    space = Space(prepared["seen"])
    decisions, share = stock_decisions(space.module, parse(prepared["stock_optimized"]))
    assert share >= 0.9  # every op our passes see is found in stock's fusions (measured: all of them)
    fused = [e for e in decisions.edges if e[2]]
    assert len(fused) > len(decisions.edges) / 2
    replayed = space.price(decisions)
    unfused = sum(1 for i in space.module.entry if i.opcode is HloOpcode.FUSION)
    assert replayed.kernels < unfused


def _rows(db) -> list[tuple]:
    conn = sqlite3.connect(db)
    try:
        return conn.execute("SELECT search, kind, fused_hash, speedup FROM tune_candidates ORDER BY id").fetchall()
    except sqlite3.OperationalError:  # the table is not there yet
        return []
    finally:
        conn.close()


def test_a_killed_tune_resumes_without_losing_a_measured_candidate(tmp_path):
    """The search is killed (SIGKILL) after it measured two candidates; run again,
    it replays them from the database without compiling them, finishes, runs
    random search at the same budget, and writes a pass ``hlo bench`` replays."""
    db, out = tmp_path / "r.db", tmp_path / "tuned.json"
    argv = [sys.executable, "-m", "hlo_lab.cli", "tune", _module_file(), "--budget", "4", "--reps", "5",
            "--final-reps", "9", "--workers", "1", "--db", str(db), "-o", str(out), "-q", "--json"]
    proc = subprocess.Popen(argv + ["--no-baseline"], cwd=ROOT, env=dict(os.environ), stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    deadline = time.time() + 300
    while time.time() < deadline and proc.poll() is None:
        if sum(r[1] == "candidate" for r in _rows(db)) >= 2:
            break
        time.sleep(0.2)
    assert proc.poll() is None, f"the first run ended before it could be killed: {proc.stderr.read().decode()[-2000:]}"
    proc.kill()
    proc.wait()
    before = [r for r in _rows(db) if r[1] == "candidate"]
    assert len(before) >= 2

    done = subprocess.run(argv, cwd=ROOT, env=dict(os.environ), capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout)
    after = [r for r in _rows(db) if r[1] == "candidate"]
    assert after[:len(before)] == before  # nothing measured was lost
    hill = [r for r in after if r[0] == before[0][0]]
    assert result["candidates"] == 4 == len(hill)
    assert result["compiles"] == 4 - len(before)  # what the killed run measured was not compiled again
    for key in ("stock_ms", "best_ms", "speedup", "outputs", "candidates", "random_best_speedup"):
        assert result[key] is not None, key
    assert result["outputs"] in ("exact", "close")
    assert result["random_candidates"] == 4 and "measured" in result["objective"]

    bench = run_hlo("bench", _module_file(), "--passes", f"replay:{out}", "--hook", "pre-scheduler", "--reps", "5",
                    "--no-record", "--json")
    assert bench.returncode == 0, bench.stderr
    assert json.loads(bench.stdout)["outputs"] in ("exact", "close")


@pytest.mark.skipif(not cuda_plugin_available(), reason="XLA:GPU without a GPU needs the CUDA plugin (make venv)")
def test_tune_for_a_gpu_target_ranks_by_the_roofline_and_says_so(tmp_path):
    done = run_hlo("tune", _module_file(), "--target", "h100", "--budget", "2", "--no-baseline", "--workers", "1",
                   "--db", tmp_path / "r.db", "-o", tmp_path / "g.json", "-q", "--json")
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout)
    assert "predicted" in result["objective"] and "without a GPU" in result["objective"]
    assert result["target"] == "h100" and result["backend"] == "gpu"
    assert result["speedup"] > 0 and result["candidates"] == 2
    assert json.loads((tmp_path / "g.json").read_text())["decisions"]["pipeline"].startswith("gpu-")


def test_two_identical_tunes_on_one_database_share_what_they_measure(tmp_path):
    """Two ``hlo tune`` runs started together on one database: each candidate is
    measured by one of them (a claim in the database), the other reads its row,
    so both see the same measurements and keep the same winner."""
    db = tmp_path / "r.db"
    argv = [sys.executable, "-m", "hlo_lab.cli", "tune", _module_file(), "--budget", "3", "--reps", "5",
            "--final-reps", "5", "--workers", "1", "--no-baseline", "--db", str(db), "-q", "--json"]
    procs = [subprocess.Popen(argv + ["-o", str(tmp_path / f"t{i}.json")], cwd=ROOT, env=dict(os.environ),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(2)]
    outs = [p.communicate(timeout=900) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err[-3000:]
    results = [json.loads(out) for out, _ in outs]
    measured = [r for r in _rows(db) if r[1] in ("candidate", "remeasure")]
    keys = [(r[1], r[2]) for r in measured]
    assert len(keys) == len(set(keys)), f"a candidate was measured twice: {keys}"
    assert sum(r["compiles"] for r in results) == sum(k == "candidate" for k, _ in keys)
    assert results[0]["candidates"] == results[1]["candidates"] == 3
    assert results[0]["best_decisions"] == results[1]["best_decisions"]
    conn = sqlite3.connect(db)
    try:
        assert conn.execute("SELECT COUNT(*) FROM tune_claims").fetchone()[0] == 0  # every claim released
    finally:
        conn.close()
