"""fusion_analysis: where a module's time goes and which fusions are left.

* ``cost``: flops / transcendentals / bytes per instruction, fusion and module,
  agreeing with XLA's HloCostAnalysis (``module_cost(m)``),
* ``devices``: H100, H200, A100, B200 specs (cited) and the measured host,
* ``roofline``: per-kernel time, bound and category, headroom,
* ``opportunities``: producer->consumer and sibling edges across kernels,
  grouped by opcode-chain signature,
* ``scan`` / ``report``: the same over a corpus, in parallel, into a report.

Only the standard library and ``hlo_tools`` are imported here; each submodule
is imported on use.
"""

from .cost import module_cost

__all__ = ["module_cost"]
