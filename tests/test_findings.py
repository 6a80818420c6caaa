"""``hlo findings``: rules stated, derived from tune winners, run as passes, and
validated end to end on a held-out module with the real XLA:CPU."""

from __future__ import annotations

import json

import pytest

import corpus
import hlo_tools
from hlo_lab.debug.reduce.predicates import passes_differ
from hlo_lab.findings.derive import derive
from hlo_lab.findings.evidence import ModuleEvidence, flipped_classes, module_seed
from hlo_lab.findings.validate import Timing, Trial, Validation
from passes import PassManager
from passes.fusion.decisions import FusionDecisions
from hlo_analysis.patterns import Patterns
from passes.fusion.rules import FORMAT, FUSE, Rule, RuleFusion, apply_rules, class_edges, edge_class, module_labels
from passes.registry import get_pass
from tests.conftest import run_hlo
from xla_bridge.jax_internals import cuda_plugin_available


def _text(name: str, stage: str = "before_optimizations") -> str:
    return next(e for e in corpus.load() if e.name == name).text(stage)


def test_rules_state_their_condition_and_action():
    r = Rule("no-lib", "pipeline", "best-no-library-dot", "softmax", False)
    assert r.statement == ("When the module has no softmax pattern, leave dots to XLA:CPU's own dot emitter "
                           "(no library-dot rewrite into YNNPACK/oneDNN calls).")
    assert Rule("h", "horizontal_max_bytes", 16384).statement == \
        "On every module, set horizontal_max_bytes to 16384 (BEST: 65536)."
    assert r.holds({"RMSNorm"}) and not r.holds({"softmax"})
    with pytest.raises(ValueError, match="unknown field"):
        Rule("x", "edges", ())
    with pytest.raises(ValueError, match="unknown pattern"):
        Rule("x", "duplicate", False, "Attention")
    with pytest.raises(ValueError, match="unknown pipeline"):
        Rule("x", "pipeline", "fastest")
    with pytest.raises(ValueError, match="duplicate takes True, False, not 3"):
        Rule("x", "duplicate", 3)


def test_apply_rules_sets_each_field_once_where_the_condition_holds():
    rules = [Rule("a", "pipeline", "loop-only", "softmax"), Rule("b", "pipeline", "priority"),
             Rule("c", "duplicate", False, "RoPE", False)]
    assert apply_rules(rules, {"softmax", "RoPE"}) == FusionDecisions(pipeline="loop-only")
    assert apply_rules(rules, set()) == FusionDecisions(pipeline="priority", duplicate=False)


def test_derive_conditions_a_lever_on_the_pattern_its_winners_share():
    def row(name, won, pipeline, labels):
        t = {"speedup": 1.5 if won else 1.05, "p10": 1.4, "p90": 1.6}
        return ModuleEvidence(name, name.split("-")[0], tuple(labels), {"pipeline": pipeline}, t,
                              {"speedup": 1.1, "p10": 1.0, "p90": 1.2}, "exact")

    rows = [row("a-1", True, "loop-only", ["softmax"]), row("b-1", True, "loop-only", ["softmax", "RoPE"]),
            row("c-1", False, "best", ["RoPE"]), row("d-1", True, "best-no-sibling", ["RMSNorm"]),
            row("e-1", False, "loop-only", ["RMSNorm"])]  # took the lever, but did not beat BEST
    [d] = derive(rows, min_support=2)
    assert (d.rule.field, d.rule.value, d.rule.label, d.rule.present) == ("pipeline", "loop-only", "softmax", True)
    assert d.support == ("a-1", "b-1") and d.precision == 1.0 and d.recall == 1.0
    assert d.rule.name == "loop-only-with-softmax"
    assert len(derive(rows, min_support=1)) == 2  # best-no-sibling, on d-1 alone


def _findings_file(tmp_path, rules, held):
    body = {"format": FORMAT, "target": None,
            "rules": [{"rule": r.as_dict(), "held_out": h} for r, h in zip(rules, held)]}
    path = tmp_path / "findings.json"
    path.write_text(json.dumps(body))
    return path


