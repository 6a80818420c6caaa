"""hlo_analysis: where a module's time goes and which fusions are left.

* ``cost``: the one cost model: flops / transcendentals / bytes per instruction,
  fusion and module, agreeing with XLA's HloCostAnalysis (``module_cost(m)``);
  which instructions run a kernel; the traffic a fusion saves; a kernel's time
  (``KernelTime``). The fusion passes, the scheduler's overlap, the roofline and
  the opportunities all price with it,
* ``devices``: H100, H200, A100, B200 specs (cited), the scheduler's rates and
  the measured host: the one place for a device's numbers,
* ``fusion_kind``: the one rule for a fusion's kind (kLoop, kInput, kOutput),
* ``roofline``: per-kernel time, bound and category, headroom,
* ``opportunities``: producer->consumer and sibling edges across kernels,
  grouped by opcode-chain signature, named by ``patterns`` (softmax, LayerNorm,
  RMSNorm, GELU, GQA attention, MoE routing, KV-cache update... from structure),
* ``scan`` / ``report``: the same over a corpus, in parallel, into a report.

Only the standard library and ``hlo_tools`` are imported here; each submodule
is imported on use.
"""

from .cost import module_cost

__all__ = ["module_cost"]
