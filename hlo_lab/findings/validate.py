"""Each rule on modules it was not derived from: on every held-out module where
its condition holds, BEST with the rule against BEST alone, both measured against
stock XLA:CPU in one worker (paired ABBA runs, outputs compared first). A rule
holds out when it applies somewhere, no module gets slower beyond the noise, and
its geomean gain over BEST is above 1.0. Then every rule that held, together
(``apply_rules``), against stock: the findings pipeline's held-out figure.

For an XLA:GPU target nothing runs on a GPU: gpu-best with the rule and gpu-best
alone are compiled for the target without one (on top of stock's fusions) and
priced by two models, our roofline and XLA's own GPU model; a verdict needs both.
Their outputs are checked on XLA:CPU, the same passes at XLA:CPU's fusion hook
against stock, where the module is small enough to run here."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable

from hlo_lab.tune.search import _first_line  # the one wording of a failed timing, as hlo tune's rows
from hlo_tools import Module, parse
from passes.fusion.decisions import FusionDecisions
from passes.fusion.rules import Rule, apply_rules, module_labels

from .evidence import PREDICTED_TIE, CorpusModule

#: The least measured gain over BEST (geomean) a rule holds out with: below it a
#: gain is no finding (the tiny modules' timings spread by tens of percent, and a
#: rule at 1.000x or 1.002x on the held-out modules changes nothing a user sees).
MIN_GAIN = 0.01

#: A predicted timing's outputs on a module too large to run here.
UNCHECKED = "unchecked (too large to run here)"


@dataclass
class Timing:
    """One decision set against stock on one module: measured (a median and its
    p10-p90 range), or predicted (``xla``: XLA's GPU model's figure beside ours)."""

    speedup: float | None = None
    p10: float | None = None
    p90: float | None = None
    outputs: str = ""
    error: str = ""
    xla: float | None = None

    @property
    def ok(self) -> bool:
        return not self.error and self.speedup is not None and self.outputs in ("exact", "close", UNCHECKED)


@dataclass
class Trial:
    """A rule on one held-out module: the rule's timing and BEST's."""

    module: str
    family: str
    rule: Timing
    best: Timing

    @property
    def gain(self) -> float | None:
        """The rule's speedup over BEST (both against stock)."""
        return self.rule.speedup / self.best.speedup if self.rule.ok and self.best.ok else None

    @property
    def xla_gain(self) -> float | None:
        """The rule's predicted speedup over BEST by XLA's GPU model (None: measured)."""
        r, b = self.rule, self.best
        return r.xla / b.xla if r.ok and b.ok and r.xla and b.xla else None

    @property
    def verdict(self) -> str:
        """faster / slower / within noise / failed: the rule's p10-p90 range against
        BEST's; predicted: faster when both models say so, slower when either
        does, else a tie (within ``PREDICTED_TIE``, or the models disagree)."""
        r, b = self.rule, self.best
        if not (r.ok and b.ok):
            return "failed"
        if r.xla is not None:
            gains = (self.gain, self.xla_gain if self.xla_gain is not None else self.gain)
            if min(gains) < 1 - PREDICTED_TIE:
                return "slower"
            return "faster" if min(gains) > 1 + PREDICTED_TIE else "tie"
        if r.p10 > b.p90:
            return "faster"
        if r.p90 < b.p10:
            return "slower"
        return "within noise"

    def as_dict(self) -> dict[str, Any]:
        return {"module": self.module, "family": self.family, "rule": vars(self.rule), "best": vars(self.best),
                "gain": self.gain, "xla_gain": self.xla_gain, "verdict": self.verdict}


@dataclass
class Validation:
    rule: Rule
    trials: list[Trial] = field(default_factory=list)
    not_applicable: list[str] = field(default_factory=list)  # held-out modules it does not apply to (condition, class)

    @property
    def geomean_gain(self) -> float | None:
        return geomean([t.gain for t in self.trials])

    @property
    def xla_geomean_gain(self) -> float | None:
        return geomean([t.xla_gain for t in self.trials])

    @property
    def hurts(self) -> list[str]:
        return [t.module for t in self.trials if t.verdict in ("slower", "failed")]

    @property
    def held_out(self) -> bool:
        """Applies somewhere, hurts nowhere, and gains: its geomean over BEST above
        ``MIN_GAIN`` (measured) or ``PREDICTED_TIE`` (predicted), and a gain on at
        least half the modules it applies to (one noisy module does not carry it)."""
        g = self.geomean_gain
        tie = PREDICTED_TIE if self.rule.target else MIN_GAIN
        gaining = sum(1 for t in self.trials if (t.gain or 0.0) > 1.0)
        return (bool(self.trials) and not self.hurts and g is not None and g > 1.0 + tie
                and 2 * gaining >= len(self.trials))

    def as_dict(self) -> dict[str, Any]:
        return {"held_out": self.held_out, "geomean_gain_over_best": self.geomean_gain,
                "xla_geomean_gain_over_best": self.xla_geomean_gain, "hurts": self.hurts,
                "not_applicable": self.not_applicable, "trials": [t.as_dict() for t in self.trials]}


def geomean(xs) -> float | None:
    xs = [x for x in xs if x is not None and x > 0]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


