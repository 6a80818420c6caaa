"""What the measuring commands say, on real corpus modules and real XLA on the CPU:
``hlo bench`` picks its mode from what the passes are and says so, a speedup
whose p10-p90 range spans 1.0 reads as within noise, every command's ``--json``
parses, ``| head -1`` never prints a traceback, and the tables fit 80 columns."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

import corpus
from hlo_lab.cli import main
from tests.conftest import ROOT, run_hlo
from tests.test_parser_errors import GOOD
from xla_bridge.display import clean_cost, speedup_label, speedup_verdict

from hlo_analysis.units import fmt_seconds
TRAIN = "llama3-tiny-train-f32"


@pytest.fixture(scope="module")
def train(tmp_path_factory) -> str:
    """A real jax train step (before XLA's optimizations), as a file."""
    entry = next(e for e in corpus.load() if e.name == TRAIN)
    path = tmp_path_factory.mktemp("train") / "train.hlo"
    path.write_text(entry.text("before_optimizations"))
    return str(path)


@pytest.fixture(scope="module")
def good(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("good") / "good.hlo"
    path.write_text(GOOD)
    return str(path)


@pytest.fixture(scope="module")
def cleanup_bench(train, tmp_path_factory):
    """``hlo bench TRAIN --passes dce,cse,simplify`` recorded into a fresh database."""
    db = tmp_path_factory.mktemp("db") / "results.db"
    r = run_hlo("bench", train, "--passes", "dce,cse,simplify", "--reps", "40", "--db", db)
    return r, str(db)


def test_bench_cleanup_passes_run_stock_on_both_sides_within_noise(cleanup_bench):
    r, _ = cleanup_bench
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith("mode: stock vs stock on the module after dce,cse,simplify (no fusion pass")
    assert any(line.startswith("B jit_train_step (stock)") for line in lines), r.stdout
    row = next(line for line in lines if line.startswith("speedup A/B"))
    median, p10, p90 = (float(x.rstrip("x")) for x in row.split()[2:5])
    # Loosely: the same XLA pipeline on both sides of a cleanup is ~1.0 on a shared 2-core machine.
    assert p10 <= 1.15 and p90 >= 0.87, row
    assert 0.6 < median < 1.6, row
    if p10 <= 1.0 <= p90:
        assert "Within noise: the p10-p90 range spans 1.0." in lines


def test_bench_fusion_passes_go_through_the_hook(train):
    r = run_hlo("bench", train, "--passes", "producer-consumer-fusion,dce", "--reps", "5", "--warmup", "1",
                "--no-record", "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["mode"] == "stock vs as-written + passes at pre-scheduler"
    assert "fusion pass" in d["mode_why"]
    assert d["pipeline_a"] == "stock" and d["pipeline_b"] == "as-written"
    assert d["within_noise"] == (d["speedup_p10"] <= 1.0 <= d["speedup_p90"])


def test_bench_explicit_pipeline_b_wins_and_vs_stock_diffs(train):
    r = run_hlo("bench", train, "--passes", "dce,cse,simplify", "--pipeline-b", "as-written", "--vs-stock",
                "--reps", "3", "--warmup", "1", "--no-record", "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["pipeline_b"] == "as-written" and d["mode_why"] == "--pipeline-b"
    vs = d["vs_stock"]
    # As written (XLA's fusion passes off), ours is not stock's fused module: the diff says so.
    assert not vs["already_in_stock"]
    assert vs["opcode_deltas"] and vs["ours_instructions"] != vs["stock_instructions"], vs
    assert f"stock's {vs['stock_instructions']}" in vs["summary"]
    assert vs["summary"].startswith("vs stock: ours ")


def test_bench_vs_stock_says_when_stock_already_does_it(good):
    """dce on a module with nothing dead: XLA's stock result is the same either way."""
    r = run_hlo("bench", good, "--passes", "dce", "--vs-stock", "--reps", "3", "--warmup", "1", "--no-record")
    assert r.returncode == 0, r.stderr
    assert "stock XLA already does what the passes do" in r.stdout, r.stdout


def test_speedup_verdict_and_label():
    assert speedup_verdict(0.65, 2.3).startswith("Within noise")
    assert speedup_verdict(1.01, 1.2).startswith("Faster")
    assert speedup_verdict(0.7, 0.99).startswith("Slower")
    assert speedup_label(1.1, 0.65, 2.3).endswith("within noise")
    assert "noise" not in speedup_label(1.1, 1.05, 1.2)


def test_times_scale_their_unit():
    assert fmt_seconds(6.14e-10) == "614 ps"
    assert fmt_seconds(2.84e-7) == "284 ns"
    assert fmt_seconds(3.39e-6) == "3.39 us"
    assert fmt_seconds(0.0171) == "17.1 ms"
    assert fmt_seconds(2.5) == "2.5 s"


def test_clean_cost_names_xla_keys():
    raw = {"flops": 10.0, "bytes accessed": 30.0, "bytes accessed4{}": 5.0, "utilization10{}": 1.0,
           "bytes accessed2{1}": 3.0, "bytes accessedout{}": 7.0, "optimal_seconds": 1e-6}
    c = clean_cost(raw)
    assert c["bytes_accessed"] == 30.0 and c["optimal_seconds"] == 1e-6
    assert list(c["operands"]) == ["2{1}", "4", "10"]
    assert c["operands"]["4"] == {"bytes_accessed": 5.0}
    assert c["outputs"] == {"root": {"bytes_accessed": 7.0}}
    assert not any("{" in k or " " in k for k in c)


def test_compile_json_has_clean_keys(train):
    r = run_hlo("compile", train, "--json")
    assert r.returncode == 0, r.stderr
    cost = json.loads(r.stdout)["cost"]
    assert cost["flops"] > 0 and cost["bytes_accessed"] > 0
    assert not any("{" in k or " " in k for k in cost)
    assert all(not any("{" in k for k in v) for v in cost["operands"].values())


#: Each command with --json, in-process: {TRAIN} a corpus train step, {GOOD} a tiny module.
JSON_COMMANDS = {
    "check": ["check", "{GOOD}", "{TRAIN}", "--json"],
    "compile": ["compile", "{GOOD}", "--json"],
    "run": ["run", "{GOOD}", "--json"],
    "compare": ["compare", "{GOOD}", "{GOOD}", "--json"],
    "bench": ["bench", "{GOOD}", "--passes", "dce", "--reps", "3", "--warmup", "1", "--no-record", "--json"],
    "opt": ["opt", "{GOOD}", "--passes", "dce,cse", "--json"],
    "opt --list": ["opt", "--list", "--json"],
    "stats": ["stats", "{GOOD}", "--json"],
    "corpus list": ["corpus", "list", "--json"],
    "history": ["history", "--db", "{DB}", "--json"],
    "analyze": ["analyze", "{GOOD}", "--json"],
}


@pytest.mark.parametrize("name", sorted(JSON_COMMANDS))
def test_json_output_parses(name, train, good, tmp_path, capsys):
    argv = [a.format(TRAIN=train, GOOD=good, DB=tmp_path / "none.db") for a in JSON_COMMANDS[name]]
    status = main(argv)
    out = capsys.readouterr().out
    assert status == 0, out
    data = json.loads(out)  # the whole of stdout is one JSON document
    assert data is not None or name == "history"
    if name == "check":
        assert [d["ok"] for d in data] == [True, True] and data[1]["instructions"] > 1000
    if name == "bench":
        assert data["mode_why"].startswith("no fusion pass") and data["a"]["median_us"] > 0
    if name == "run":
        assert data["outputs"] and data["outputs"][0]["dtype"] == "float32"
    if name == "compare":
        assert data["verdict"] == "exact" and data["ok"] is True


@pytest.mark.parametrize("argv", [
    ["opt", "{TRAIN}", "--passes", "dce"],
    ["opt", "{TRAIN}", "--passes", "dce", "--json"],
    ["compile", "{TRAIN}", "--json"],
    ["check", "{TRAIN}", "{TRAIN}", "{TRAIN}", "--json"],
    ["corpus", "list"],
    ["opt", "--list"],
], ids=lambda a: " ".join(a[:2]))
def test_head_never_tracebacks(argv, train):
    """Through a real shell pipe whose reader has gone after one line."""
    cmd = " ".join([sys.executable, "-m", "hlo_lab.cli", *(a.format(TRAIN=train) for a in argv)]) + " | head -1"
    r = subprocess.run(["bash", "-c", "set -o pipefail; " + cmd], capture_output=True, text=True, cwd=ROOT,
                       env=dict(os.environ), timeout=300)
    assert "Traceback" not in r.stderr, r.stderr
    assert r.stderr.strip() == "" or "BrokenPipe" not in r.stderr, r.stderr
    assert r.stdout.count("\n") == 1 and r.stdout.strip()
    assert r.returncode in (0, 141), (r.returncode, r.stderr)


def _fits(text: str, width: int = 80) -> None:
    lines = text.splitlines()
    assert lines and all(len(line) <= width for line in lines), [line for line in lines if len(line) > width]


def test_history_at_80_columns(cleanup_bench, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    _, db = cleanup_bench
    r = run_hlo("history", "--db", db)
    assert r.returncode == 0, r.stderr
    _fits(r.stdout)
    header, row = r.stdout.splitlines()[:2]
    assert header.split() == ["id", "module", "passes", "B", "pipeline", "A", "B", "speedup", "outputs"]
    assert row.split()[1] == "jit_train_step" and row.split()[3] == "stock"
    assert re.search(r"\d+(\.\d+)? (ns|us|ms|s) +\d+(\.\d+)? (ns|us|ms|s) +\d\.\d{3}x", row), row


def test_analyze_at_80_columns(monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    path = next(e for e in corpus.load() if e.name == TRAIN).path("gpu_h100_after_optimizations")
    r = run_hlo("analyze", path, "--top", "5")
    assert r.returncode == 0, r.stderr
    _fits(r.stdout)
    assert "{'" not in r.stdout, r.stdout  # bounds as words, not a Python dict
    assert re.search(r"^\d+ kernels \w+-bound", r.stdout, re.M), r.stdout
    assert "device model h100 (from the file's stage)" in r.stdout, r.stdout
    assert not re.search(r"\b0\.0\d* us\b", r.stdout), r.stdout  # 284 ns, not 0.000284 us
    assert "┃ kind" in r.stdout and "bytes saved ┃ time saved" in r.stdout
    rows = [line for line in r.stdout.splitlines() if line.startswith("│ producer") or line.startswith("│ sibling")]
    assert len(rows) == 5, r.stdout  # one line per opportunity: nothing wrapped