def test_a_rule_is_a_pass_that_runs_its_decisions_where_it_holds(tmp_path):
    module = hlo_tools.parse(_text("llama3-tiny-prefill-f32"))
    labels = module_labels(module)
    assert "softmax" in labels
    holds, fails = Rule("lo", "pipeline", "loop-only", "softmax"), Rule("nl", "pipeline", "loop-only", "softmax", False)
    path = _findings_file(tmp_path, [holds, fails], [True, False])

    def run(passes):
        m = module.clone()
        PassManager(passes).run(m)
        return m.to_text()

    loop_only, best = run(FusionDecisions(pipeline="loop-only").passes()), run(FusionDecisions().passes())
    assert loop_only != best
    assert run([get_pass(f"rule:{path}#lo")]) == loop_only
    assert run([get_pass(f"rule:{path}#nl")]) == best  # its condition is false here: BEST
    every = get_pass(f"rule:{path}")
    assert isinstance(every, RuleFusion) and [r.name for r in every.rules] == ["lo"]  # the rules that held
    with pytest.raises(KeyError, match="has no rule 'nope'"):
        get_pass(f"rule:{path}#nope")
    (tmp_path / "other.json").write_text("{}")
    with pytest.raises(KeyError, match="not a findings file"):
        get_pass(f"rule:{tmp_path / 'other.json'}")
    with pytest.raises(KeyError, match="cannot read"):
        get_pass(f"rule:{tmp_path / 'missing.json'}")
    odd = tmp_path / "a#b"
    odd.mkdir()
    none_held = _findings_file(odd, [holds], [False])
    assert [r.name for r in get_pass(f"rule:{none_held}#lo").rules] == ["lo"]  # the name follows the last '#'
    with pytest.raises(KeyError, match="no rule held out; name one with #NAME"):
        get_pass(f"rule:{none_held}")


def test_findings_end_to_end_on_a_held_out_module(tmp_path):
    """One training module tuned (small budget), its winner's levers as rules
    (support 1), each validated on a held-out module of another family, every
    timing with outputs equal to stock's. The speedups themselves are the bench's
    (bench/findings_holdout.py): here only what must hold whatever the noise."""
    held = tmp_path / "held"
    held.mkdir()
    (held / "gemma2-tiny-prefill-f32.hlo").write_text(_text("gemma2-tiny-prefill-f32"))
    out = tmp_path / "out"
    r = run_hlo("findings", "corpus", "--only", "llama3-tiny-prefill-f32", "--held-out-dir", held, "-o", out,
                "--budget", 3, "--reps", 10, "--final-reps", 20, "--min-support", 1, "--no-upstream",
                "--db", tmp_path / "r.db", "--json")
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert data == json.loads((out / "findings.json").read_text())
    [ev] = data["train"]
    assert ev["name"] == "llama3-tiny-prefill-f32" and not ev["error"]
    assert ev["outputs"] in ("exact", "close") and ev["tuned"]["speedup"] > 0 and ev["best"]["speedup"] > 0
    assert "softmax" in ev["labels"]
    for rule in data["rules"]:
        r = rule["rule"]
        lever = [r["field"], [*r["edge"], r["value"]] if r["field"] == FUSE else r["value"]]
        assert ev["won"] and lever in ev["levers"] and rule["support"] == [ev["name"]]
        for t in rule["trials"]:
            assert t["module"] == "gemma2-tiny-prefill-f32"
            assert t["rule"]["outputs"] in ("exact", "close") and t["best"]["outputs"] in ("exact", "close")
    [row] = data["combined"]["modules"]
    assert row["best"]["outputs"] in ("exact", "close") and row["findings"]["outputs"] in ("exact", "close")
    md = (out / "findings.md").read_text()
    assert "## Training: what hlo tune won" in md and "llama3-tiny-prefill-f32" in md


