"""benchmark(), the results database and the CLI (no timing is asserted)."""

from __future__ import annotations

import sqlite3

import pytest


from hlo_tools import parse
from hlo_lab.cli import main
from xla_bridge import jax_internals
from xla_bridge.bench import benchmark, harness_overhead
from xla_bridge.examples import FUSION_KLOOP, UNFUSED
from xla_bridge.results import connect, history, record


def test_benchmark_interleaves_and_reports_spread():
    res = benchmark(parse(UNFUSED), parse(FUSION_KLOOP), reps=7, warmup=1, input_sets=2)
    assert res.verdict in ("exact", "close")
    assert len(res.a.samples_us) == len(res.b.samples_us) == 7
    assert res.a.p10_us <= res.a.median_us <= res.a.p90_us
    assert res.speedup_p10 <= res.speedup <= res.speedup_p90
    table = res.table()
    assert "speedup A/B" in table and "unfused (stock)" in table and "fusion_kloop (as-written)" in table


def test_benchmark_reports_a_wrong_rewrite():
    wrong = FUSION_KLOOP.replace("subtract(%my_fusion, %x)", "subtract(%x, %my_fusion)")
    assert benchmark(UNFUSED, wrong, reps=2, warmup=0).verdict == "mismatch"


def test_harness_overhead_is_measured():
    o = harness_overhead(reps=50)
    assert o["trivial_median_us"] > 0 and o["clock_pair_us"] >= 0


def test_results_rows_are_transactional_and_kept(tmp_path):
    db = tmp_path / "r.db"
    res = benchmark(UNFUSED, UNFUSED, reps=2, warmup=0)
    first = record(res, module_text=UNFUSED, passes="dce", db=db)
    # a failed insert (constraint violation) leaves the earlier row intact
    conn = connect(db)
    with pytest.raises(sqlite3.IntegrityError):
        with conn:
            conn.execute("INSERT INTO runs (id, created, module, module_hash, backend, device, pipeline_a) "
                         "VALUES (?, 'x', 'x', 'x', 'x', 'x', 'x')", (first,))
    conn.close()
    second = record(res, module_text=UNFUSED, db=db)
    rows = history(db)
    assert [r["id"] for r in rows] == [second, first]
    assert rows[1]["passes"] == "dce" and rows[1]["module"] == "unfused" and rows[1]["jax"]
    assert rows[0]["a_median_us"] > 0 and rows[0]["verdict"] in ("exact", "close")
    assert history(tmp_path / "missing.db") == []


@pytest.fixture
def files(tmp_path):
    a, b = tmp_path / "a.hlo", tmp_path / "b.hlo"
    a.write_text(UNFUSED)
    b.write_text(FUSION_KLOOP)
    wrong = tmp_path / "wrong.hlo"
    wrong.write_text(FUSION_KLOOP.replace("subtract(%my_fusion, %x)", "subtract(%x, %my_fusion)"))
    bad = tmp_path / "bad.hlo"
    bad.write_text("HloModule bad\nENTRY e {\n  p = f32[2] parameter(0)\n  ROOT r = f32[3] add(p, p)\n}\n")
    return tmp_path


def test_cli_compile_run(files, capsys):
    out = files / "opt.hlo"
    assert main(["compile", str(files / "b.hlo"), "--pipeline", "as-written", "--dump-optimized", str(out)]) == 0
    assert "as-written" in capsys.readouterr().out and "fusion(" in out.read_text()
    assert main(["run", str(files / "a.hlo")]) == 0
    assert "output 0: float32[32, 64]" in capsys.readouterr().out
    assert main(["compile", str(files / "bad.hlo")]) == 2
    # The verifier rejects it before XLA sees it, naming the file and the instruction.
    err = capsys.readouterr().err
    assert "bad.hlo" in err and "%r (add): result shape is f32[3], operands give f32[2]" in err


def test_cli_compare_exit_codes(files, capsys):
    assert main(["compare", str(files / "a.hlo"), str(files / "b.hlo"), "--pipeline-b", "as-written"]) == 0
    assert main(["compare", str(files / "b.hlo"), str(files / "wrong.hlo")]) == 1
    assert "mismatch" in capsys.readouterr().out
    assert main(["compare", str(files / "a.hlo"), str(files / "bad.hlo")]) == 2


def test_cli_bench_and_history(files, capsys):
    db = files / "r.db"
    assert main(["bench", str(files / "a.hlo"), "--against", str(files / "b.hlo"), "--reps", "3", "--warmup", "1",
                 "--db", str(db)]) == 0
    out = capsys.readouterr().out
    assert "speedup A/B" in out and "recorded as row 1" in out
    assert main(["history", "--db", str(db)]) == 0
    assert "unfused" in capsys.readouterr().out


def test_cli_bench_runs_fusion_passes_at_the_hook(files, capsys):
    if not jax_internals.hook_supported():
        pytest.skip("needs jax.extend.xla pipeline hooks")
    db = files / "h.db"
    assert main(["bench", str(files / "a.hlo"), "--passes", "producer-consumer-fusion,dce", "--hook", "pre-scheduler",
                 "--reps", "3", "--warmup", "1", "--db", str(db)]) == 0
    out = capsys.readouterr().out
    assert "speedup A/B" in out and ("outputs: exact" in out or "outputs: close" in out)
    assert main(["bench", str(files / "a.hlo"), "--hook", "pre-scheduler", "--no-record"]) == 2
    assert "--hook needs --passes" in capsys.readouterr().err


def test_history_only_reads(tmp_path):
    """Reading history never writes: a foreign SQLite file keeps its bytes."""
    db = tmp_path / "other.db"
    conn = sqlite3.connect(db)
    conn.execute("CREATE TABLE notes (x TEXT)")
    conn.commit()
    conn.close()
    before = db.read_bytes()
    assert history(db) == []
    assert db.read_bytes() == before
    assert not (tmp_path / "other.db-wal").exists()
