"""Named passes, so the CLI and notebooks can say ``--passes dce,cse,simplify``.

The table is explicit: a pass gets a name on the command line by being listed
here, not as a side effect of importing its module.
"""

from __future__ import annotations

from typing import Mapping

from .base import Pass
from .cse import CommonSubexpressionElimination
from .dce import DeadCodeElimination
from .fusion.call_inliner import CallInliner
from .fusion.horizontal import HorizontalFusion
from .fusion.library_dot import LibraryDotFusion
from .fusion.multi_output import GpuMultiOutputFusion, MultiOutputFusion
from .fusion.outline import InlineFusions
from .fusion.priority import PriorityFusion
from .fusion.producer_consumer import GpuProducerConsumerFusion, ProducerConsumerFusion
from .fusion.reduction_epilogue import ReductionEpilogueFusion
from .layout import EntryLayoutAssignment, LayoutNormalization, TransposeFolding
from .scheduling import LatencyHidingScheduler, MemoryScheduler
from .simplify import AlgebraicSimplifier

#: Every built-in pass, by its ``name``.
PASSES: Mapping[str, type[Pass]] = {cls.name: cls for cls in (
    CallInliner,
    CommonSubexpressionElimination,
    DeadCodeElimination,
    EntryLayoutAssignment,
    GpuMultiOutputFusion,
    GpuProducerConsumerFusion,
    HorizontalFusion,
    InlineFusions,
    LatencyHidingScheduler,
    LayoutNormalization,
    LibraryDotFusion,
    MemoryScheduler,
    MultiOutputFusion,
    PriorityFusion,
    ProducerConsumerFusion,
    ReductionEpilogueFusion,
    AlgebraicSimplifier,
    TransposeFolding,
)}


def available_passes() -> list[str]:
    return sorted(PASSES)


#: ``replay:FILE`` names a decisions file written by ``hlo tune`` (``DecisionFusion``).
REPLAY = "replay:"


def get_pass(name: str, **options) -> Pass:
    """A new ``name`` pass built with ``options`` (``replay:FILE``: the decision set
    in FILE); KeyError listing the known names, or saying what is wrong with FILE."""
    if name.startswith(REPLAY):
        from .fusion.decisions import DecisionFusion  # it imports the fusion passes listed here

        path = name[len(REPLAY):]
        try:
            return DecisionFusion.load(path)
        except OSError as e:
            raise KeyError(f"{name}: cannot read {path}: {e.strerror or e}") from None
        except (ValueError, KeyError, TypeError) as e:
            raise KeyError(f"{name}: {path} is not a decisions file written by hlo tune: {e}") from None
    try:
        cls = PASSES[name]
    except KeyError:
        raise KeyError(f"unknown pass {name!r}; available: {', '.join(sorted(PASSES))}") from None
    return cls(**options)


def parse_pipeline(spec: str) -> list[Pass]:
    """``"dce,cse,simplify"`` -> pass objects."""
    return [get_pass(n.strip()) for n in spec.split(",") if n.strip()]
