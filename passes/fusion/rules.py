"""A finding of ``hlo findings`` as a pass: a rule says *when* (a pattern the
module holds, or lacks, or always) and *what* (one knob of the decision set, or
its pipeline shape, set to a value; or a class of edges fused or kept apart);
the pass takes BEST and applies every rule whose condition holds on the module
it is handed (``--passes rule:FILE[#NAME]``).

A rule never names an edge: edges name one module's instructions (``decisions``'
docstring). An *edge class* carries over instead: the producer's and the
consumer's opcode (a fusion's by its root: ``fusion(reduce)``) and the pattern
the edge is in (``hlo_analysis.patterns.edge_label``); on the module it is
handed, a class rule decides every edge of its class (``class_edges``).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from hlo_analysis.patterns import LABELS, Patterns, edge_label
from hlo_tools import HloOpcode, Instruction, Module

from passes.base import FusionPass
from passes.manager import PassManager

from .clusters import fusible_computations
from .decisions import CPU_PIPELINES, GPU_PIPELINES, KNOBS, FusionDecisions

FORMAT = "hlo-findings/1"

#: The field of a rule that fuses (True) or keeps apart (False) a class of edges.
FUSE = "fuse"

#: An edge class: producer, consumer (``op_class``), and the edge's pattern or None.
EdgeClass = tuple[str, str, "str | None"]

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
    the rule was found for (its base is GPU_BEST's shape); None: XLA:CPU (BEST).
    ``field`` ``FUSE``: every edge of class ``edge`` fused (``value`` True) or kept apart."""

    name: str
    field: str  # a FusionDecisions field other than edges: "pipeline" or a knob; or FUSE
    value: Any
    label: str | None = None
    present: bool = True
    target: str | None = None
    edge: EdgeClass | None = None  # field FUSE: the class of edges it decides

    def __post_init__(self) -> None:
        if self.edge is not None:
            object.__setattr__(self, "edge", tuple(self.edge))  # a list, read back from JSON
        if self.field == FUSE:
            if self.edge is None or len(self.edge) != 3 or not isinstance(self.value, bool):
                raise ValueError(f"rule {self.name}: a {FUSE} rule takes an edge class (producer, consumer, "
                                 f"pattern) and True or False")
        elif self.edge is not None:
            raise ValueError(f"rule {self.name}: only a {FUSE} rule takes an edge class")
        elif self.field == "pipeline":
            if self.value not in CPU_PIPELINES and self.value not in GPU_PIPELINES:
                raise ValueError(f"rule {self.name}: unknown pipeline shape {self.value!r}")
        elif self.field not in KNOBS:
            raise ValueError(f"rule {self.name}: unknown field {self.field!r} (pipeline, {FUSE} or one of "
                             f"{', '.join(KNOBS)})")
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
        if self.field == FUSE:
            producer, consumer, pattern = self.edge
            where = f" in a {pattern} pattern" if pattern else ""
            verb = "fuse" if self.value else "keep apart"
            return (f"{verb} every {producer} producer and its {consumer} user{where} "
                    f"(the edges {base} {'keeps apart' if self.value else 'fuses'} on the modules it came from)")
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
        return cls(d["name"], d["field"], d["value"], d.get("label"), bool(d.get("present", True)), d.get("target"),
                   d.get("edge"))


def op_class(instr: Instruction) -> str:
    """An instruction as an edge class names it: its opcode, a fusion by its root's
    (``fusion(reduce)``: on XLA:CPU the hook's input is fused already)."""
    body = instr.fused_computation if instr.opcode is HloOpcode.FUSION else None
    if body is not None and body.root is not None:
        return f"fusion({body.root.opcode.value})"
    return instr.opcode.value


def edge_class(patterns: Patterns, producer: Instruction, consumer: Instruction) -> EdgeClass:
    """The class of the edge ``producer`` -> ``consumer``."""
    return op_class(producer), op_class(consumer), edge_label(patterns, producer, consumer)


def class_edges(module: Module, classes: dict[EdgeClass, bool]) -> dict[tuple[str, str], bool]:
    """Every producer -> consumer edge of ``module``'s fusible computations whose
    class is in ``classes``, with its decision (the names a decision set takes)."""
    patterns = Patterns(module)
    out: dict[tuple[str, str], bool] = {}
    for comp in fusible_computations(module):
        for consumer in comp:
            for producer in consumer.operands:
                fuse = classes.get(edge_class(patterns, producer, consumer))
                if fuse is not None:
                    out[(producer.name, consumer.name)] = fuse
    return out


def apply_rules(rules: Iterable[Rule], labels: Iterable[str], base: FusionDecisions | None = None,
                module: Module | None = None) -> FusionDecisions:
    """``base`` (default: the first rule's, BEST on XLA:CPU) with each rule whose
    condition holds applied, in order; a field (an edge class) a rule already set
    is not set again by a later one. Edge-class rules decide the edges of
    ``module``, the module the decisions will run on (required when one holds)."""
    labels = set(labels)
    rules = list(rules)
    d = base or (rules[0].base if rules else FusionDecisions())
    taken: set[tuple[str, Any]] = set()
    classes: dict[EdgeClass, bool] = {}
    for r in rules:
        if (r.field, r.edge) in taken or not r.holds(labels):
            continue
        taken.add((r.field, r.edge))
        if r.field == FUSE:
            classes[r.edge] = r.value
        else:
            d = dataclasses.replace(d, **{r.field: r.value})
    if classes:
        if module is None:
            raise ValueError(f"rule(s) deciding edge classes need the module they run on "
                             f"({', '.join(r.name for r in rules if r.field == FUSE)})")
        d = d.with_edges({**{(p, c): f for p, c, f in d.edges}, **class_edges(module, classes)})
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
        return apply_rules(self.rules, module_labels(module), FusionDecisions.for_target(self.target), module)

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
