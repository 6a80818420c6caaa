"""Named passes, so the CLI and notebooks can say ``--passes dce,cse,simplify``.

The table is explicit: a pass gets a name on the command line by being listed
here, not as a side effect of importing its module.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import sys
import traceback
from pathlib import Path
from typing import Mapping, Sequence

from .base import Pass
from .cache_update import CacheUpdateInPlace
from .cse import CommonSubexpressionElimination
from .dce import DeadCodeElimination
from .fusion.call_inliner import CallInliner
from .fusion.horizontal import HorizontalFusion
from .fusion.library_dot import LibraryDotFusion
from .fusion.multi_output import GpuMultiOutputFusion, MultiOutputFusion
from .fusion.outline import InlineFusions
from .fusion.priority import GpuPriorityFusion, PriorityFusion
from .fusion.producer_consumer import GpuProducerConsumerFusion, ProducerConsumerFusion
from .fusion.reduction_epilogue import ReductionEpilogueFusion
from .fusion.triton_elementwise import TritonElementwiseFusion
from .portable import BroadcastsOfReshapes, ConvertsAfterTransposes, FoldReshapePairs
from .layout import EntryLayoutAssignment, LayoutNormalization, TransposeFolding
from .scheduling import LatencyHidingScheduler, MemoryScheduler
from .simplify import AlgebraicSimplifier

#: Every built-in pass, by its ``name``.
PASSES: Mapping[str, type[Pass]] = {cls.name: cls for cls in (
    BroadcastsOfReshapes,
    CacheUpdateInPlace,
    CallInliner,
    CommonSubexpressionElimination,
    ConvertsAfterTransposes,
    DeadCodeElimination,
    FoldReshapePairs,
    EntryLayoutAssignment,
    GpuMultiOutputFusion,
    GpuPriorityFusion,
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
    TritonElementwiseFusion,
)}


#: The user's pass files loaded here, by the module name they were loaded as: the XLA
#: worker loads them too, so that their passes can be sent there.
USER_FILES: dict[str, str] = {}

#: Passes from the user's files (``load_passes``), by name: looked up after the built-ins.
USER_PASSES: dict[str, type[Pass]] = {}


#: The entry-point group an installed package lists its passes in, name -> class:
#:     [project.entry-points."hlo_pass_lab.passes"]
#:     my-fusion = "mypkg.fusion:MyFusion"
ENTRY_POINT_GROUP = "hlo_pass_lab.passes"


def installed_passes() -> dict[str, importlib.metadata.EntryPoint]:
    """The passes installed packages declare (``ENTRY_POINT_GROUP``), by name; loaded
    only when named, so a broken package costs nothing until it is used."""
    return {ep.name: ep for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)}


def available_passes() -> list[str]:
    return sorted({**PASSES, **USER_PASSES, **installed_passes()})


def load_passes(path: str | Path) -> list[str]:
    """Registers the ``Pass`` subclasses that the Python file ``path`` defines (each
    by its ``name``) so that ``--passes`` can name them; returns their names.
    ``--load mypass.py`` on the command line.  An ``ImportError`` says what is wrong
    with the file (missing, raises on import, defines no pass, a built-in's name)."""
    path = Path(path)
    if not path.is_file():
        raise ImportError(f"{path}: no such file (--load takes a Python file that defines passes)")
    module_name = f"hlo_user_passes_{abs(hash(str(path.resolve())))}"
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"{path}: not a Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module  # dataclasses and pickling look classes up here
    try:
        spec.loader.exec_module(module)
    except Exception as e:  # noqa: BLE001 - the user's code: any error is the file's
        del sys.modules[module_name]
        where = traceback.extract_tb(e.__traceback__)[-1]
        raise ImportError(f"{path}:{where.lineno}: {type(e).__name__}: {e}") from None
    USER_FILES[module_name] = str(path.resolve())
    found = [c for c in vars(module).values()
             if isinstance(c, type) and issubclass(c, Pass) and c.__module__ == module_name and "name" in vars(c)]
    if not found:
        raise ImportError(f"{path}: defines no Pass subclass with a name (class MyPass(Pass): name = 'my-pass')")
    for cls in found:
        if cls.name in PASSES:
            raise ImportError(f"{path}: pass {cls.name!r} has the name of a built-in pass")
        USER_PASSES[cls.name] = cls
    return [c.name for c in found]


#: ``replay:FILE`` names a decisions file written by ``hlo tune`` (``DecisionFusion``).
REPLAY = "replay:"
#: ``rule:FILE[#NAME]`` names the rules of a findings file written by ``hlo findings`` (``RuleFusion``).
RULE = "rule:"


def _load_installed(name: str) -> type[Pass] | None:
    ep = installed_passes().get(name)
    if ep is None:
        return None
    try:
        cls = ep.load()
    except Exception as e:  # noqa: BLE001 - the package's code: any error is the package's
        raise KeyError(f"pass {name!r} from {ep.value} ({ENTRY_POINT_GROUP}) does not load: "
                       f"{type(e).__name__}: {e}") from None
    if not (isinstance(cls, type) and issubclass(cls, Pass)):
        raise KeyError(f"pass {name!r} from {ep.value} ({ENTRY_POINT_GROUP}) is not a Pass subclass")
    return cls


def get_pass(name: str, **options) -> Pass:
    """A new ``name`` pass built with ``options`` (``replay:FILE``: the decision set
    in FILE; ``rule:FILE[#NAME]``: rules found by ``hlo findings``); KeyError
    listing the known names, or saying what is wrong with FILE."""
    if name.startswith((REPLAY, RULE)):
        return _file_pass(name)
    cls = PASSES.get(name) or USER_PASSES.get(name) or _load_installed(name)
    if cls is None:
        raise KeyError(f"unknown pass {name!r}; available: {', '.join(available_passes())} "
                       "(--load FILE.py adds passes of your own)")
    return cls(**options)


def _file_pass(name: str) -> Pass:
    """The pass a ``replay:FILE`` or ``rule:FILE[#NAME]`` spec names; a KeyError
    saying what is wrong with the file."""
    from .fusion.decisions import DecisionFusion  # they import the fusion passes listed here
    from .fusion.rules import RuleFusion  # as above

    replay = name.startswith(REPLAY)
    spec = name[len(REPLAY if replay else RULE):]
    try:
        return DecisionFusion.load(spec) if replay else RuleFusion.load(spec)
    except OSError as e:
        raise KeyError(f"{name}: cannot read {e.filename or spec}: {e.strerror or e}") from None
    except (ValueError, KeyError, TypeError) as e:
        raise KeyError(f"{name}: {spec} is not a decisions file written by hlo tune: {e}" if replay
                       else f"{name}: {e}") from None


#: The best pipeline found on the bundled corpus (XLA:CPU, hooked route): every
#: fusion pass but priority (its own alternative to the first three), in the order
#: that lets each build on the last. Fewest kernels and bytes on all 15 runnable
#: modules; timings in docs/fusion_passes.md.
BEST = ("reduction-epilogue-fusion,producer-consumer-fusion,multi-output-fusion,producer-consumer-fusion,"
        "horizontal-fusion,library-dot-fusion,dce")
#: The best pipeline for XLA:GPU (``hlo_lab.study.gpu_study``, on-top mode: over
#: XLA's own fusions at the post-scheduler hook): BEST's shape under the GPU
#: profile (``gpu_profile``: every producer-consumer and sibling fusion priced by
#: the GPU roofline, launches counted; siblings whose heroes agree, reductions
#: included), without the CPU-only reduction-epilogue rule (a reduction under a
#: broadcast is recomputed per element on a GPU) and library-dot fusion, led by
#: XLA:GPU's producer-first priority fusion (a producer into all its consumers)
#: and the elementwise work around XLA's Triton normalizations joined to them.
#: Figures in docs/xla_gpu_modes.md.
GPU_BEST = ("cache-update-in-place,gpu-priority-fusion,triton-elementwise-fusion,gpu-producer-consumer-fusion,"
            "gpu-multi-output-fusion,gpu-producer-consumer-fusion,horizontal-fusion,dce")
#: The priority-queue alternative.
PRIORITY = "priority-fusion,horizontal-fusion,library-dot-fusion,dce"
#: Cleanups before fusing the pre-optimization module (text route).
TEXT_PREFIX = "call-inliner,simplify,cse,dce"


#: Pipelines by name: a spec may name one wherever it names a pass (``--passes gpu-best``).
NAMED_PIPELINES: dict[str, str] = {"best": BEST, "gpu-best": GPU_BEST, "priority": PRIORITY}


def pass_names(spec: str) -> list[str]:
    """The pass names of ``spec``, each pipeline name replaced by its passes."""
    return [m.strip() for n in spec.split(",") if n.strip() for m in NAMED_PIPELINES.get(n.strip(), n.strip()).split(",")]


def parse_pipeline(spec: str | Sequence[Pass]) -> list[Pass]:
    """``"dce,cse,simplify"`` (pipeline names such as ``best`` included) -> pass objects;
    pass objects are returned as a list. KeyError for an unknown name."""
    if not isinstance(spec, str):
        return list(spec)
    try:
        return [get_pass(n) for n in pass_names(spec)]
    except KeyError as e:
        raise KeyError(f"{e.args[0]}; pipelines: {', '.join(NAMED_PIPELINES)}") from None
