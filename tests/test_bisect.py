"""``hlo bisect``: the first pass, then the first decision in it, that makes a
module fail.  Real corpus modules, real XLA on the CPU; the broken passes are a
user's pass file with a known bug (tests/data/passes/swap_operands.py) and our
own fusion, which XLA:CPU aborts on when the pre-optimization module is fused
and compiled as written (docs/fusion_passes.md)."""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path

import pytest

import corpus
from hlo_lab.debug.bisect import bisect_passes, bisect_xla
from hlo_tools import HloOpcode, parse
from passes import PassManager, get_pass
from passes.fuel import fuel
from passes import registry
from passes.registry import load_passes
from tests.conftest import run_hlo

SWAP = Path(__file__).parent / "data" / "passes" / "swap_operands.py"
MODULE = "llama3-tiny-decode-f32"
hlo = functools.partial(run_hlo, timeout=300)


@pytest.fixture(scope="module")
def decode(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("bisect") / "decode.hlo"
    path.write_text(next(e for e in corpus.load() if e.name == MODULE).text("before_optimizations"))
    return path


def test_fuel_stops_a_pass_after_n_decisions(decode):
    module = parse(decode.read_text())
    PassManager([get_pass(n) for n in ("call-inliner", "simplify", "cse", "dce")]).run(module)
    with fuel() as unlimited:
        get_pass("producer-consumer-fusion").run(module.clone())
    assert len(unlimited.decisions) > 10 and unlimited.refused == 0
    assert all(d.startswith("fuse %") for d in unlimited.decisions)
    limited_module = module.clone()
    with fuel(3) as limited:
        get_pass("producer-consumer-fusion").run(limited_module)
    assert limited.decisions == unlimited.decisions[:3] and limited.refused > 0
    fused = sum(1 for i in limited_module.instructions() if i.opcode is HloOpcode.FUSION)
    assert 1 <= fused <= 3  # three fusion decisions make at most three fusions


@pytest.fixture
def user_passes(monkeypatch):
    """``load_passes`` here, undone afterwards: the registry's user table and the
    worker's file list are this test's only (the worker restarts when they change)."""
    monkeypatch.setattr(registry, "USER_PASSES", {})
    monkeypatch.setattr(registry, "USER_FILES", {})
    load_passes(SWAP)


def test_bisect_finds_the_pass_and_the_subtract_it_swapped(decode, user_passes):
    module = parse(decode.read_text())
    passes = [get_pass(n) for n in ("dce", "cse", "swap-operands", "simplify")]
    res = bisect_passes(module, passes)
    assert res.failure is not None and res.failure.kind == "mismatch"
    assert res.first_bad_pass == "swap-operands" and res.pass_index == 2
    swapped = re.fullmatch(r"swap the operands of %(\S+)", res.decision).group(1)
    assert {i.name: i for i in module.instructions()}[swapped].opcode is HloOpcode.SUBTRACT  # not one of the harmless add/multiply swaps
    # the decisions before it pass, the decision itself fails: the probes say so
    assert res.decisions > res.first_bad_decision >= 1
    fuelled = {p.what: p.failed for p in res.probes if "fuel=" in p.what}
    assert fuelled[f"dce,cse,swap-operands[fuel={res.first_bad_decision}]"] is True
    assert fuelled[f"dce,cse,swap-operands[fuel={res.first_bad_decision - 1}]"] is False
    # before/after differ by exactly that swap
    after = {i.name: i for i in res.after.instructions()}
    before = {i.name: i for i in res.before.instructions()}
    assert swapped in before and swapped not in after and swapped + ".swapped" in after
    assert [o.name for o in after[swapped + ".swapped"].operands] == [o.name for o in reversed(before[swapped].operands)]


def test_bisect_cli_loads_a_user_pass_and_writes_the_modules_around_the_decision(decode, tmp_path):
    out = tmp_path / "b"
    r = hlo("bisect", decode, "--load", SWAP, "--passes", "dce,cse,swap-operands,simplify", "-o", out)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "first_bad_pass=swap-operands" in r.stdout.splitlines()
    assert re.search(r"^first_bad_decision=\d+ of \d+: swap the operands of %sub", r.stdout, re.M), r.stdout
    assert "candidates compiled stock (no fusion pass)" in r.stderr
    report = json.loads((out / "bisect.json").read_text())
    assert report["first_bad_pass"] == "swap-operands" and report["failure"]["kind"] == "mismatch"
    assert parse((out / "before.hlo").read_text()).instruction_count == parse((out / "after.hlo").read_text()).instruction_count


def test_bisect_finds_the_fusion_that_makes_xla_abort(decode):
    r = hlo("bisect", decode, "--passes", "call-inliner,simplify,cse,dce,producer-consumer-fusion,dce", "--json")
    assert r.returncode == 0, r.stderr[-2000:]
    res = json.loads(r.stdout)
    assert res["failure"]["kind"] == "abort" and "Check failed" in res["failure"]["message"]
    assert res["first_bad_pass"] == "producer-consumer-fusion" and res["pass_index"] == 4
    assert res["pipeline"] == "as-written"
    n = res["first_bad_decision"]
    assert n >= 1 and res["decision"].startswith("fuse %")
    # the decision's instructions named as the file has them, in the computation it puts them in
    user = parse(decode.read_text())
    assert len(res["decision_as_written"]) == 2, res["decision_as_written"]
    for said in res["decision_as_written"]:
        name, comp = re.match(r"%(\S+) in %(\S+)", said).groups()
        assert user.get_computation(comp).get_instruction(name) is not None, said
    kinds = {p["what"]: p["kind"] for p in res["probes"]}
    assert kinds["4 passes (..dce)"] == ""  # the cleanups alone compile and match
    assert kinds[f"5 passes (..producer-consumer-fusion[fuel={n}])"] == "abort"


def test_bisect_xla_names_the_pass_that_changed_the_numerics(decode):
    """"Which XLA pass changed my numerics": stock vs XLA as written (its fusion off),
    bit for bit.  The answer depends on the XLA version, so the test checks the
    claim itself: with the named pass disabled, the stock compile matches."""
    module = parse(decode.read_text())
    res = bisect_xla(module, rtol=0.0, atol=0.0)
    if res.failure is None:
        pytest.skip("this XLA's stock and as-written compiles agree bit for bit on the module: nothing to bisect")
    assert res.first_bad_pass == res.culprits[0] and set(res.culprits) <= set(res.passes), res.probes
    assert len(res.culprits) <= 3
    alone = [p for p in res.probes if p.what == f"stock without {','.join(res.culprits)}"]
    assert alone and not alone[-1].failed
    for other in res.culprits if len(res.culprits) > 1 else ():  # 1-minimal: each one is needed
        rest = ",".join(n for n in res.culprits if n != other)
        assert any(p.what == f"stock without {rest}" and p.failed for p in res.probes)
    assert res.first_bad_decision is not None or res.note  # bisected with --xla_fuel, or says why not


def test_bisect_says_when_nothing_fails(decode):
    r = hlo("bisect", decode, "--passes", "dce,cse")
    assert r.returncode == 1
    assert "the full pipeline does not fail" in r.stdout


def test_bisect_says_when_xlas_pipelines_alone_differ():
    """A bf16 train step (MaxText's and Flax's, in the small): XLA's fusion off
    alone moves the outputs, so no pass is to blame against stock; bisect says so
    and names the reference that bisects the passes themselves."""
    for hook in ([], ["--hook", "pre-scheduler"]):  # the hint names the reference, not the hooked label
        r = run_hlo("bisect", Path(__file__).parent / "data" / "bf16_scan_train_step.hlo", "--passes",
                    "producer-consumer-fusion", *hook, "-q", timeout=300)
        assert r.returncode == 1, r.stderr[-2000:]
        assert r.stdout.strip().splitlines()[-1].endswith(
            "XLA's pipelines alone differ; --reference as-written bisects the passes against that baseline")
