"""Real XLA dumps, made during the test by the jaxlib under test (issue 15):
`hlo scan` reads text and proto dumps and agrees with `hlo corpus list` on the
module count, skips a dump's side files, and says so when there is nothing;
`hlo passes-dump` walks one module's per-pass dumps in pipeline order;
`hlo fusion-log` prints XLA:GPU's priority-fusion log."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

import corpus
from hlo_lab import pass_dumps
from hlo_lab.cli import main as hlo_main


from tests.dump_model import gpu_flags, make_dump  # noqa: E402



@pytest.fixture(scope="module")
def pass_dump(tmp_path_factory) -> Path:
    """Text dumps with every pass (XLA:CPU, and XLA:GPU deviceless where it can run)."""
    return make_dump(tmp_path_factory.mktemp("per_pass"), "--per-pass", *gpu_flags())


@pytest.fixture(scope="module")
def proto_dump(tmp_path_factory) -> Path:
    """What --xla_dump_hlo_as_proto alone writes: .hlo.pb modules, no text modules."""
    return make_dump(tmp_path_factory.mktemp("proto"), "--proto", "--no-text", *gpu_flags())


# -- scan ---------------------------------------------------------------------------------

@pytest.mark.parametrize("which", ["text", "proto"])
def test_scan_and_corpus_list_agree_on_the_module_count(which, pass_dump, proto_dump, tmp_path, capsys):
    folder = pass_dump if which == "text" else proto_dump
    if which == "proto":
        assert not any(p.name.endswith(".txt") and corpus.dump.is_module_file(p) for p in folder.iterdir())
    listed = corpus.from_dump_dir(folder)
    assert hlo_main(["corpus", "list", str(folder)]) == 0
    assert f"dump: {len(listed)} modules" in capsys.readouterr().out
    assert hlo_main(["scan", str(folder), "-o", str(tmp_path / "rep"), "-q", "-j", "2"]) == 0
    out = capsys.readouterr().out
    report = json.loads((tmp_path / "rep" / "report.json").read_text())
    assert report["errors"] == [] and report["status"] == "complete" and report["kind"] == "dump"
    assert report["modules_found"] == report["modules_analysed"] == len(listed) > 1
    assert out.startswith(f"{len(listed)} modules ({report['modules_scanned']} files), 0 errors")
    # before and after optimization of each module, nothing else (no pass dumps, no side files)
    stages = {m["label"].split("/", 1)[1] for m in report["modules"]}
    assert "before_optimizations" in stages and stages <= {"before_optimizations", "cpu_after_optimizations",
                                                          "sm_9.0a_gpu_after_optimizations"}
    assert all(m["path"].endswith(".hlo.pb" if which == "proto" else ".txt") for m in report["modules"])


def test_scan_reads_the_stablehlo_a_dump_holds(pass_dump, tmp_path):
    """jax writes each jitted function's StableHLO as ``module_<id>.<name>/module.mlir``."""
    from hlo_lab import scan

    folder = tmp_path / "mlir"
    folder.mkdir()
    mlirs = sorted(pass_dump.glob("module_*/module.mlir"))
    assert mlirs
    for p in mlirs:
        (folder / f"{p.parent.name}.mlir").write_bytes(p.read_bytes())
    r = scan.scan(folder, tmp_path / "rep", jobs=2, progress=False, cache=False)
    assert r["errors"] == [] and r["modules_scanned"] == len(mlirs)
    assert any(m["instructions"] > 100 for m in r["modules"])  # the train step, converted by XLA and analysed


def test_a_dumps_side_files_are_not_modules(pass_dump, proto_dump):
    side = [p for d in (pass_dump, proto_dump) for p in d.iterdir()
            if re.search(r"buffer-assignment|live-range|memory-usage-report|debug_options|thunk_|autotune_results"
                         r"|gpu_target_config|config\.pbtxt|\.o$|priority_fusion_dump", p.name)]
    assert len(side) > 20
    assert [p.name for p in side if corpus.dump.is_module_file(p)] == []


