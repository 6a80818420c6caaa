"""What ``hlo tune`` wins on each module of the families rules are derived from:
the winning decision set's knobs, its edges decided against BEST's by class
(an edge names one module's instructions and does not carry over; its class,
``passes.fusion.rules.edge_class``, does), how much it beat BEST by, and the
patterns the module holds (the conditions a rule may take)."""

from __future__ import annotations

import zlib
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Iterable

from hlo_analysis.patterns import Patterns
from hlo_tools import Module
from passes.fusion.decisions import KNOBS, FusionDecisions
from passes.fusion.rules import FUSE, edge_class, module_labels

#: The decision-set fields a rule may set: the pipeline shape and every knob.
FIELDS = ("pipeline", *KNOBS)
#: Predicted figures have no noise, but a gain below this share is no gain: the
#: models price kernels to a few tenths of a percent.
PREDICTED_TIE = 1e-3


@dataclass(frozen=True)
class CorpusModule:
    """A module to derive from or validate on: its name, model family and HLO text;
    ``runnable``: small enough to run here (outputs of a GPU rule are checked on XLA:CPU)."""

    name: str
    family: str
    text: str = field(repr=False)
    runnable: bool = True


@dataclass
class ModuleEvidence:
    """One training module's tune result, as far as rules need it."""

    name: str
    family: str
    labels: tuple[str, ...] = ()
    decisions: dict[str, Any] = field(default_factory=dict)  # the winner's knobs and pipeline (no edges)
    tuned: dict[str, float | None] = field(default_factory=dict)  # speedup, p10, p90 vs stock
    best: dict[str, float | None] = field(default_factory=dict)  # BEST's, measured in the same run
    outputs: str = ""
    error: str = ""
    target: str | None = None  # the XLA:GPU target tuned for (predicted); None: XLA:CPU, measured
    edge_classes: tuple[tuple, ...] = ()  # (producer, consumer, pattern, fuse): winner's edges decided against BEST's

    @property
    def won(self) -> bool:
        """The tuned set beat BEST (gpu-best on a GPU target): its median speedup
        over stock is above BEST's, both measured once more with the final
        repetitions (predicted: by more than ``PREDICTED_TIE``). A weak test on
        purpose: the derivation only proposes rules; the held-out modules, which
        the winners never saw, decide which hold."""
        t, b = self.tuned.get("speedup"), self.best.get("speedup")
        if self.error or t is None or b is None:
            return False
        return t > b * (1 + PREDICTED_TIE) if self.target else t > b

    def levers(self) -> list[tuple[str, Any]]:
        """The winner's (field, value) pairs that differ from its base's; an edge
        class as (``FUSE``, (producer, consumer, pattern, fuse))."""
        return levers(self.decisions, self.target) + [(FUSE, tuple(c)) for c in self.edge_classes]

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "won": self.won, "levers": [list(lv) for lv in self.levers()]}


def levers(decisions: dict[str, Any], target: str | None = None) -> list[tuple[str, Any]]:
    """(field, value) of ``decisions`` where it differs from the base: BEST, or
    GPU_BEST's shape on a GPU ``target`` (``FusionDecisions.for_target``)."""
    default = FusionDecisions.for_target(target)
    return [(f, decisions[f]) for f in FIELDS if f in decisions and decisions[f] != getattr(default, f)]


def flipped_classes(module: Module, winner: FusionDecisions, base_decided: Iterable[tuple[str, str, bool]]
                    ) -> tuple[tuple, ...]:
    """The classes of the winner's edges that the base's passes decided the other
    way on ``module`` (the hook's input), each once, sorted."""
    base = {(p, c): f for p, c, f in base_decided}
    by_name = {i.name: i for i in module.instructions()}
    patterns = Patterns(module)
    out = set()
    for p, c, fuse in winner.edges:
        if base.get((p, c), fuse) != fuse and p in by_name and c in by_name:
            out.add((*edge_class(patterns, by_name[p], by_name[c]), fuse))
    return tuple(sorted(out, key=str))


def _speedups(m) -> dict[str, float | None]:
    if m is None or not m.ok:
        return {"speedup": None, "p10": None, "p90": None}
    return {"speedup": m.speedup, "p10": m.speedup_p10, "p90": m.speedup_p90}


def module_seed(seed: int, name: str) -> int:
    """The search seed of one module: ``seed`` mixed with its name, so that each
    module's search draws its own moves. With one seed for all, structurally alike
    modules flip the same edges in the same order, and a flip that rode along
    with a winning knob shows up as a lever the winners share."""
    return (seed + zlib.crc32(name.encode())) % 2**32


def gather(modules: list[CorpusModule], *, budget: int, reps: int, final_reps: int, workers: int,
           db: str | None, seed: int = 0, target: str | None = None,
           progress: Callable[[str], None] = lambda _m: None) -> list[ModuleEvidence]:
    """``hlo tune`` (hill climbing, no random baseline) on each module, measured on
    XLA:CPU or, for ``target``, predicted for that GPU, each with its own seed
    (``module_seed``); a search run before with the same options is read back
    from the results database."""
    from hlo_lab.tune.search import Tuner, _first_line  # lazy: the passes and the XLA bridge

    out = []
    for n, m in enumerate(modules, 1):
        progress(f"tune {m.name} ({n}/{len(modules)})")
        ev = ModuleEvidence(m.name, m.family, target=target)
        try:
            tuner = Tuner(m.name, m.text, budget=budget, reps=reps, final_reps=final_reps, workers=workers, db=db,
                          seed=module_seed(seed, m.name), baseline=False, target=target)
            result = tuner.run()
        except Exception as e:  # noqa: BLE001 - one module's failure is its row, the others go on
            ev.error = _first_line(e)
            out.append(ev)
            continue
        ev.labels = tuple(sorted(module_labels(tuner.space.module)))
        if result.main.best is not None:
            winner = result.main.best.proposal.decisions
            d = winner.as_dict()
            ev.decisions = {f: d[f] for f in FIELDS}
            if target is None:  # a GPU rule's outputs are checked at XLA:CPU's hook, whose module has other edges
                base = tuner.space.price(FusionDecisions())
                ev.edge_classes = flipped_classes(tuner.space.module, winner, base.decided)
        ev.tuned, ev.best = _speedups(result.finals.get("tuned")), _speedups(result.finals.get("best"))
        tuned = result.finals.get("tuned")
        ev.outputs = tuned.verdict if tuned is not None else ""
        if tuned is not None and not tuned.ok:
            ev.error = tuned.error or tuned.status
        out.append(ev)
    return out