class Bench:
    """Measures decision sets against stock in one XLA worker process (an abort
    is that timing's error), each (module, decision set) once; for ``target``,
    predicts them and checks their outputs on XLA:CPU (``check_reps`` runs)."""

    def __init__(self, *, reps: int, target: str | None = None, check_reps: int = 3):
        from xla_bridge import worker  # lazy: the bridge

        self.reps, self.target, self.check_reps = reps, target, check_reps
        self.worker = worker.Worker()
        self._memo: dict[tuple[str, str], Timing] = {}

    @property
    def base(self) -> FusionDecisions:
        """The decision set rules change: BEST, or GPU_BEST's shape on a target."""
        return FusionDecisions.for_target(self.target)

    def seen(self, m: CorpusModule) -> Module:
        """The module XLA hands the fusion hook (where the rule runs: its patterns
        are the conditions, its edges what an edge-class rule decides)."""
        from hlo_lab.tune import evaluate  # lazy: the bridge

        backend = "gpu" if self.target else "cpu"
        prep = self.worker.call(evaluate.prepare, (m.text, backend, self.target), {}, phase="compiling", module=m.name)
        return parse(prep["seen"], source=f"<{m.name} at the hook>")

    def time(self, m: CorpusModule, decisions: FusionDecisions) -> Timing:
        key = (m.name, decisions.key())
        if key not in self._memo:
            try:
                self._memo[key] = self._predicted(m, decisions) if self.target else self._measured(m, decisions)
            except Exception as e:  # noqa: BLE001 - an abort or compile error: this timing's error
                self._memo[key] = Timing(error=_first_line(e))
        return self._memo[key]

    def _measured(self, m: CorpusModule, decisions: FusionDecisions, reps: int | None = None,
                  model: str | None = None) -> Timing:
        from hlo_lab.tune import evaluate  # lazy: the bridge

        r = self.worker.call(evaluate.evaluate, (m.text, decisions.as_dict(), decisions.key()),
                             {"reps": reps or self.reps, "model": model}, phase="measuring", module=m.name)
        return Timing(r.speedup, r.speedup_p10, r.speedup_p90, r.verdict, "" if r.ok else (r.error or r.status))

    def _predicted(self, m: CorpusModule, decisions: FusionDecisions) -> Timing:
        from hlo_lab.tune import evaluate  # lazy: the bridge

        p = self.worker.call(evaluate.predict, (m.text, decisions.as_dict()), {"target": self.target},
                             phase="compiling", module=m.name)
        outputs = UNCHECKED
        if m.runnable:  # the same passes (priced for the target) at XLA:CPU's hook, against stock
            check = self._measured(m, decisions, self.check_reps, self.target)
            if check.error:
                return Timing(error=f"outputs on XLA:CPU: {check.error}")
            outputs = check.outputs
        return Timing(p["ours"], p["ours"], p["ours"], outputs, "" if p["ours"] else "no prediction", p["xla"])

    def close(self) -> None:
        self.worker.close()


def validate(rules: list[Rule], modules: list[CorpusModule], bench: Bench,
             progress: Callable[[str], None] = lambda _m: None) -> tuple[list[Validation], dict[str, Any]]:
    """Each rule on ``modules``, then the rules that held together; returns the
    validations and the combined figures (per module, and geomeans vs stock)."""
    seen, labels, unread = {}, {}, {}
    for m in modules:
        progress(f"reading {m.name} at the hook")
        try:
            seen[m.name] = bench.seen(m)
            labels[m.name] = module_labels(seen[m.name])
        except Exception as e:  # noqa: BLE001 - XLA cannot compile it: reported, the others go on
            unread[m.name] = _first_line(e)
    modules = [m for m in modules if m.name in labels]
    out = []
    for rule in rules:
        v = Validation(rule)
        for m in modules:
            if not rule.holds(labels[m.name]):
                v.not_applicable.append(m.name)
                continue
            progress(f"{rule.name} on {m.name}")
            d = apply_rules([rule], labels[m.name], bench.base, seen[m.name])
            if d == bench.base:  # an edge-class rule whose class the module lacks
                v.not_applicable.append(m.name)
                continue
            v.trials.append(Trial(m.name, m.family, bench.time(m, d), bench.time(m, bench.base)))
        out.append(v)
    held = [v.rule for v in out if v.held_out]
    rows = []
    for m in modules:
        progress(f"the rules that held, together, on {m.name}")
        d = apply_rules(held, labels[m.name], bench.base, seen[m.name])
        rows.append({"module": m.name, "family": m.family, "decisions_changed": d != bench.base,
                     "findings": vars(bench.time(m, d)), "best": vars(bench.time(m, bench.base))})
    combined = {
        "rules": [r.name for r in held],
        "not_compiled": unread,  # held-out modules XLA could not compile, with what it said
        "modules": rows,
        "held_out_geomean": geomean(r["findings"]["speedup"] for r in rows),
        "best_geomean": geomean(r["best"]["speedup"] for r in rows),
        "xla_held_out_geomean": geomean(r["findings"]["xla"] for r in rows),  # predicted only
        "xla_best_geomean": geomean(r["best"]["xla"] for r in rows),
    }
    return out, combined
