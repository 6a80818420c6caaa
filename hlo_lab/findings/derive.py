"""Rules from the winners: a lever (a knob or the pipeline shape at a value other
than BEST's, or a class of edges decided against BEST's) that at least
``min_support`` modules' winners share becomes a rule;
its condition is the pattern (held, lacked, or none: every module) that best
separates the modules whose winner took the lever from the others (F1 score,
the unconditional rule first on a tie: the simplest statement that fits)."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from typing import Any

from hlo_analysis.patterns import LABELS
from passes.fusion.rules import FUSE, Rule

from .evidence import ModuleEvidence


@dataclass(frozen=True)
class Derived:
    """A rule and the training evidence behind it."""

    rule: Rule
    support: tuple[str, ...]  # modules whose winner took the lever
    precision: float  # of the modules where the condition holds, the share whose winner took it
    recall: float  # of the modules whose winner took it, the share where the condition holds

    def as_dict(self) -> dict[str, Any]:
        return {"rule": self.rule.as_dict(), "statement": self.rule.statement, "support": list(self.support),
                "precision": round(self.precision, 3), "recall": round(self.recall, 3)}


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", str(text).lower()).strip("-")


def _name(field: str, value: Any, label: str | None, present: bool) -> str:
    if field == FUSE:  # value: (producer, consumer, pattern, fuse)
        producer, consumer, pattern, fuse = value
        base = "-".join(_slug(x) for x in ("fuse" if fuse else "apart", producer, consumer, pattern or "") if x)
    else:
        base = f"{_slug(field)}-{_slug(value)}" if field != "pipeline" else _slug(value)
    return base if label is None else f"{base}-{'with' if present else 'without'}-{_slug(label)}"


def _score(rows: list[ModuleEvidence], took: set[str], label: str | None, present: bool) -> tuple[float, float, float]:
    holds = {r.name for r in rows if label is None or (label in r.labels) == present}
    hit = len(holds & took)
    precision = hit / len(holds) if holds else 0.0
    recall = hit / len(took) if took else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return f1, precision, recall


def derive(evidence: list[ModuleEvidence], *, min_support: int = 2) -> list[Derived]:
    """Rules from ``evidence`` (modules that failed are left out), most supported first."""
    rows = [r for r in evidence if not r.error]
    winners = [r for r in rows if r.won]
    counts = Counter(lv for r in winners for lv in r.levers())
    out = []
    for (field, value), n in sorted(counts.items(), key=lambda kv: (-kv[1], str(kv[0]))):
        if n < min_support:
            continue
        took = {r.name for r in winners if (field, value) in r.levers()}
        conditions = [(None, True)] + [(lab, p) for lab in LABELS for p in (True, False)]
        best = max(conditions, key=lambda c: _score(rows, took, *c)[0])  # max keeps the first on a tie
        f1, precision, recall = _score(rows, took, *best)
        setting, edge = (value[3], value[:3]) if field == FUSE else (value, None)  # an edge lever: (class..., fuse)
        rule = Rule(_name(field, value, *best), field, setting, best[0], best[1], winners[0].target, edge)
        out.append(Derived(rule, tuple(sorted(took)), precision, recall))
    return out
