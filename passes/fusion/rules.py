"""A finding of ``hlo findings`` as a pass: a rule says *when* (a pattern the
module holds, or lacks, or always) and *what* (one knob of the decision set, or
its pipeline shape, set to a value); the pass takes BEST and applies every rule
whose condition holds on the module it is handed (``--passes rule:FILE[#NAME]``).

A rule changes knobs, never edges: edges name one module's instructions, knobs
carry over to any module (``decisions``' docstring).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from hlo_analysis.patterns import LABELS, Patterns
from hlo_tools import Module

from passes.base import FusionPass
from passes.manager import PassManager

from .decisions import CPU_PIPELINES, GPU_PIPELINES, KNOBS, FusionDecisions

FORMAT = "hlo-findings/1"

#: What leaving out each step of BEST does, in words (``Rule.statement``).
_STEP_WORDS = {
    "library-dot": "leave dots to XLA:CPU's own dot emitter (no library-dot rewrite into YNNPACK/oneDNN calls)",
    "reduction-epilogue": "do not fuse elementwise epilogues into reductions",
    "sibling": "make no multi-output (sibling) fusions",
    "horizontal": "make no horizontal fusions",
}


def base_name(target: str | None) -> str:
    """The decision set a rule changes, as statements and reports name it."""
    return "gpu-best" if target else "BEST"


@dataclass(frozen=True)
class Rule:
    """``field = value`` on the decision set when the module has (``present``) or
    lacks pattern ``label`` (None: on every module). ``target``: the XLA:GPU target
    the rule was found for (its base is GPU_BEST's shape); None: XLA:CPU (BEST)."""

    name: str
    field: str  # a FusionDecisions field other than edges: "pipeline" or a knob
    value: Any
    label: str | None = None
    present: bool = True
    target: str | None = None

    def __post_init__(self) -> None:
        if self.field == "pipeline":
            if self.value not in CPU_PIPELINES and self.value not in GPU_PIPELINES:
                raise ValueError(f"rule {self.name}: unknown pipeline shape {self.value!r}")
        elif self.field not in KNOBS:
            raise ValueError(f"rule {self.name}: unknown field {self.field!r} (pipeline or one of {', '.join(KNOBS)})")
        elif self.value not in KNOBS[self.field]:
            raise ValueError(f"rule {self.name}: {self.field} takes {', '.join(map(str, KNOBS[self.field]))}, "
                             f"not {self.value!r}")
        if self.label is not None and self.label not in LABELS:
            raise ValueError(f"rule {self.name}: unknown pattern {self.label!r} (one of {', '.join(LABELS)})")

    def holds(self, labels: Iterable[str]) -> bool:
        """Whether the condition holds on a module with pattern ``labels``."""
        return self.label is None or (self.label in set(labels)) == self.present

    @property
    def condition(self) -> str:
        if self.label is None:
            return "on every module"
        article = ("an" if self.label[0].lower() in "aeiou" else "a") if self.present else "no"
        return f"when the module has {article} {self.label} pattern"

    @property
    def base(self) -> FusionDecisions:
        """What the rule changes: BEST on XLA:CPU, GPU_BEST's shape on a GPU target."""
        return FusionDecisions.for_target(self.target)

    @property
    def action(self) -> str:
        base = base_name(self.target)
        if self.field != "pipeline":
            return f"set {self.field} to {self.value} ({base}: {getattr(self.base, self.field)})"
        shape = CPU_PIPELINES.get(self.value) or GPU_PIPELINES[self.value]
        dropped = [s for s in CPU_PIPELINES["best"] if s not in shape]
        if self.value.startswith("best-no-") and len(dropped) == 1 and dropped[0] in _STEP_WORDS:
            return _STEP_WORDS[dropped[0]]
        return f"fuse with the {self.value} pipeline ({' -> '.join(shape)}) instead of {base}'s"

    @property
    def statement(self) -> str:
        return f"{self.condition[0].upper()}{self.condition[1:]}, {self.action}."

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Rule":
        return cls(d["name"], d["field"], d["value"], d.get("label"), bool(d.get("present", True)), d.get("target"))


def apply_rules(rules: Iterable[Rule], labels: Iterable[str], base: FusionDecisions | None = None) -> FusionDecisions:
    """``base`` (default: the first rule's, BEST on XLA:CPU) with each rule whose
    condition holds applied, in order; a field a rule already set is not set again
    by a later one."""
    labels = set(labels)
    rules = list(rules)
    d = base or (rules[0].base if rules else FusionDecisions())
    taken: set[str] = set()
    for r in rules:
        if r.field not in taken and r.holds(labels):
            d = dataclasses.replace(d, **{r.field: r.value})
            taken.add(r.field)
    return d


def module_labels(module: Module) -> set[str]:
    """The patterns a rule's condition is asked about (``hlo_analysis.patterns``)."""
    return Patterns(module).found()


@dataclass(frozen=True)
class RuleFusion(FusionPass):
    """BEST with ``rules`` applied where their conditions hold on the module."""

    name = "rule"
    rules: tuple[Rule, ...] = ()
    target: str | None = None
    source: str = ""  # the findings file, for messages

    def decisions_for(self, module: Module) -> FusionDecisions:
        return apply_rules(self.rules, module_labels(module), FusionDecisions.for_target(self.target))

    def run(self, module: Module) -> bool:
        return PassManager(self.decisions_for(module).passes(self.target)).run(module)

    @classmethod
    def load(cls, spec: str) -> "RuleFusion":
        """``FILE`` (every rule that held out, in the file's order) or ``FILE#NAME``
        (that rule; the name follows the last ``#``, a path may hold one)."""
        path, _, name = spec.rpartition("#") if "#" in spec and not Path(spec).is_file() else (spec, "", "")
        data = json.loads(Path(path).read_text())
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise ValueError(f"{path}: not a findings file (format {FORMAT!r} expected)")
        entries = data.get("rules", [])
        if name:
            picked = [e for e in entries if e["rule"]["name"] == name]
            if not picked:
                raise ValueError(f"{path} has no rule {name!r} (rules: {', '.join(e['rule']['name'] for e in entries)})")
        else:
            picked = [e for e in entries if e.get("held_out")]
            if not picked:
                raise ValueError(f"{path}: no rule held out; name one with #NAME "
                                 f"(rules: {', '.join(e['rule']['name'] for e in entries) or 'none'})")
        return cls(tuple(Rule.from_dict(e["rule"]) for e in picked), data.get("target"), spec)
