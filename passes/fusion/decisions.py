"""A fusion decision set: one point of ``hlo tune``'s search space, and the pass
that replays it (``--passes replay:FILE``).

Why a decision set and not a new heuristic: a search over fusion decisions
needs each candidate to be data (so it can be stored, resumed, diffed and
handed on), and the winner must be a pass anyone can run again.  A
``FusionDecisions`` is the pipeline's knobs (which fusion passes run, in which
order, and their bounds) plus per-edge decisions ``(producer, consumer, fuse?)``
that the producer-consumer passes take before their own profitability
(``profitability.ForcedEdges``).  Edges are named by the instructions of the
module the passes are handed (XLA's, at the hook), so a decision set replays
exactly on that module, and only its knobs carry over to another.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from hlo_analysis.fusion_kind import loop_kind
from hlo_tools import Module
from hlo_tools.fileio import write_output

from passes.base import FusionPass, Pass
from passes.dce import DeadCodeElimination
from passes.manager import PassManager

from .horizontal import HorizontalFusion
from .library_dot import LibraryDotFusion
from .multi_output import GpuMultiOutputFusion, MultiOutputFusion, SiblingBound
from .priority import Candidate, PriorityFusion, default_cost
from .producer_consumer import FusionLog, GpuProducerConsumerFusion, ProducerConsumerFusion
from .profitability import ForcedEdges, default_profitability, never_duplicate
from .reduction_epilogue import ReductionEpilogueFusion

FORMAT = "hlo-tune-decisions/1"

#: Pipeline shapes a decision set may take on XLA:CPU (the hooked route), by name.
CPU_PIPELINES: dict[str, tuple[str, ...]] = {
    "best": ("reduction-epilogue", "loop", "sibling", "loop", "horizontal", "library-dot"),
    "best-no-epilogue": ("loop", "sibling", "loop", "horizontal", "library-dot"),
    "best-no-sibling": ("reduction-epilogue", "loop", "horizontal", "library-dot"),
    "best-no-horizontal": ("reduction-epilogue", "loop", "sibling", "loop", "library-dot"),
    "best-no-library-dot": ("reduction-epilogue", "loop", "sibling", "loop", "horizontal"),
    "sibling-first": ("sibling", "reduction-epilogue", "loop", "horizontal", "library-dot"),
    "loop-only": ("loop",),
    "priority": ("priority", "horizontal", "library-dot"),
}
#: ... and on XLA:GPU (on top of XLA's fusions, GPU profile).
GPU_PIPELINES: dict[str, tuple[str, ...]] = {
    "gpu-best": ("loop", "sibling", "loop", "horizontal"),
    "gpu-no-sibling": ("loop", "horizontal"),
    "gpu-no-horizontal": ("loop", "sibling", "loop"),
    "gpu-loop-only": ("loop",),
}

#: The values each knob may take (the search's moves pick among them).
KNOBS: dict[str, tuple] = {
    "duplicate": (True, False),
    "max_operands": (0, 8, 16, 32),
    "horizontal_max_bytes": (16 * 1024, 64 * 1024, 256 * 1024, 1024 * 1024),
    "horizontal_max_members": (4, 8, 16, 32, 64),
    "sibling_max_operands": (8, 16, 32),
    "epilogue_max_duplicated": (0, 4, 8, 16),
    "priority_min_bytes_saved": (0, 256, 4096, 65536),
}


def pipelines(target: str | None) -> dict[str, tuple[str, ...]]:
    """The pipeline shapes for XLA:CPU (``target`` None) or an XLA:GPU target."""
    return GPU_PIPELINES if target else CPU_PIPELINES


@dataclass(frozen=True)
class SavesAtLeast:
    """Priority fusion's cost: bytes saved (``priority.default_cost``) less
    ``threshold``, so only fusions saving more than that are queued."""

    threshold: int

    def __call__(self, candidate: Candidate) -> float:
        return default_cost(candidate) - self.threshold


@dataclass(frozen=True)
class FusionDecisions:
    """One point of the search space.  The defaults are ``pipeline.BEST`` as it
    stands (XLA:CPU); ``edges`` are ``(producer, consumer, fuse)`` triples."""

    pipeline: str = "best"
    duplicate: bool = True
    max_operands: int = 0
    horizontal_max_bytes: int = 64 * 1024
    horizontal_max_members: int = 16
    sibling_max_operands: int = 16
    epilogue_max_duplicated: int = 8
    priority_min_bytes_saved: int = 0
    edges: tuple[tuple[str, str, bool], ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "edges", tuple(sorted((str(p), str(c), bool(f)) for p, c, f in self.edges)))

    @classmethod
    def for_target(cls, target: str | None) -> "FusionDecisions":
        """The starting point: BEST on XLA:CPU, GPU_BEST's shape on a GPU target."""
        return cls() if not target else cls(pipeline="gpu-best")

    def forced(self) -> ForcedEdges:
        return ForcedEdges({(p, c): f for p, c, f in self.edges})

    def with_edges(self, edges: Mapping[tuple[str, str], bool]) -> "FusionDecisions":
        return dataclasses.replace(self, edges=tuple((p, c, f) for (p, c), f in edges.items()))

    def as_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["edges"] = [list(e) for e in self.edges]
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "FusionDecisions":
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - names)
        if unknown:
            raise ValueError(f"unknown decision field(s): {', '.join(unknown)} (known: {', '.join(sorted(names))})")
        pipeline = d.get("pipeline", "best")
        if pipeline not in CPU_PIPELINES and pipeline not in GPU_PIPELINES:
            raise ValueError(f"unknown pipeline shape {pipeline!r}: one of "
                             f"{', '.join([*CPU_PIPELINES, *GPU_PIPELINES])}")
        return cls(**{**d, "edges": tuple(tuple(e) for e in d.get("edges", ()))})

    def key(self) -> str:
        """A stable hash of the decisions (equal sets, equal keys)."""
        return hashlib.sha256(json.dumps(self.as_dict(), sort_keys=True).encode()).hexdigest()[:16]

    def passes(self, target: str | None = None, log: FusionLog | None = None) -> list[Pass]:
        """The passes this set runs: its pipeline shape with its knobs, the
        producer-consumer passes taking ``edges`` first; GPU-profile passes
        pricing on ``target`` when given.  ``log`` records the producer-consumer
        decisions (the edges a search can flip)."""
        forced = self.forced()
        dup = default_profitability if self.duplicate else never_duplicate
        sibling = SiblingBound(self.sibling_max_operands)
        make = {
            "loop": lambda: (GpuProducerConsumerFusion(target=target, log=log, max_operands=self.max_operands,
                                                       decided=forced) if target else
                             ProducerConsumerFusion(profitable=dup, log=log, max_operands=self.max_operands,
                                                    decided=forced)),
            "sibling": lambda: (GpuMultiOutputFusion(target=target) if target else MultiOutputFusion(profitable=sibling)),
            "horizontal": lambda: HorizontalFusion(max_bytes=self.horizontal_max_bytes,
                                                   max_members=self.horizontal_max_members),
            "reduction-epilogue": lambda: ReductionEpilogueFusion(max_duplicated=self.epilogue_max_duplicated),
            "library-dot": LibraryDotFusion,
            "priority": lambda: PriorityFusion(profitable=dup, max_operands=self.max_operands,
                                               cost=SavesAtLeast(self.priority_min_bytes_saved)),
        }
        shape = {**CPU_PIPELINES, **GPU_PIPELINES}[self.pipeline]
        return [make[step]() for step in shape] + [DeadCodeElimination()]


