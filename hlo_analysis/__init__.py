"""Where a module's time goes and which fusions are left, in pure Python over the IR:
the one cost model (``cost``), devices' tables, roofline, legality, opportunities and
patterns, kernels, memory, overlap, collectives, regions, units. Nothing here compiles
(what measures with XLA is ``hlo_lab.measured``); each submodule is imported on use.
Design: docs/analysis.md."""

from .cost import module_cost

__all__ = ["module_cost"]
