"""Passes over the HLO IR: the pass interface, pipelines (which are passes), and the passes.

    from passes import FixedPoint, PassManager, get_pass
    cleanup = PassManager([get_pass("dce"), get_pass("cse"), FixedPoint(get_pass("simplify"))], name="cleanup")
    changed = PassManager([cleanup, get_pass("producer-consumer-fusion")]).run(module)
    print(cleanup.run_with_report(module).table())   # what each pass did
"""

from .base import ComputationPass, FusionPass, Pass, decides_fusion
from .fixed_point import FixedPoint
from .manager import PassError, PassManager, PassRecord, PipelineResult
from .registry import PASSES, available_passes, get_pass, parse_pipeline

__all__ = [
    "PASSES",
    "ComputationPass",
    "FixedPoint",
    "FusionPass",
    "Pass",
    "PassError",
    "PassManager",
    "PassRecord",
    "PipelineResult",
    "available_passes",
    "decides_fusion",
    "get_pass",
    "parse_pipeline",
]