@dataclass(frozen=True)
class DecisionFusion(FusionPass):
    """Replays a ``FusionDecisions`` (``--passes replay:FILE``): its passes, in order."""

    name = "replay"
    decisions: FusionDecisions = FusionDecisions()
    target: str | None = None
    source: str = ""  # the file it came from, for messages
    cpu_kinds: bool = False  # label every fusion as XLA:CPU does (``labelled_for_cpu``)

    def run(self, module: Module) -> bool:
        passes = self.decisions.passes(self.target)
        return PassManager(labelled_for_cpu(passes) if self.cpu_kinds else passes).run(module)

    @classmethod
    def load(cls, path: str | Path) -> "DecisionFusion":
        """The pass of a decisions file written by ``save`` (``hlo tune``)."""
        data = json.loads(Path(path).read_text())
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise ValueError(f"{path}: not a decisions file (format {FORMAT!r} expected)")
        return cls(FusionDecisions.from_dict(data["decisions"]), data.get("target"), str(path))


def labelled_for_cpu(passes: list[Pass]) -> list[Pass]:
    """``passes`` deciding the same fusions, each labelled as XLA:CPU labels its
    own (``loop_kind``: kLoop, reductions included; XLA:CPU refuses a GPU kInput
    fusion), so that a GPU profile's choices compile, and their outputs can be
    checked, on XLA:CPU."""
    return [dataclasses.replace(p, kind=loop_kind) if hasattr(p, "kind") else p for p in passes]


def save(path: str | Path, decisions: FusionDecisions, *, target: str | None = None, **about: Any) -> None:
    """Writes ``decisions`` as a replayable file; ``about``: what it was measured on (kept as is)."""
    body = {"format": FORMAT, "target": target, **about, "decisions": decisions.as_dict()}
    write_output(path, json.dumps(body, indent=1) + "\n")
