"""Modules of third-party frameworks kept in ``corpus/third_party`` (MaxText and
Hugging Face's Flax models, made by ``corpus/third_party/*_dump.sh`` and kept by
``bundle.py``): each names its framework and version, round-trips exactly as XLA
prints it, passes ``hlo check``; the sharded ones' collectives are counted as a
grep counts them; ``best`` keeps a Flax train step's outputs equal to stock's."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

import corpus
from hlo_analysis.collectives import counts, grep_counts, infer_mesh, inventory
from hlo_lab.cli import main
from hlo_tools import parse
from xla_bridge.fidelity import fidelity_problem
from tests.conftest import run_hlo

ROOT = Path(corpus.CORPUS_DIR) / "third_party"
ENTRIES = list(corpus.load(root=ROOT))
STAGES = [(e, s) for e in ENTRIES for s in e.stages]


def test_two_frameworks_with_their_versions():
    frameworks = {(e.meta["framework"], e.source_package, e.meta["source_package_version"]) for e in ENTRIES}
    assert {p for _, p, _ in frameworks} >= {"maxtext", "transformers"}, frameworks
    assert all(re.fullmatch(r"\d+(\.\d+)+", v) for _, _, v in frameworks)
    assert any(e.sharded for e in ENTRIES) and any(not e.sharded for e in ENTRIES)
    for e in ENTRIES:
        for stage in e.stages:
            assert e.verify(stage), (e.name, stage)
            assert "/tmp/" not in e.text(stage)  # the dump machine's paths are not kept


@pytest.mark.parametrize("entry, stage", STAGES, ids=[f"{e.name}:{s}" for e, s in STAGES])
def test_each_stage_round_trips_as_xla_prints_it(entry, stage):
    assert fidelity_problem(entry.text(stage), f"{entry.name}:{stage}") is None


def test_check_reads_every_file(tmp_path, capsys):
    assert main(["check", "-q", str(ROOT / "modules")]) == 0, capsys.readouterr().err


@pytest.mark.parametrize("entry", [e for e in ENTRIES if e.sharded], ids=lambda e: e.name)
def test_collectives_of_sharded_steps_equal_a_grep(entry):
    text = entry.text("cpu_after_optimizations")
    module = parse(text)
    mesh = infer_mesh(module)
    def split(m):  # the axes that split devices (MaxText names 12, 10 of them of size 1)
        return {a: n for a, n in zip(m.axes, m.shape) if n > 1}

    assert split(mesh) == dict(zip(entry.meta["mesh"]["axes"], entry.meta["mesh"]["shape"]))
    got = counts(inventory(module, mesh))
    kinds = "all-gather|all-reduce|reduce-scatter|all-to-all|collective-permute"
    grep: dict[str, int] = {}  # a plain grep, written apart from the module's own pattern
    for k in re.findall(rf"= \S.*? ({kinds})(-start)?\(", text):
        grep[k[0] + k[1]] = grep.get(k[0] + k[1], 0) + 1
    assert got and got == dict(sorted(grep.items())) == dict(sorted(grep_counts(text).items()))
    assert got == entry.meta["collectives"]["cpu_after_optimizations"]  # bundle.py's own count
    before = parse(entry.text("before_optimizations"))  # named shardings, no collective yet: the same mesh
    assert split(infer_mesh(before)) == split(mesh)


def test_best_keeps_a_flax_train_step_equal_to_stock(tmp_path):
    entry = next(e for e in ENTRIES if e.name == "hf-flax-llama-tiny-train-f32")
    path = tmp_path / "train.hlo"
    path.write_text(entry.text("before_optimizations"))
    done = run_hlo("bench", path, "--passes", "best", "--reps", "3", "--no-record", "--json", timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout)["outputs"] in ("exact", "close")


def test_a_module_xla_partitioned_says_why_it_cannot_run_here(tmp_path):
    """The fsdp=4 x tensor=2 train step after XLA's partitioning has per-device
    shapes and collectives over 8 devices: run, compare and divergence say so in
    one line (XLA's RET_CHECK on replica ids before)."""
    entry = next(e for e in ENTRIES if e.name == "maxtext-llama-tiny-train-fsdp4tp2")
    f = tmp_path / "after.hlo"
    f.write_text(entry.text("cpu_after_optimizations"))
    for argv in (["run", f, "-q"], ["compare", f, f, "-q"], ["divergence", f, f, "-q"]):
        r = run_hlo(*argv, timeout=300)
        assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr[-2000:]
        assert "partitioned this module over 8 devices" in r.stderr.strip().splitlines()[-1], r.stderr[-1000:]
