"""Quantization what-ifs: chosen dots rewritten to run on 8-bit operands, the
quantize cost (amax reductions, scaling, converts) part of the module.

Forms (``QuantizeDots.form``), after XLA's own patterns (openxla/xla
``gemm_rewriter.cc`` and its fp8 tests; NVIDIA JAX-Toolbox ``NATIVE_FP8.md``):

- ``fp8``: a dot written directly on E4M3 operands, accumulating in f32, the two
  per-tensor scales applied after it (epilogue scaling): what keeps fp8 inside
  XLA:GPU's GEMM on a deviceless H100 compile.
- ``fp8-qdq``: quantize then dequantize each operand in the original type, the
  dot in that type: the documented pattern XLA's GEMM rewriter looks for.
- ``int8``: s8 x s8 operands accumulating in s32, scales after it.
- ``int8w``: weight-only: the right-hand operand stored as s8 with per-channel
  scales (one per output column), dequantized before a dot in the original type.

Scales are computed in the module from each operand's absolute maximum (per
tensor; per output channel for ``int8w``), so the quantize cost is priced with
everything else. Which dots: ``scope`` (pattern labels, or ``all``), a size floor
(``min_flops``) and a skip list of names.
"""

from __future__ import annotations

from dataclasses import dataclass

from hlo_tools import Computation, Instruction, Module
from hlo_tools.attributes import format_int_list, parse_int_list
from hlo_tools.opcode import HloOpcode
from hlo_tools.rewriter import Rewriter
from hlo_tools.shape import Shape
from hlo_analysis.cost import dot_flops
from hlo_analysis.patterns import GELU, GQA, SWIGLU, Patterns

from .base import Pass

_H = HloOpcode
FORMS = ("fp8", "fp8-qdq", "int8", "int8w")
#: What ``scope`` names: a dot's role in the model (``dot_role``).
ROLES = ("attn", "mlp", "logits", "proj")
#: the largest finite magnitude of each 8-bit type
_QMAX = {"f8e4m3fn": 448.0, "s8": 127.0}
_FLOATS = ("bf16", "f16", "f32")


def _like(shape: Shape, element_type: str) -> Shape:
    return Shape.array(element_type, shape.dims, shape.layout)


def _etype(shape: Shape) -> str:
    return shape.element_type.value


def dot_role(patterns: Patterns, dot: Instruction, widest: int) -> str:
    """``attn``: a dot of an attention pattern (QK, PV); ``mlp``: a dot feeding or
    fed by a SwiGLU or GELU (up, gate, down projections); ``logits``: a dot whose
    output columns are the module's widest (``widest``: the vocabulary projection);
    ``proj``: any other (attention's Q/K/V/O projections)."""
    if GQA in patterns.labels(dot):
        return "attn"
    near = [*patterns.flow.downstream(dot), *(patterns.flow.through(o) for o in dot.operands)]
    if any({SWIGLU, GELU} & set(patterns.labels(i)) for i in near):
        return "mlp"
    if _columns(dot) == widest and widest > 0:
        return "logits"
    return "proj"


def _columns(dot: Instruction) -> int:
    """The size of the rhs's free (non-contracting, non-batch) dimensions."""
    rhs = dot.operands[1].shape.dims
    used = set(parse_int_list(dot.attributes.get("rhs_contracting_dims") or "")) | set(
        parse_int_list(dot.attributes.get("rhs_batch_dims") or ""))
    n = 1
    for d, size in enumerate(rhs):
        if d not in used:
            n *= size
    return n


def quantized_tag(dot_name: str) -> str:
    """The ``op_name`` the quantized dot of ``dot_name`` carries in its metadata."""
    return f"hlo-quantize/{dot_name}"


