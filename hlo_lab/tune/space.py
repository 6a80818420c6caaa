"""The search space of ``hlo tune`` over one module: decision sets
(``passes.fusion.decisions.FusionDecisions``), their start points, the moves
between them, and the cost model's price of each before anything compiles.

Why the passes run here too, not only inside XLA: running a candidate's passes on
the module XLA hands the hook (``seen``) gives, in well under a second, the
fused module XLA will compile, so the search can (1) price it with the roofline
and compile only the candidates the model likes, (2) skip a candidate whose
fused module was measured already (many decision sets fuse alike), and (3) learn
which edges the passes actually decided, the only ones worth flipping.  The
worker runs the same passes on the same text inside XLA; the two results are
compared by hash.
"""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass

from hlo_analysis import devices
from hlo_analysis.roofline import roofline
from hlo_lab.study import kernels
from hlo_tools import HloOpcode, Instruction, Module, parse
from hlo_tools.attributes import parse_metadata
from passes.fusion.clusters import fusible_computations
from passes.fusion.decisions import KNOBS, FusionDecisions, pipelines
from passes.fusion.producer_consumer import FusionLog
from passes.fusion.profitability import KEPT_APART
from passes.manager import PassManager
from xla_bridge.results import text_hash


@dataclass(frozen=True)
class Proposal:
    """A decision set priced by the model: the fused module it makes (as text
    and hash), its predicted time, its kernels, and the edges its
    producer-consumer passes decided by profitability, with what they decided
    (``(producer, consumer, fused)``): the moves a search can make from here."""

    decisions: FusionDecisions
    after_text: str
    fused_hash: str
    predicted_us: float
    kernels: int
    decided: tuple[tuple[str, str, bool], ...]


class Space:
    """The module XLA hands our passes (``seen``: the hook's input) and where its
    candidates are priced (``target``: a GPU's roofline, and the GPU-profile
    passes pricing on it; None: XLA:CPU's passes and the measured host's roofline)."""

    def __init__(self, seen: str, target: str | None = None):
        self.module = parse(seen, source="<hook input>")
        self.target = target
        self.device = devices.load(target) if target else devices.host()
        self.names = frozenset(i.name for c in self.module.computations for i in c)
        self._priced: dict[str, Proposal] = {}

    def price(self, decisions: FusionDecisions) -> Proposal:
        """``decisions`` run on a copy of the hook's input, priced (memoised by key)."""
        key = decisions.key()
        if key in self._priced:
            return self._priced[key]
        module = self.module.clone()
        log = FusionLog()
        # unverified here: the worker runs the same passes on the same text, verified, inside XLA
        PassManager(decisions.passes(self.target, log), verify=False).run(module)
        text = module.to_text()
        decided = {}
        for p, c, d in log.entries:
            if p in self.names and c in self.names and (d.ok or d.reason.startswith("cost") or d.reason == KEPT_APART):
                decided.setdefault((p, c), d.ok)
        out = Proposal(decisions, text, text_hash(text), roofline(module, self.device).time_s * 1e6, kernels(module),
                       tuple((p, c, f) for (p, c), f in sorted(decided.items())))
        self._priced[key] = out
        return out


def _origin(i: Instruction) -> tuple:
    """What an instruction computes, as both pipelines name it: opcode, result
    dimensions and the framework op it came from (names differ between XLA's
    stock and as-written pipelines; metadata does not)."""
    meta = parse_metadata(i.attributes.get("metadata") or "")
    return i.opcode, tuple(getattr(i.shape, "dimensions", ()) or ()), meta.get("op_name", "")


def stock_decisions(seen: Module, stock_optimized: Module, target: str | None = None) -> tuple[FusionDecisions, float]:
    """Stock XLA's own fusion decisions, read back from its optimized module: an
    edge of the hook's input is fused when its producer and consumer compute
    what two instructions of one stock fusion compute (``_origin``).  Returns
    the decision set (loop fusion only, as XLA:CPU does; on a GPU target the GPU
    loop shape) and the share of the input's fused ops found in stock's fusions."""
    owners: dict[tuple, set[str]] = {}
    for i in stock_optimized.instructions():
        body = i.fused_computation if i.opcode is HloOpcode.FUSION else None
        if body is not None:
            for j in body:
                if j.opcode is not HloOpcode.PARAMETER:
                    owners.setdefault(_origin(j), set()).add(i.name)

    def of(i: Instruction) -> set[str]:
        body = i.fused_computation if i.opcode is HloOpcode.FUSION else None
        return owners.get(_origin(body.root if body is not None else i), set())

    edges: dict[tuple[str, str], bool] = {}
    found = total = 0
    for comp in fusible_computations(seen):
        for c in comp:
            if c.opcode is not HloOpcode.FUSION:
                continue
            total += 1
            found += bool(of(c))
            for p in c.operands:
                if p.opcode in (HloOpcode.PARAMETER, HloOpcode.GET_TUPLE_ELEMENT):
                    continue
                edges[(p.name, c.name)] = bool(of(p) & of(c))
    shape = "gpu-loop-only" if target else "loop-only"
    return FusionDecisions(pipeline=shape).with_edges(edges), (found / total if total else 0.0)


def knob_values(target: str | None) -> dict[str, tuple]:
    """Each knob and its values (the pipeline shapes of the backend first)."""
    return {"pipeline": tuple(pipelines(target)), **KNOBS}


def _with_flips(d: FusionDecisions, flips: dict[tuple[str, str], bool]) -> FusionDecisions:
    edges = {(p, c): f for p, c, f in d.edges}
    edges.update(flips)
    return d.with_edges(edges)


def mutate(p: Proposal, rng: random.Random, target: str | None) -> FusionDecisions:
    """A neighbour of ``p``: half the time one to three of the edges its passes
    decided, decided the other way; otherwise one knob set to another value."""
    if p.decided and rng.random() < 0.5:
        k = min(len(p.decided), rng.choice((1, 1, 2, 3)))
        return _with_flips(p.decisions, {(a, b): not f for a, b, f in rng.sample(p.decided, k)})
    knobs = knob_values(target)
    name = rng.choice(sorted(knobs))
    current = getattr(p.decisions, name)
    value = rng.choice([v for v in knobs[name] if v != current] or [current])
    return dataclasses.replace(p.decisions, **{name: value})


def random_point(base: Proposal, rng: random.Random, target: str | None) -> FusionDecisions:
    """A random decision set: every knob drawn, and each edge ``base``'s passes
    decided flipped with a probability itself drawn in [0, 0.3] (random search)."""
    knobs = knob_values(target)
    q = rng.uniform(0.0, 0.3)
    flips = {(a, b): not f for a, b, f in base.decided if rng.random() < q}
    d = FusionDecisions(**{k: rng.choice(v) for k, v in sorted(knobs.items())})
    return _with_flips(d, flips)
