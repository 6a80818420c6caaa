"""Passes over the HLO IR: the pass interface, a pass manager, and the passes.

    from passes import PassManager, get_pass
    PassManager([get_pass("dce"), get_pass("cse"), get_pass("simplify")], fixed_point=True).run(module)
"""

from .base import ComputationPass, Pass
from .manager import PassError, PassManager, PassRecord, PipelineResult
from .registry import available_passes, get_pass, parse_pipeline, register_pass

__all__ = [
    "ComputationPass",
    "Pass",
    "PassError",
    "PassManager",
    "PassRecord",
    "PipelineResult",
    "available_passes",
    "get_pass",
    "parse_pipeline",
    "register_pass",
]