def test_a_folder_with_no_modules_fails_and_says_so(pass_dump, tmp_path, capsys):
    folder = tmp_path / "side_files_only"
    folder.mkdir()
    for p in pass_dump.iterdir():
        if p.is_file() and not corpus.dump.is_module_file(p):
            (folder / p.name).write_bytes(p.read_bytes())
    assert hlo_main(["scan", str(folder), "-o", str(tmp_path / "rep"), "-q"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"hlo scan: no module files in {folder}") and len(err.splitlines()) == 1


# -- passes-dump ----------------------------------------------------------------------------

def test_walk_is_in_pipeline_order_and_counts_match_each_file(pass_dump):
    import hlo_tools
    from hlo_tools.stats import module_stats

    m = pass_dumps.find_module(pass_dump, "jit_train_step")
    w = pass_dumps.walk(m)
    assert [s.error for s in w.steps if s.error] == []  # every dump parses (%x#N operands included)
    seqs = [s.seq for s in w.steps if s.seq is not None]
    assert seqs == sorted(seqs) and len(seqs) == len(m.passes) > 30
    assert w.steps[0].pass_name == "before_optimizations" and w.steps[-1].pass_name == "cpu_after_optimizations"
    for s in w.steps[::7]:
        st = module_stats(hlo_tools.load(s.path))
        assert (s.instructions, s.fusions, s.computations) == (st.instructions, st.fusions, st.computations)
    fusion = w.steps[w.select("fusion")[0]]
    before = w.previous(w.steps.index(fusion))
    assert fusion.fusions > before.fusions and fusion.pipeline == "HLO_passes_after_layout_assignment"


def _fused_name(w: pass_dumps.Walk) -> tuple[str, int]:
    """A multiply of the module before XLA:CPU's fusion pass that the pass fused away."""
    import hlo_tools

    k = w.select("fusion")[0]
    before, after = (hlo_tools.load(s.path) for s in (w.previous(k), w.steps[k]))
    gone = {i.name for i in before.instructions() if i.opcode_text == "multiply"} - {i.name for i in after.instructions()}
    return sorted(gone)[0], k


def test_find_names_the_pass_where_an_instruction_disappears(pass_dump, capsys):
    m = pass_dumps.find_module(pass_dump, "jit_train_step")
    name, k = _fused_name(pass_dumps.walk(m))
    w = pass_dumps.walk(m, find=[name, "no_such_instruction"])
    changes = pass_dumps.first_changes(w, name)
    assert changes[0][0] == 0 and changes[0][1] is None  # there from the start
    assert (k, changes[-1][1], None) == changes[-1]  # gone in the fusion pass
    assert pass_dumps.first_changes(w, "no_such_instruction") == []

    assert hlo_main(["passes-dump", str(pass_dump), "--module", str(m.module_id), "--find", name,
                     "--find", "no_such_instruction"]) == 0
    out = capsys.readouterr().out
    assert f"%{name}: present from the start" in out
    assert re.search(rf"%{re.escape(name)}: disappears in {w.steps[k].seq:04d} HLO_passes_after_layout_assignment/fusion", out)
    assert "%no_such_instruction: in none of the" in out


def test_diff_on_request_and_json(pass_dump, capsys):
    m = pass_dumps.find_module(pass_dump, "jit_train_step")
    assert hlo_main(["passes-dump", str(pass_dump), "-m", "jit_train_step", "--diff", "fusion"]) == 0
    out = capsys.readouterr().out
    assert "HLO_passes_after_layout_assignment/fusion changed (against" in out
    assert re.search(r"fused into \d+ fusions", out) and "opcode counts outside fusion bodies" in out

    assert hlo_main(["passes-dump", str(pass_dump), "-m", "jit_train_step", "--json", "--diff", "fusion"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["module"] == {"id": m.module_id, "name": "jit_train_step"}
    assert len(data["steps"]) == len(m.passes) + 2
    [d] = data["diffs"]
    assert d["counts"]["fused"] > 0 and d["step"].endswith("/fusion")
    fusion_step = next(s for s in data["steps"] if s["pass"] == "fusion")
    assert fusion_step["opcode_delta"].get("fusion", 0) > 0


def test_passes_dump_errors_and_listing(pass_dump, tmp_path, capsys):
    assert hlo_main(["passes-dump", str(pass_dump)]) == 0  # several modules: a listing to choose from
    out = capsys.readouterr().out
    assert "modules with pass dumps" in out and "jit_train_step" in out
    assert hlo_main(["passes-dump", str(pass_dump), "-m", "nosuch"]) == 2
    assert "no module 'nosuch'" in capsys.readouterr().err
    assert hlo_main(["passes-dump", str(pass_dump), "-m", "jit_train_step", "--diff", "no-such-pass"]) == 2
    err = capsys.readouterr().err
    assert "no pass dump 'no-such-pass'" in err and "algsimp" in err
    assert hlo_main(["passes-dump", str(tmp_path / "missing")]) == 2
    assert len(capsys.readouterr().err.splitlines()) == 1


# -- fusion-log ------------------------------------------------------------------------------

def test_fusion_log_of_a_deviceless_gpu_dump(pass_dump, capsys):
    from hlo_lab.measured import xla_fusion_log as fl

    if "--gpu" not in gpu_flags():
        pytest.skip("no deviceless XLA:GPU here (CUDA plugin or H100 target missing)")
    [(label, path)] = fl.dump_logs(str(pass_dump))
    log = fl.parse_dump(Path(path).read_text(), module_name=label)
    sm = fl.summary(log)
    assert sm["fuse"] > 0 and sm["steps"] == sm["fuse"] + sm["price"] + sm["refuse"]
    assert hlo_main(["fusion-log", str(pass_dump), "--limit", "0"]) == 0
    out = capsys.readouterr().out
    assert f"{label}: priority fusion, {sm['steps']} steps: {sm['fuse']} fusions" in out
    producer, consumer = log.fused_pairs()[0]
    assert re.search(rf"fuse\s+│ {re.escape(producer)} -> {re.escape(consumer)}", out)
    assert hlo_main(["fusion-log", str(pass_dump), "--json", "--kind", "fuse"]) == 0
    [entry] = json.loads(capsys.readouterr().out)
    assert [(s["producer"], s["consumer"]) for s in entry["steps"]] == log.fused_pairs()
    base = fl.base_name(producer)
    assert hlo_main(["fusion-log", str(pass_dump), "--json", "--producer", base]) == 0
    [entry] = json.loads(capsys.readouterr().out)
    assert entry["steps"] and all(producer in (s["producer"], s.get("consumer")) or base in json.dumps(s)
                                  for s in entry["steps"])


def test_fusion_log_says_when_there_is_none(proto_dump, capsys):
    assert hlo_main(["fusion-log", str(proto_dump)]) == 2
    err = capsys.readouterr().err
    assert "no *priority_fusion_dump.txt" in err and len(err.splitlines()) == 1
