"""``hlo upstream``: a validated rewrite becomes a bundle a reviewer can read.
Real corpus module, real XLA on the CPU, the real ``hlo`` command."""

from __future__ import annotations

import functools
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

import corpus
from hlo_tools import parse
from hlo_tools.testing import run_filecheck
from passes import PassManager, get_pass
from tests.conftest import run_hlo

SWAP = Path(__file__).parent / "data" / "passes" / "swap_operands.py"
ROOT = Path(__file__).resolve().parent.parent
hlo = functools.partial(run_hlo, timeout=300)


@pytest.fixture(scope="module")
def decode(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("upstream") / "decode.hlo"
    path.write_text(next(e for e in corpus.load() if e.name == "llama3-tiny-decode-f32").text("before_optimizations"))
    return path


def test_a_fusion_rewrite_becomes_a_bundle_whose_test_checks_the_rewrite(decode, tmp_path):
    out = tmp_path / "bundle"
    r = hlo("upstream", decode, "--passes", "producer-consumer-fusion,dce", "-o", out, "--reps", "10", "--json")
    assert r.returncode == 0, r.stderr[-2000:]
    b = json.loads(r.stdout)
    assert b["outputs"] in ("exact", "close") and b["reduced_outputs"] in ("exact", "close")
    assert b["speedup_p10"] <= b["speedup"] <= b["speedup_p90"] and b["stock_us"] > 0 and b["ours_us"] > 0
    assert b["route"].startswith("as-written + passes at")
    assert b["reduced_instructions"] < 20 < b["original_instructions"]
    files = {p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()}
    assert {"README.md", "before.hlo", "after.hlo", "measured.md", "bundle.json", "producer_consumer_fusion_dce_test.hlo",
            "source/producer_consumer.py", "source/dce.py"} <= files
    # the test as a reviewer runs it: the passes on the file's module, FileCheck on what they print
    test = (out / "producer_consumer_fusion_dce_test.hlo").read_text()
    assert test.startswith("// RUN: hlo opt %s --passes=producer-consumer-fusion,dce | filecheck %s")
    checks = "\n".join(line for line in test.splitlines() if "CHECK" in line)
    assert "CHECK:" in checks and "fusion(" in checks
    module = parse(test)
    assert module.to_text() == parse((out / "before.hlo").read_text()).to_text()
    PassManager([get_pass("producer-consumer-fusion"), get_pass("dce")]).run(module)
    assert run_filecheck(module.to_text(), checks)
    assert not run_filecheck((out / "before.hlo").read_text(), checks)  # it would catch the pass doing nothing
    assert module.to_text() == (out / "after.hlo").read_text()
    table = (out / "measured.md").read_text()
    assert "| jit_decode (as given) | 457 |" in table and "reduced (before.hlo)" in table
    assert "producer-consumer-fusion" in (out / "README.md").read_text()


def test_a_rewrite_whose_outputs_differ_is_refused(decode, tmp_path):
    r = hlo("upstream", decode, "--load", SWAP, "--passes", "swap-operands", "-o", tmp_path / "b", "--reps", "5", "-q")
    assert r.returncode == 1
    assert r.stderr.strip().splitlines() == [
        "hlo upstream: swap-operands: outputs differ from stock XLA's (mismatch); "
        "find the culprit with hlo bisect --passes swap-operands"]
    assert not (tmp_path / "b").exists() or not any((tmp_path / "b").iterdir())


def test_a_rewrite_that_changes_nothing_is_refused(decode, tmp_path):
    r = hlo("upstream", decode, "--passes", "dce", "-o", tmp_path / "b", "-q")
    assert r.returncode == 1
    assert "changes nothing in jit_decode" in r.stderr


def test_the_bundle_of_a_users_pass_runs_its_own_run_line(decode, tmp_path, monkeypatch):
    """A user's pass (--load): the bundle holds its source, and the test's RUN line,
    run as written from the bundle's folder (hlo opt | filecheck), passes."""
    out = tmp_path / "bundle"
    r = hlo("upstream", decode, "--load", SWAP, "--passes", "commute-operands", "-o", out, "--reps", "5", "-q")
    assert r.returncode == 0, r.stderr[-2000:]
    test = out / "commute_operands_test.hlo"
    run = test.read_text().splitlines()[0]
    assert run == "// RUN: hlo opt %s --load source/swap_operands.py --passes=commute-operands | filecheck %s"
    assert (out / "source" / "swap_operands.py").read_text() == SWAP.read_text()
    checks = [line for line in test.read_text().splitlines() if "CHECK:" in line]
    assert checks and all(re.search(r"(add|multiply)\(%\S+, %\S+\)$", c) for c in checks), checks
    hlo_cmd = f"{shlex.quote(sys.executable)} -m hlo_lab.cli"
    filecheck = shlex.quote(str(Path(sys.executable).parent / "filecheck"))
    command = run.removeprefix("// RUN: ").replace("%s", test.name).replace("hlo opt", f"{hlo_cmd} opt", 1)
    command = command.replace("| filecheck", f"| {filecheck}")
    done = subprocess.run(command, shell=True, cwd=out, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr[-2000:]


def test_check_lines_of_tuple_shapes_and_literals_match_the_rewrite():
    """A new instruction with a tuple shape (a train step's ROOT tuple of six) or a
    literal operand: its CHECK line keeps the shape's parentheses whole (it read
    the shape as the operand list and matched nothing on MaxText's train step)."""
    from hlo_tools.testing import check_lines

    before = parse("""HloModule m

ENTRY e {
  a = f32[2]{0} parameter(0)
  b = f32[2]{0} parameter(1)
  ROOT t = (f32[2]{0}, f32[2]{0}) tuple(a, b)
}
""")
    after = parse("""HloModule m

ENTRY e {
  a = f32[2]{0} parameter(0)
  b = f32[2]{0} parameter(1)
  n = f32[2]{0} negate(a)
  c = f32[2]{0} constant({1, 2})
  i = (f32[2]{0}, f32[2]{0}) tuple(n, b)
  ROOT t2 = ((f32[2]{0}, f32[2]{0}), f32[2]{0}) tuple(i, c)
}
""")
    checks = check_lines(before, after)
    assert "CHECK: = (f32[2]{0}, f32[2]{0}) tuple(%{{[^ ,)]+}}, %b)" in checks
    assert "CHECK: ROOT {{.*}} = ((f32[2]{0}, f32[2]{0}), f32[2]{0}) tuple(%{{[^ ,)]+}}, %{{[^ ,)]+}})" in checks
    assert "CHECK: = f32[2]{0} constant({1, 2})" in checks
    assert run_filecheck(after.to_text(), checks)
    assert not run_filecheck(before.to_text(), checks)


def test_a_rewrite_is_judged_against_a_moved_baseline_as_bench_judges_it(tmp_path):
    """A bf16 train step: XLA's fusion off (the hook's as-written base) already
    moves stock's outputs by bf16 rounding, so the passes are judged against that
    baseline, as ``hlo bench`` does, and the bundle says so; before, upstream
    refused MaxText's and Flax's steps as 'outputs differ'."""
    out = tmp_path / "bundle"
    r = hlo("upstream", ROOT / "tests" / "data" / "bf16_scan_train_step.hlo", "--passes", "producer-consumer-fusion,dce",
            "-o", out, "--reps", "3", "--seconds", "20", "--json")
    assert r.returncode == 0, r.stderr[-2000:]
    b = json.loads(r.stdout)
    assert b["outputs"].startswith(("close (baseline moved", "exact (baseline moved")), b["outputs"]
    assert "baseline moved" in (out / "README.md").read_text()