@dataclass(frozen=True)
class QuantizeDots(Pass):
    """Rewrites the chosen dots of a module to ``form`` (module docstring)."""

    name = "quantize-dots"
    form: str = "fp8"
    #: dot roles (``ROLES``, ``dot_role``), or ("all",)
    scope: tuple[str, ...] = ("all",)
    min_flops: int = 0
    skip: tuple[str, ...] = ()

    def __post_init__(self):
        if self.form not in FORMS:
            raise ValueError(f"quantize-dots: unknown form {self.form!r}; one of {', '.join(FORMS)}")
        bad = [s for s in self.scope if s != "all" and s not in ROLES]
        if bad:
            raise ValueError(f"quantize-dots: unknown scope {', '.join(bad)}; use all or {', '.join(ROLES)}")

    # -- which dots ------------------------------------------------------------------
    def chosen(self, module: Module) -> list[Instruction]:
        """The dots this pass rewrites: two floating operands, outside fusion bodies,
        in scope, at least ``min_flops``, not skipped."""
        fused = {id(c) for c in module.fusion_computations()}
        dots = [i for c in module.computations if id(c) not in fused for i in c
                if i.opcode is _H.DOT and len(i.operands) == 2
                and not any(o.shape.is_tuple or _etype(o.shape) not in _FLOATS for o in i.operands)]
        if "all" not in self.scope:
            patterns = Patterns(module)
            widest = max((_columns(d) for d in dots if GQA not in patterns.labels(d)), default=0)
            dots = [d for d in dots if dot_role(patterns, d, widest) in self.scope]
        return [d for d in dots if d.name not in self.skip and dot_flops(d) >= self.min_flops]

    # -- building blocks ---------------------------------------------------------------
    def _max_computation(self, module: Module, rw: Rewriter) -> Computation:
        name = "quantize_max_f32"
        for c in module.computations:
            if c.name == name:
                return c
        comp = Computation(name)
        a = comp.add_instruction(Instruction("a", _H.PARAMETER, Shape.array("f32", ()), parameter_number=0))
        b = comp.add_instruction(Instruction("b", _H.PARAMETER, Shape.array("f32", ()), parameter_number=1))
        comp.set_root(comp.add_instruction(Instruction.create(_H.MAXIMUM, "f32[]", [a, b], "max")))
        return rw.add_computation(module, comp)

    def _scale(self, x32: Instruction, keep: tuple[int, ...], qmax: float, anchor: Instruction, rw: Rewriter,
               maxc: Computation) -> Instruction:
        """``amax(|x|) / qmax`` over all dimensions but ``keep`` (f32), at least a tiny
        positive number so an all-zero tensor divides cleanly."""
        ins = lambda i: rw.insert_before(anchor, i)  # noqa: E731 - local shorthand
        dims = x32.shape.dims
        out_shape = Shape.array("f32", tuple(dims[d] for d in keep))
        absx = ins(Instruction.create(_H.ABS, x32.shape, [x32], "quant.abs"))
        zero = ins(Instruction.create(_H.CONSTANT, "f32[]", [], "quant.zero", literal=0.0))
        reduced = [d for d in range(len(dims)) if d not in keep]
        amax = ins(Instruction.create(_H.REDUCE, out_shape, [absx, zero], "quant.amax",
                                      dimensions=format_int_list(reduced)))
        rw.set_called_computations(amax, "to_apply", [maxc])
        q = ins(Instruction.create(_H.CONSTANT, "f32[]", [], "quant.qmax", literal=qmax))
        tiny = ins(Instruction.create(_H.CONSTANT, "f32[]", [], "quant.tiny", literal=1e-30))
        if keep:  # a scale per kept dimension: the constants broadcast to it
            q = ins(Instruction.create(_H.BROADCAST, out_shape, [q], "quant.qmax.b", dimensions="{}"))
            tiny = ins(Instruction.create(_H.BROADCAST, out_shape, [tiny], "quant.tiny.b", dimensions="{}"))
        s = ins(Instruction.create(_H.DIVIDE, out_shape, [amax, q], "quant.scale"))
        return ins(Instruction.create(_H.MAXIMUM, out_shape, [s, tiny], "quant.scale"))

    def _quantize(self, x: Instruction, etype: str, keep: tuple[int, ...], anchor: Instruction, rw: Rewriter,
                  maxc: Computation) -> tuple[Instruction, Instruction]:
        """``x`` as ``etype`` (scaled into its range, rounded, clamped) and its f32
        scale (a scalar, or one per ``keep`` dimension)."""
        ins = lambda i: rw.insert_before(anchor, i)  # noqa: E731 - local shorthand
        qmax = _QMAX[etype]
        x32 = x if _etype(x.shape) == "f32" else ins(Instruction.create(_H.CONVERT, _like(x.shape, "f32"), [x],
                                                                               "quant.f32"))
        scale = self._scale(x32, keep, qmax, anchor, rw, maxc)
        sb = ins(Instruction.create(_H.BROADCAST, x32.shape, [scale], "quant.scale.b", dimensions=format_int_list(keep)))
        y = ins(Instruction.create(_H.DIVIDE, x32.shape, [x32, sb], "quant.scaled"))
        if etype == "s8":
            y = ins(Instruction.create(_H.ROUND_NEAREST_EVEN, x32.shape, [y], "quant.round"))
        lo = ins(Instruction.create(_H.CONSTANT, "f32[]", [], "quant.lo", literal=-qmax))
        hi = ins(Instruction.create(_H.CONSTANT, "f32[]", [], "quant.hi", literal=qmax))
        y = ins(Instruction.create(_H.CLAMP, x32.shape, [lo, y, hi], "quant.clamp"))
        return ins(Instruction.create(_H.CONVERT, _like(x.shape, etype), [y], "quant.q")), scale

    def _dequantize(self, q: Instruction, scale: Instruction, keep: tuple[int, ...], etype: str,
                    anchor: Instruction, rw: Rewriter) -> Instruction:
        ins = lambda i: rw.insert_before(anchor, i)  # noqa: E731 - local shorthand
        shape = _like(q.shape, etype)
        y = ins(Instruction.create(_H.CONVERT, shape, [q], "quant.dq"))
        s = scale if etype == "f32" else ins(Instruction.create(_H.CONVERT, _like(scale.shape, etype), [scale],
                                                                "quant.scale.t"))
        sb = ins(Instruction.create(_H.BROADCAST, shape, [s], "quant.scale.b", dimensions=format_int_list(keep)))
        return ins(Instruction.create(_H.MULTIPLY, shape, [y, sb], "quant.dq"))

    # -- the rewrite ---------------------------------------------------------------------
    def _rewrite(self, dot: Instruction, module: Module, rw: Rewriter, maxc: Computation) -> None:
        a, b = dot.operands
        out_t = _etype(dot.shape)
        dims = {k: dot.attributes.get(k) for k in ("lhs_batch_dims", "lhs_contracting_dims", "rhs_batch_dims",
                                                   "rhs_contracting_dims") if dot.attributes.get(k)}
        if self.form == "int8w":
            rhs_free = tuple(d for d in range(len(b.shape.dims))
                             if d not in parse_int_list(dims.get("rhs_contracting_dims") or ""))
            qb, sb = self._quantize(b, "s8", rhs_free, dot, rw, maxc)
            deq = self._dequantize(qb, sb, rhs_free, _etype(b.shape), dot, rw)
            new = qdot = rw.insert_before(dot, Instruction.create(_H.DOT, dot.shape, [a, deq], dot.name + ".int8w",
                                                                  **dims))
        elif self.form == "fp8-qdq":
            qa, sa = self._quantize(a, "f8e4m3fn", (), dot, rw, maxc)
            qb, sb = self._quantize(b, "f8e4m3fn", (), dot, rw, maxc)
            da = self._dequantize(qa, sa, (), _etype(a.shape), dot, rw)
            db = self._dequantize(qb, sb, (), _etype(b.shape), dot, rw)
            new = qdot = rw.insert_before(dot, Instruction.create(_H.DOT, dot.shape, [da, db], dot.name + ".qdq", **dims))
        else:
            etype, acc = ("f8e4m3fn", "f32") if self.form == "fp8" else ("s8", "s32")
            qa, sa = self._quantize(a, etype, (), dot, rw, maxc)
            qb, sb = self._quantize(b, etype, (), dot, rw, maxc)
            low = qdot = rw.insert_before(dot, Instruction.create(_H.DOT, _like(dot.shape, acc), [qa, qb],
                                                           dot.name + "." + self.form, **dims))
            ins = lambda i: rw.insert_before(dot, i)  # noqa: E731 - local shorthand
            y = low if acc == "f32" else ins(Instruction.create(_H.CONVERT, _like(dot.shape, "f32"), [low], "quant.f32"))
            s = ins(Instruction.create(_H.MULTIPLY, "f32[]", [sa, sb], "quant.scale.ab"))
            s = ins(Instruction.create(_H.BROADCAST, y.shape, [s], "quant.scale.b", dimensions="{}"))
            y = ins(Instruction.create(_H.MULTIPLY, y.shape, [y, s], "quant.out"))
            new = y if out_t == "f32" else ins(Instruction.create(_H.CONVERT, dot.shape, [y], "quant.out"))
        # XLA renames dots on its way (dot_general.26 -> dot.52) but keeps their
        # metadata: the tag is how hlo_analysis.quantization finds the GEMM it became
        rw.set_attribute(qdot, "metadata", f'{{op_name="{quantized_tag(dot.name)}"}}')
        rw.replace_all_uses_with(dot, new)
        rw.erase(dot)

    def run(self, module: Module) -> bool:
        dots = self.chosen(module)
        if not dots:
            return False
        rw = Rewriter()
        maxc = self._max_computation(module, rw)
        for dot in dots:
            self._rewrite(dot, module, rw, maxc)
        return True
