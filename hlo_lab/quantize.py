"""``hlo quantize``: a module's chosen dots rewritten to 8 bits (``passes.quantize``),
and for each the three answers a quantization what-if needs:

- lowering: what XLA:GPU made of it on a deviceless compile for ``target``
  (an 8-bit Triton GEMM or cuBLAS call, or a silent fallback to bf16/f16),
  read from the optimized module (``hlo_analysis.quantization``);
- error: the quantized module's outputs against the original's on XLA:CPU, same
  inputs: max abs/rel error and the share of elements within XLA's own fp8 test
  tolerance (1e-2 absolute and relative); on the whole module where it fits in
  memory, else on each distinct dot extracted with its contraction and types;
- speed: predicted time before/after on ``target`` by the one cost model, the GEMM
  kernels alone and the whole module, each side as XLA:GPU optimized it.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field, replace
from typing import Any

from hlo_tools.ir import Computation, Instruction, Module
from hlo_tools.opcode import HloOpcode
from hlo_tools.rewriter import Rewriter
from hlo_tools.shape import Shape
from xla_bridge.compiler import compile as xla_compile
from xla_bridge.runner import Comparison, compare
from hlo_analysis import devices
from hlo_analysis.cost import analyze, dot_flops, shape_size
from hlo_analysis.quantization import Gemm, gemms, lowered, predicted_times
from passes.quantize import Choice, QuantizeDots, quantized_tag

#: the largest split-K factor a merged GEMM's output is checked against (XLA:GPU
#: splits a small-M GEMM's contraction and writes the partial sums side by side)
MAX_SPLIT_K = 16
#: XLA's fp8 GEMM tests compare with this absolute and relative tolerance
FP8_TOLERANCE = 1e-2
ERROR_MODES = ("auto", "module", "dots", "none")
#: ``auto`` runs the whole module on XLA:CPU when its buffers (every value of every
#: unfused computation, both sides) stay under this; else the extracted dots
WHOLE_MODULE_BYTES = 2 << 30
#: an extracted dot keeps its contraction; its other dimensions are cut to this many
#: rows and as many columns (an element's error depends on its contraction, not on
#: how many elements there are)
EXTRACTED_ROWS = 128


@dataclass
class QuantizeReport:
    module: str
    form: str
    target: str
    options: dict[str, str] = field(default_factory=dict)
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
        return {"module": self.module, "form": self.form, "target": self.target, "options": self.options,
                "lowered_8bit_share": self.lowered_share, "fallbacks": [d["dot"] for d in self.fallbacks],
                "dots": self.dots, "error": self.error, "speed": self.speed}


def found_gemms(chosen: list[Instruction], kernels: list[Gemm]) -> dict[str, tuple[Gemm | None, str | None]]:
    """Per chosen dot, the GEMM it became and the dot whose GEMM it shares. XLA's
    DotMerger joins dots that read one operand (gate and up; Q, K and V) into one
    GEMM that keeps one's metadata and writes all their outputs side by side: a dot
    without a GEMM of its own is in the GEMM of a dot it shares an operand with when
    that GEMM's output elements are those of the two plus other such dots (times
    the split-K factor, when XLA splits the contraction), and its flops theirs."""
    own = {d.name: lowered(quantized_tag(d.name), kernels) for d in chosen}
    out: dict[str, tuple[Gemm | None, str | None]] = {n: (g, None) for n, g in own.items()}
    for peer in chosen:
        g = own[peer.name]
        if g is None:
            continue
        mine = {id(o) for o in peer.operands}
        orphans = [d for d in chosen if own[d.name] is None and mine & {id(o) for o in d.operands}]
        for k in range(1, min(len(orphans), 6) + 1):  # a few dots per merge: a small search
            for group in itertools.combinations(orphans, k):
                elements = peer.shape.num_elements + sum(d.shape.num_elements for d in group)
                flops = dot_flops(peer) + sum(dot_flops(d) for d in group)
                # split-K writes its partial sums side by side too: a small multiple
                splits, rest = divmod(g.output_elements, elements)
                if rest == 0 and 1 <= splits <= MAX_SPLIT_K and g.flops >= 0.99 * flops:
                    for d in group:
                        out.setdefault(d.name, (None, None))
                        if out[d.name][0] is None:
                            out[d.name] = (g, peer.name)
    return out


def footprint(module: Module) -> int:
    """Bytes of every value of every unfused computation: what running it may hold."""
    fused = {id(c) for c in module.fusion_computations()}
    return sum(shape_size(i.shape) for c in module.computations if id(c) not in fused for i in c)


def _summary(comparisons: list[tuple[Comparison, float]]) -> dict[str, Any]:
    """Max errors over ``comparisons`` and the share of elements within tolerance:
    each comparison's share of its elements, weighted by its weight (the elements
    it stands for)."""
    outs = [o for c, _ in comparisons for o in c.outputs]
    shares = [(1 - sum(o.mismatches for o in c.outputs) / size, w) for c, w in comparisons
              if (size := sum(o.size for o in c.outputs))]
    weight = sum(w for _, w in shares)
    inside = sum(share * w for share, w in shares)
    verdicts = {c.verdict for c, _ in comparisons}
    return {"max_abs": max((o.max_abs for o in outs), default=0.0),
            "max_rel": max((o.max_rel for o in outs), default=0.0),
            "within_tolerance": inside / weight if weight else 1.0,
            "verdict": "mismatch" if "mismatch" in verdicts else "close" if "close" in verdicts else "exact",
            "message": "; ".join(sorted({c.message for c, _ in comparisons if c.message}))[:500]}


def _cut(dims: tuple[int, ...], keep: set[int], cap: dict[int, int], budget: int) -> tuple[int, ...]:
    out = []
    for d, size in enumerate(dims):
        if d in keep:
            out.append(size)
        elif d in cap:
            out.append(cap[d])
        else:
            out.append(max(1, min(size, budget)))
            budget = max(1, budget // out[-1])
    return tuple(out)


def extracted(choice: Choice) -> tuple[Module, Choice]:
    """A module of ``choice``'s dot alone: its contraction and types kept, batch
    dimensions cut to 2 and the other free ones to ``EXTRACTED_ROWS`` rows and columns."""
    dot = choice.dot
    dn = dot.dot_dimension_numbers
    lhs, rhs = (o.shape for o in dot.operands)
    lb = {d: min(lhs.dims[d], 2) for d in dn.lhs_batch_dims}
    rb = {r: lb[l] for l, r in zip(dn.lhs_batch_dims, dn.rhs_batch_dims)}
    ld = _cut(lhs.dims, set(dn.lhs_contracting_dims), lb, EXTRACTED_ROWS)
    rd = _cut(rhs.dims, set(dn.rhs_contracting_dims), rb, EXTRACTED_ROWS)
    out = [ld[d] for d in dn.lhs_batch_dims]
    out += [s for d, s in enumerate(ld) if d not in dn.lhs_batch_dims and d not in dn.lhs_contracting_dims]
    out += [s for d, s in enumerate(rd) if d not in dn.rhs_batch_dims and d not in dn.rhs_contracting_dims]
    comp = Computation("main")
    a = comp.add_instruction(Instruction("lhs", HloOpcode.PARAMETER, Shape.array(lhs.element_type.value, ld),
                                         parameter_number=0))
    b = comp.add_instruction(Instruction("rhs", HloOpcode.PARAMETER, Shape.array(rhs.element_type.value, rd),
                                         parameter_number=1))
    d = Instruction.create(HloOpcode.DOT, Shape.array(dot.shape.element_type.value, tuple(out)), [a, b], dot.name)
    d.dot_dimension_numbers = dn
    comp.set_root(comp.add_instruction(d))
    module = Module(f"extracted_{dot.name}")
    module.add_computation(comp, entry=True)
    return module, replace(choice, dot=d)


def _signature(choice: Choice) -> tuple:
    dot = choice.dot
    return (tuple(o.shape.to_text() for o in dot.operands), dot.shape.element_type.value, choice.lhs, choice.rhs,
            dot.dot_dimension_numbers)


def _on(module: Module, plan: list[Choice]) -> list[Choice]:
    """``plan`` for a clone of the module it was made on: the same dots, by computation and name."""
    return [replace(c, dot=module.get_computation(c.dot.parent.name).get_instruction(c.dot.name)) for c in plan]


def dot_errors(plan: list[Choice], qpass: QuantizeDots, seed: int = 0) -> tuple[dict[str, Any], dict[str, dict]]:
    """The error of each distinct dot of ``plan`` extracted (``extracted``), the
    original against the same dot quantized by ``qpass``, same inputs; the summary
    weighs each by the output elements of the dots it stands for."""
    groups: dict[tuple, list[Choice]] = {}
    for c in plan:
        groups.setdefault(_signature(c), []).append(c)
    per_dot: dict[str, dict] = {}
    runs = []
    for members in groups.values():
        original, choice = extracted(members[0])
        quantized = original.clone()
        qpass.apply(quantized, [replace(choice, dot=quantized.entry.root)])
        c = compare(original, quantized, backend="cpu", seed=seed, rtol=FP8_TOLERANCE, atol=FP8_TOLERANCE,
                    contained=True)
        runs.append((c, float(sum(m.dot.shape.num_elements for m in members))))
        s = _summary([(c, 1.0)])
        for m in members:
            per_dot[m.dot.name] = {k: s[k] for k in ("max_abs", "max_rel", "within_tolerance")}
    return {**_summary(runs), "on": f"{len(groups)} distinct dots extracted"}, per_dot


def quantize(module: Module, *, form: str = "fp8", scope: tuple[str, ...] = ("all",), min_flops: int = 0,
             skip: tuple[str, ...] = (), granularity: str = "", scales: str = "amax", gradients: str = "e4m3",
             weights: str = "module", target: str = "h100", seed: int = 0, error: str = "auto") -> tuple[Module, QuantizeReport]:
    """The quantized module and its report (module docstring). XLA runs in the worker."""
    if error not in ERROR_MODES:
        raise ValueError(f"error is one of {', '.join(ERROR_MODES)}, not {error!r}")
    qpass = QuantizeDots(form=form, scope=scope, min_flops=min_flops, skip=skip, granularity=granularity,
                         scales=scales, gradients=gradients, weights=weights)
    plan = qpass.plan(module)
    chosen = [c.dot for c in plan]
    quantized = module.clone()
    qpass.apply(quantized, _on(quantized, plan))
    report = QuantizeReport(module.name, form, target, {"granularity": "channel" if qpass.per_channel else "tensor",
                                                        "scales": scales, "gradients": gradients,
                                                        "weights": weights})
    if not chosen:
        return quantized, report
    # the original with the same tags (metadata does not change what XLA does): which
    # dots are GEMMs at stock at all (XLA strength-reduces a dot with a size-1
    # contraction to elementwise code; that dot has no GEMM to lower to 8 bits)
    tagged = module.clone()
    rw = Rewriter()
    for c in _on(tagged, plan):
        rw.set_attribute(c.dot, "metadata", f'{{op_name="{quantized_tag(c.dot.name)}"}}')
    before = xla_compile(tagged, "gpu", "stock", target=target, contained=True).optimized_module
    after = xla_compile(quantized, "gpu", "stock", target=target, contained=True).optimized_module
    cost_before, cost_after = analyze(before), analyze(after)  # one cost analysis a side, for both uses below
    stock, kernels = gemms(before, cost_before), gemms(after, cost_after)
    after_gemms, stock_gemms = found_gemms(chosen, kernels), found_gemms(chosen, stock)
    for c in plan:
        d = c.dot
        (g, merged), (was, _) = after_gemms[d.name], stock_gemms[d.name]
        report.dots.append({"dot": d.name, "computation": d.parent.name, "role": c.role, "flops": dot_flops(d),
                            "quantized_types": [c.lhs, c.rhs], **qpass.used(module, c),
                            "gemm_at_stock": was.name if was else None, "stock_types": list(was.operand_types) if was else [],
                            "gemm": g.name if g else None, "kind": g.kind if g else None, "merged_with": merged,
                            "types": list(g.operand_types) if g else [], "reads": list(g.read_types) if g else [],
                            # weight-only int8 multiplies in the original type by design: it is 8-bit when the GEMM reads s8
                            "eight_bit": bool(g and (g.reads_8bit if form == "int8w" else g.eight_bit))})
    dev = devices.load(target)
    b, a = predicted_times(before, dev, cost_before, stock), predicted_times(after, dev, cost_after, kernels)
    report.speed = {"gemm_before_s": b.gemm_s, "gemm_after_s": a.gemm_s, "module_before_s": b.module_s,
                    "module_after_s": a.module_s,
                    "gemm_speedup": b.gemm_s / a.gemm_s if a.gemm_s else 0.0,
                    "module_speedup": b.module_s / a.module_s if a.module_s else 0.0}
    if error == "auto":
        error = "module" if 2 * footprint(module) <= WHOLE_MODULE_BYTES else "dots"
    # delayed scaling whose scales equal the current amax, and weights quantized by
    # the caller with them, compute what in-module scales do; the error is measured
    # that way (the new parameters have no values)
    twin = qpass if (scales, weights) == ("amax", "module") else replace(qpass, scales="amax", weights="module")
    if error == "module":
        measured = quantized if twin is qpass else module.clone()
        if twin is not qpass:
            twin.apply(measured, _on(measured, plan))
        c = compare(module, measured, backend="cpu", seed=seed, rtol=FP8_TOLERANCE, atol=FP8_TOLERANCE,
                    contained=True)
        report.error = {**_summary([(c, 1.0)]), "on": "the whole module"}
    elif error == "dots":
        report.error, per_dot = dot_errors(plan, twin, seed)  # scales and weights do not change the plan
        for d in report.dots:
            d["error"] = per_dot.get(d["dot"], {})
    if report.error and twin is not qpass:
        report.error["on"] += " (scales equal to the current amax)"
    return quantized, report