def test_an_edge_class_rule_decides_every_edge_of_its_class_on_the_module_it_is_handed(tmp_path):
    """A class (producer, consumer, pattern) carries over where an edge's names do
    not: on a module, the rule decides exactly the edges of its class."""
    module = hlo_tools.parse(_text("llama3-tiny-prefill-f32"))
    patterns = Patterns(module)
    cls = ("exponential", "divide", "softmax")
    expected = {(p.name, c.name) for c in module.instructions() for p in c.operands
                if edge_class(patterns, p, c) == cls}
    assert len(expected) == 2  # one softmax per layer
    assert class_edges(module, {cls: False}) == {e: False for e in expected}
    apart = Rule("apart-exp-div", FUSE, False, edge=cls)
    assert apart.statement == ("On every module, keep apart every exponential producer and its divide user in a "
                               "softmax pattern (the edges BEST fuses on the modules it came from).")
    assert Rule.from_dict(json.loads(json.dumps(apart.as_dict()))) == apart  # the class, a list in JSON, read back
    d = apply_rules([apart], module_labels(module), None, module)
    assert d == FusionDecisions().with_edges({e: False for e in expected})
    with pytest.raises(ValueError, match="need the module"):
        apply_rules([apart], set())
    with pytest.raises(ValueError, match="takes an edge class"):
        Rule("x", FUSE, False)
    with pytest.raises(ValueError, match="only a fuse rule takes an edge class"):
        Rule("x", "duplicate", False, edge=cls)

    def run(passes):
        m = module.clone()
        PassManager(passes).run(m)
        return m.to_text()

    path = _findings_file(tmp_path, [apart], [True])
    assert run([get_pass(f"rule:{path}")]) == run(d.passes()) != run(FusionDecisions().passes())
    # its upstream bundle is reduced while the rule changes the module otherwise than BEST (not while anything fires)
    differs = passes_differ([RuleFusion((apart,))], FusionDecisions().passes(), "BEST")
    assert differs(module) and not passes_differ(FusionDecisions().passes(), FusionDecisions().passes(), "BEST")(module)
    assert differs.description == "rule changes it, and not as BEST does"

    # evidence: a winner's edge counts by class only where BEST's passes decided it the other way
    (p1, c1), (p2, c2) = sorted(expected)
    winner = FusionDecisions(pipeline="loop-only").with_edges({(p1, c1): False, (p2, c2): True})
    assert flipped_classes(module, winner, [(p1, c1, True), (p2, c2, True)]) == ((*cls, False),)
    rows = [ModuleEvidence(n, n, ("softmax",), {"pipeline": "best"}, {"speedup": 1.3}, {"speedup": 1.1},
                           edge_classes=((*cls, False),)) for n in ("a-1", "b-1")]
    [r] = derive(rows, min_support=2)
    assert r.rule == Rule("apart-exponential-divide-softmax", FUSE, False, edge=cls)


def test_gpu_rules_change_gpu_best_and_say_so():
    """A rule found for a GPU target starts from gpu-best, says so, and a lever is
    a field away from gpu-best's (a win by less than a tenth of a percent is none)."""
    r = Rule("lo", "pipeline", "gpu-loop-only", "softmax", True, "h100")
    assert r.statement == ("When the module has a softmax pattern, fuse with the gpu-loop-only pipeline (loop) "
                           "instead of gpu-best's.")
    assert Rule.from_dict(r.as_dict()) == r
    assert apply_rules([r], {"softmax"}) == FusionDecisions(pipeline="gpu-loop-only")
    assert apply_rules([r], set()) == FusionDecisions(pipeline="gpu-best")
    assert Rule("m", "max_operands", 8, target="h100").statement.endswith("(gpu-best: 0).")
    assert Rule("h", "horizontal_max_bytes", 1048576, "optimizer update", True, "h100").statement == \
        "When the module has an optimizer update pattern, set horizontal_max_bytes to 1048576 (gpu-best: 65536)."
    ev = ModuleEvidence("a-1", "a", (), {"pipeline": "gpu-best", "max_operands": 8},
                        {"speedup": 1.2}, {"speedup": 1.1999}, target="h100")
    assert ev.levers() == [("max_operands", 8)] and not ev.won
    assert ModuleEvidence("a-1", "a", (), {}, {"speedup": 1.2}, {"speedup": 1.1}, target="h100").won


