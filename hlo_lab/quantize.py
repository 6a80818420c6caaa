"""``hlo quantize``: a module's chosen dots rewritten to 8 bits (``passes.quantize``),
and for each the three answers a quantization what-if needs:

- lowering: what XLA:GPU made of it on a deviceless compile for ``target``
  (an 8-bit Triton GEMM or cuBLAS call, or a silent fallback to bf16/f16),
  read from the optimized module (``hlo_analysis.quantization``);
- error: the quantized module's outputs against the original's on XLA:CPU, same
  inputs: max abs/rel error and the share of elements within XLA's own fp8 test
  tolerance (1e-2 absolute and relative);
- speed: predicted time before/after on ``target`` by the one cost model, the GEMM
  kernels alone and the whole module, each side as XLA:GPU optimized it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hlo_tools.ir import Module
from hlo_tools.rewriter import Rewriter
from xla_bridge.compiler import compile as xla_compile
from xla_bridge.runner import compare
from hlo_analysis import devices
from hlo_analysis.cost import analyze, dot_flops
from hlo_analysis.quantization import gemms, lowered, predicted_times
from passes.quantize import QuantizeDots, quantized_tag

#: XLA's fp8 GEMM tests compare with this absolute and relative tolerance
FP8_TOLERANCE = 1e-2


@dataclass
class QuantizeReport:
    module: str
    form: str
    target: str
    dots: list[dict[str, Any]] = field(default_factory=list)
    error: dict[str, Any] = field(default_factory=dict)
    speed: dict[str, float] = field(default_factory=dict)

    @property
    def gemm_dots(self) -> list[dict[str, Any]]:
        """The rewritten dots that are GEMMs at stock (the others XLA turns into elementwise code)."""
        return [d for d in self.dots if d["gemm_at_stock"]]

    @property
    def lowered_share(self) -> float:
        """Share of the flops of the rewritten dots that are GEMMs at stock that run in an 8-bit GEMM."""
        total = sum(d["flops"] for d in self.gemm_dots)
        return sum(d["flops"] for d in self.gemm_dots if d["eight_bit"]) / total if total else 0.0

    @property
    def fallbacks(self) -> list[dict[str, Any]]:
        """GEMMs at stock that do not run on 8 bits after the rewrite."""
        return [d for d in self.gemm_dots if not d["eight_bit"]]

    def as_dict(self) -> dict[str, Any]:
        return {"module": self.module, "form": self.form, "target": self.target, "lowered_8bit_share": self.lowered_share,
                "fallbacks": [d["dot"] for d in self.fallbacks],
                "dots": self.dots, "error": self.error, "speed": self.speed}


def quantize(module: Module, *, form: str = "fp8", scope: tuple[str, ...] = ("all",), min_flops: int = 0,
             skip: tuple[str, ...] = (), target: str = "h100", seed: int = 0,
             measure_error: bool = True) -> tuple[Module, QuantizeReport]:
    """The quantized module and its report (module docstring). XLA runs in the worker."""
    qpass = QuantizeDots(form=form, scope=scope, min_flops=min_flops, skip=skip)
    chosen = qpass.chosen(module)
    quantized = module.clone()
    qpass.run(quantized)
    report = QuantizeReport(module.name, form, target)
    if not chosen:
        return quantized, report
    # the original with the same tags (metadata does not change what XLA does): which
    # dots are GEMMs at stock at all (XLA strength-reduces a dot with a size-1
    # contraction to elementwise code; that dot has no GEMM to lower to 8 bits)
    tagged = module.clone()
    rw = Rewriter()
    for d in chosen:
        rw.set_attribute(tagged.get_computation(d.parent.name).get_instruction(d.name), "metadata",
                         f'{{op_name="{quantized_tag(d.name)}"}}')
    before = xla_compile(tagged, "gpu", "stock", target=target, contained=True).optimized_module
    after = xla_compile(quantized, "gpu", "stock", target=target, contained=True).optimized_module
    cost_before, cost_after = analyze(before), analyze(after)  # one cost analysis a side, for both uses below
    stock, kernels = gemms(before, cost_before), gemms(after, cost_after)
    for d in chosen:
        tag = quantized_tag(d.name)
        g, was = lowered(tag, kernels), lowered(tag, stock)
        report.dots.append({"dot": d.name, "computation": d.parent.name, "flops": dot_flops(d),
                            "gemm_at_stock": was.name if was else None, "stock_types": list(was.operand_types) if was else [],
                            "gemm": g.name if g else None, "kind": g.kind if g else None,
                            "types": list(g.operand_types) if g else [], "reads": list(g.read_types) if g else [],
                            # weight-only int8 multiplies in the original type by design: it is 8-bit when the GEMM reads s8
                            "eight_bit": bool(g and (g.reads_8bit if form == "int8w" else g.eight_bit))})
    dev = devices.load(target)
    b, a = predicted_times(before, dev, cost_before, stock), predicted_times(after, dev, cost_after, kernels)
    report.speed = {"gemm_before_s": b.gemm_s, "gemm_after_s": a.gemm_s, "module_before_s": b.module_s,
                    "module_after_s": a.module_s,
                    "gemm_speedup": b.gemm_s / a.gemm_s if a.gemm_s else 0.0,
                    "module_speedup": b.module_s / a.module_s if a.module_s else 0.0}
    if measure_error:
        c = compare(module, quantized, backend="cpu", seed=seed, rtol=FP8_TOLERANCE, atol=FP8_TOLERANCE,
                    contained=True)
        size = sum(o.size for o in c.outputs)
        report.error = {"max_abs": max((o.max_abs for o in c.outputs), default=0.0),
                        "max_rel": max((o.max_rel for o in c.outputs), default=0.0),
                        "within_tolerance": 1 - sum(o.mismatches for o in c.outputs) / size if size else 1.0,
                        "verdict": c.verdict, "message": c.message}
    return quantized, report