def test_a_predicted_verdict_needs_both_models():
    def t(ours, xla):
        return Timing(ours, ours, ours, "exact", "", xla)

    base = t(1.0, 1.0)
    assert Trial("m", "f", t(1.1, 1.05), base).verdict == "faster"
    assert Trial("m", "f", t(1.1, 0.99), base).verdict == "slower"  # XLA's model says slower: it hurts
    assert Trial("m", "f", t(1.1, 1.0), base).verdict == "tie"  # the models disagree
    assert Trial("m", "f", t(1.0005, 1.0), base).verdict == "tie"
    assert Trial("m", "f", Timing(1.1, 1.1, 1.1, "mismatch", "", 1.1), base).verdict == "failed"
    assert Trial("m", "f", t(1.1, 1.05), base).xla_gain == pytest.approx(1.05)


def test_a_rule_holds_out_only_with_a_gain_a_user_would_see():
    def trial(gain, xla=None):
        return Trial("m", "f", Timing(gain, gain * 0.8, gain * 1.2, "close", "", xla), Timing(1.0, 0.8, 1.2, "close"))

    lo = Rule("lo", "pipeline", "loop-only")
    assert not Validation(lo, [trial(1.002), trial(1.0)]).held_out  # within noise and no gain: no finding
    assert Validation(lo, [trial(1.05), trial(1.0)]).held_out
    assert not Validation(lo, [trial(1.4), trial(0.95), trial(0.94), trial(0.91)]).held_out  # one module carries it
    assert not Validation(lo, []).held_out  # applies nowhere
    gpu = Rule("g", "pipeline", "gpu-loop-only", target="h100")
    assert Validation(gpu, [trial(1.005, 1.005)]).held_out  # predicted: no noise, a tenth of a percent is a gain
    # each training module searches with its own seed: alike modules do not draw the same flips
    assert module_seed(0, "llama3-tiny-prefill-f32") != module_seed(0, "mistral-tiny-prefill-f32")
    assert module_seed(7, "a") == module_seed(7, "a") < 2**32


@pytest.mark.skipif(not cuda_plugin_available(), reason="XLA:GPU without a GPU needs the CUDA plugin (make venv)")
def test_gpu_findings_end_to_end_without_a_gpu(tmp_path):
    """hlo findings --target h100 on one training module and one held-out one:
    the figures are both models' predictions, the outputs of every held-out
    decision set checked on XLA:CPU."""
    held = tmp_path / "held"
    held.mkdir()
    (held / "gemma2-tiny-decode-f32.hlo").write_text(_text("gemma2-tiny-decode-f32"))
    out = tmp_path / "out"
    r = run_hlo("findings", "corpus", "--target", "h100", "--only", "llama3-tiny-decode-f32", "--held-out-dir", held,
                "-o", out, "--budget", 3, "--min-support", 1, "--db", tmp_path / "r.db", "--json")
    assert r.returncode == 0, r.stderr
    assert "no hlo upstream bundles for a GPU target" in r.stderr
    data = json.loads(r.stdout)
    assert data["target"] == "h100" and data["backend"] == "gpu"
    [ev] = data["train"]
    assert not ev["error"] and ev["target"] == "h100" and ev["tuned"]["speedup"] >= ev["best"]["speedup"] > 0
    for rule in data["rules"]:
        assert rule["rule"]["target"] == "h100" and "gpu-best" in rule["statement"]
    [row] = data["combined"]["modules"]
    for side in (row["best"], row["findings"]):
        assert side["outputs"] in ("exact", "close") and side["speedup"] > 0 and side["xla"] > 0
    assert "XLA:GPU h100, predicted" in (out / "findings.md").read_text()
