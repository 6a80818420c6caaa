"""Quantization what-ifs: chosen dots rewritten to run on 8-bit operands, the
quantize cost (amax reductions, scaling, converts) part of the module.

Forms (``QuantizeDots.form``), after XLA's own patterns (openxla/xla
``gemm_rewriter.cc`` and its fp8 tests; NVIDIA JAX-Toolbox ``NATIVE_FP8.md``):

- ``fp8``: a dot written directly on fp8 operands (E4M3; E5M2 for gradients with
  ``gradients="e5m2"``), accumulating in f32, the scales applied after it
  (epilogue scaling): what keeps fp8 inside XLA:GPU's GEMM on a deviceless H100.
- ``fp8-qdq``: quantize then dequantize each operand in the original type, the
  dot in that type: the documented pattern XLA's GEMM rewriter looks for.
- ``int8``: s8 x s8 operands accumulating in s32, scales after it.
- ``int8w``: weight-only: the right-hand operand stored as s8, dequantized before
  a dot in the original type.

Scales (``granularity``): one per tensor, or one per channel (every
non-contracting row of the left operand, every column of the right one; the
default of ``int8w``). Where they come from (``scales``): ``amax``, computed in the
module from each operand's absolute maximum, so the quantize cost is priced with
everything else; or ``parameter``, delayed scaling: each scale is a new parameter
of the entry computation (the amax history kept by the caller, as
TransformerEngine does), and only the divide, clamp and convert stay in the
module. With ``weights="parameter"`` a weight (an entry parameter that chosen
dots alone read, as their right-hand operand, as ``int8w`` has it) arrives
already quantized: the parameter itself becomes 8-bit, its scale a parameter next
to it, and nothing of its quantize stays in the module (inference with
pre-quantized weights). An operand read by several chosen dots (the input of Q, K
and V) is quantized once. Which dots: ``scope`` (roles), a size floor
(``min_flops``) and a skip list of names.
"""

from __future__ import annotations

from dataclasses import dataclass

from hlo_tools import Computation, Instruction, Module
from hlo_tools.attributes import format_int_list
from hlo_tools.opcode import HloOpcode
from hlo_tools.rewriter import Rewriter
from hlo_tools.shape import Shape
from hlo_analysis.cost import dot_flops
from hlo_analysis.patterns import GELU, GQA, SWIGLU, Patterns
from hlo_analysis.quantization import FLOATING

from .base import Pass

_H = HloOpcode
FORMS = ("fp8", "fp8-qdq", "int8", "int8w")
#: What ``scope`` names: a dot's role in the model (``dot_role``).
ROLES = ("attn", "mlp", "logits", "proj")
GRANULARITIES = ("tensor", "channel")
SCALES = ("amax", "parameter")
WEIGHTS = ("module", "parameter")
#: ``gradients``: the fp8 type of an operand that is a gradient
GRADIENT_TYPES = {"e4m3": "f8e4m3fn", "e5m2": "f8e5m2"}
#: the largest finite magnitude of each 8-bit type
_QMAX = {"f8e4m3fn": 448.0, "f8e5m2": 57344.0, "s8": 127.0}


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


def _dims(dot: Instruction, key: str) -> tuple[int, ...]:
    """One of the dot's dimension lists (``lhs_batch_dims``...)."""
    return getattr(dot.dot_dimension_numbers, key)


def _columns(dot: Instruction) -> int:
    """The size of the rhs's free (non-contracting, non-batch) dimensions."""
    rhs = dot.operands[1].shape.dims
    used = set(_dims(dot, "rhs_contracting_dims")) | set(_dims(dot, "rhs_batch_dims"))
    n = 1
    for d, size in enumerate(rhs):
        if d not in used:
            n *= size
    return n


def _kept(dot: Instruction, side: str) -> tuple[int, ...]:
    """A per-channel scale's dimensions: every non-contracting dimension of one operand."""
    rank = len(dot.operands[0 if side == "lhs" else 1].shape.dims)
    return tuple(d for d in range(rank) if d not in _dims(dot, f"{side}_contracting_dims"))


def _output_dims(dot: Instruction, side: str, keep: tuple[int, ...]) -> tuple[int, ...] | None:
    """Where an operand's kept dimensions sit in the dot's output (batch, lhs free,
    rhs free), for broadcasting its scales there; None when they do not sit in
    order (a batch dimension list that is not ascending)."""
    batch = _dims(dot, f"{side}_batch_dims")
    free = [d for d in keep if d not in batch]
    offset = len(batch) + (0 if side == "lhs" else len(_kept(dot, "lhs")) - len(batch))
    out = tuple(batch.index(d) if d in batch else offset + free.index(d) for d in keep)
    return out if list(out) == sorted(out) else None


def quantized_tag(dot_name: str) -> str:
    """The ``op_name`` the quantized dot of ``dot_name`` carries in its metadata."""
    return f"hlo-quantize/{dot_name}"


def _downstream(patterns: Patterns, start: Instruction) -> set[int]:
    """Every instruction that reads ``start``'s value, directly or not (ids)."""
    seen: set[int] = set()
    stack = [start]
    while stack:
        for u in patterns.flow.users(stack.pop()):
            if id(u) not in seen:
                seen.add(id(u))
                stack.append(u)
    return seen


@dataclass(frozen=True)
class Choice:
    """One dot to rewrite and the 8-bit type of each operand ("" where it stays)."""

    dot: Instruction
    lhs: str
    rhs: str
    role: str = ""


@dataclass(frozen=True)
class QuantizeDots(Pass):
    """Rewrites the chosen dots of a module to ``form`` (module docstring)."""

    name = "quantize-dots"
    form: str = "fp8"
    #: dot roles (``ROLES``, ``dot_role``), or ("all",)
    scope: tuple[str, ...] = ("all",)
    min_flops: int = 0
    skip: tuple[str, ...] = ()
    #: "tensor" or "channel"; "" is the form's own: channel for int8w, tensor otherwise
    granularity: str = ""
    #: "amax" (computed in the module) or "parameter" (delayed scaling)
    scales: str = "amax"
    #: the fp8 type of gradient operands (``GRADIENT_TYPES``): operands that read the
    #: logits dot's value, which in a train step are the backward pass's cotangents
    gradients: str = "e4m3"
    #: "module" (weights quantized in the module) or "parameter" (they arrive 8-bit)
    weights: str = "module"

    def __post_init__(self):
        if self.form not in FORMS:
            raise ValueError(f"quantize-dots: unknown form {self.form!r}; one of {', '.join(FORMS)}")
        bad = [s for s in self.scope if s != "all" and s not in ROLES]
        if bad:
            raise ValueError(f"quantize-dots: unknown scope {', '.join(bad)}; use all or {', '.join(ROLES)}")
        if self.granularity and self.granularity not in GRANULARITIES:
            raise ValueError(f"quantize-dots: granularity is one of {', '.join(GRANULARITIES)}, "
                             f"not {self.granularity!r}")
        if self.scales not in SCALES:
            raise ValueError(f"quantize-dots: scales are one of {', '.join(SCALES)}, not {self.scales!r}")
        if self.weights not in WEIGHTS:
            raise ValueError(f"quantize-dots: weights are one of {', '.join(WEIGHTS)}, not {self.weights!r}")
        if self.gradients not in GRADIENT_TYPES:
            raise ValueError(f"quantize-dots: gradients are one of {', '.join(GRADIENT_TYPES)}, "
                             f"not {self.gradients!r}")
        if self.gradients != "e4m3" and not self.form.startswith("fp8"):
            raise ValueError(f"quantize-dots: gradients={self.gradients} needs an fp8 form, not {self.form}")

    @property
    def per_channel(self) -> bool:
        return (self.granularity or ("channel" if self.form == "int8w" else "tensor")) == "channel"

    # -- which dots ------------------------------------------------------------------
    def plan(self, module: Module) -> list[Choice]:
        """The dots this pass rewrites (two floating operands, outside fusion bodies,
        in scope, at least ``min_flops``, not skipped) and each operand's type."""
        fused = {id(c) for c in module.fusion_computations()}
        floating = [i for c in module.computations if id(c) not in fused for i in c
                    if i.opcode is _H.DOT and len(i.operands) == 2
                    and not any(o.shape.is_tuple or _etype(o.shape) not in FLOATING for o in i.operands)]
        patterns = Patterns(module)
        widest = max((_columns(d) for d in floating if GQA not in patterns.labels(d)), default=0)
        roles = {id(d): dot_role(patterns, d, widest) for d in floating}
        dots = [d for d in floating if ("all" in self.scope or roles[id(d)] in self.scope)
                and d.name not in self.skip and dot_flops(d) >= self.min_flops]
        if self.form == "int8w":
            return [Choice(d, "", "s8", roles[id(d)]) for d in dots]
        base, grad_t = "s8" if self.form == "int8" else "f8e4m3fn", GRADIENT_TYPES[self.gradients]
        grads: set[int] = set()
        if self.gradients != "e4m3":
            for d in floating:
                if roles[id(d)] == "logits":
                    grads |= _downstream(patterns, d)
        out = []
        for d in dots:
            g = [id(patterns.flow.value(o)) in grads or id(o) in grads for o in d.operands]
            # XLA's fp8 GEMMs take E4M3 x E5M2 in either order, never E5M2 x E5M2
            out.append(Choice(d, grad_t if g[0] else base, grad_t if g[1] and not g[0] else base, roles[id(d)]))
        return out

    def chosen(self, module: Module) -> list[Instruction]:
        return [c.dot for c in self.plan(module)]

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

    def _amax_scale(self, x32: Instruction, keep: tuple[int, ...], qmax: float, ins, rw: Rewriter,
                    maxc: Computation) -> Instruction:
        """``amax(|x|) / qmax`` over all dimensions but ``keep`` (f32), at least a tiny
        positive number so an all-zero tensor divides cleanly."""
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

    def _scale_parameter(self, module: Module, x: Instruction, keep: tuple[int, ...], rw: Rewriter) -> Instruction:
        """A new entry parameter holding ``x``'s scale (delayed scaling)."""
        entry = module.entry
        number = len(entry.parameters)
        shape = Shape.array("f32", tuple(x.shape.dims[d] for d in keep))
        p = rw.append(entry, Instruction(f"quant.scale.{x.name}", _H.PARAMETER, shape, parameter_number=number))
        # the header's layout lists the old parameters: XLA derives it again
        for key in ("entry_computation_layout", "input_output_alias"):
            rw.set_module_attribute(module, key, None)
        return p

    def _quantize(self, module: Module, x: Instruction, etype: str, keep: tuple[int, ...], anchor: Instruction,
                  rw: Rewriter, maxc: Computation) -> tuple[Instruction, Instruction]:
        """``x`` as ``etype`` (scaled into its range, rounded, clamped) and its f32
        scale (a scalar, or one per ``keep`` dimension)."""
        ins = lambda i: rw.insert_before(anchor, i)  # noqa: E731 - local shorthand
        qmax = _QMAX[etype]
        x32 = x if _etype(x.shape) == "f32" else ins(Instruction.create(_H.CONVERT, _like(x.shape, "f32"), [x],
                                                                               "quant.f32"))
        if self.scales == "parameter" and anchor.parent is module.entry:
            scale = self._scale_parameter(module, x, keep, rw)
        else:
            scale = self._amax_scale(x32, keep, qmax, ins, rw, maxc)
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
    def _keep(self, dot: Instruction, side: str) -> tuple[int, ...]:
        """The dimensions an operand's scale keeps: none (per tensor), or its
        non-contracting ones where they sit in order in the output."""
        if not self.per_channel:
            return ()
        keep = _kept(dot, side)
        return keep if self.form in ("fp8-qdq", "int8w") or _output_dims(dot, side, keep) is not None else ()

    def _prequantized(self, module: Module, x: Instruction, etype: str, keep: tuple[int, ...],
                      readers: dict[int, tuple[set, set]]) -> bool:
        """``weights="parameter"`` and ``x`` is an entry parameter that chosen dots
        alone read, all as their right-hand operand, type and scale layout alike."""
        if self.weights != "parameter" or x.opcode is not _H.PARAMETER or x.parent is not module.entry:
            return False
        reads, dots = readers[id(x)]
        return reads == {("rhs", etype, keep)} and {id(u) for u in x.users} == dots

    def used(self, module: Module, choice: Choice) -> dict[str, str]:
        """What a dot of the plan gets: per-channel scales only where both sides'
        dimensions sit in order in the output (else per tensor), parameter scales
        only in the entry computation (else the amax in the module)."""
        dot = choice.dot
        channel = self.per_channel and all(self._keep(dot, side) == _kept(dot, side) for side in ("lhs", "rhs"))
        return {"granularity": "channel" if channel else "tensor",
                "scales": "parameter" if self.scales == "parameter" and dot.parent is module.entry else "amax"}

    def _readers(self, plan: list[Choice]) -> dict[int, tuple[set, set]]:
        """Per operand (id): how chosen dots read it (side, type, scale layout) and which dots do."""
        out: dict[int, tuple[set, set]] = {}
        for c in plan:
            for side, x, etype in (("lhs", c.dot.operands[0], c.lhs), ("rhs", c.dot.operands[1], c.rhs)):
                reads, dots = out.setdefault(id(x), (set(), set()))
                # an operand left as it is (int8w's lhs) is a read too: it keeps its type
                reads.add((side, etype, self._keep(c.dot, side)))
                dots.add(id(c.dot))
        return out

    def _rewrite(self, choice: Choice, module: Module, rw: Rewriter, maxc: Computation, done: dict,
                 readers: dict[int, tuple[set, set]]) -> None:
        dot = choice.dot
        a, b = dot.operands
        out_t = _etype(dot.shape)
        dims = {k: dot.attributes.get(k) for k in ("lhs_batch_dims", "lhs_contracting_dims", "rhs_batch_dims",
                                                   "rhs_contracting_dims") if dot.attributes.get(k)}
        ka, kb = self._keep(dot, "lhs"), self._keep(dot, "rhs")
        ta, tb = _etype(a.shape), _etype(b.shape)  # before a pre-quantized weight takes its 8-bit type

        def quantized(x: Instruction, etype: str, keep: tuple[int, ...]) -> tuple[Instruction, Instruction]:
            key = (id(x), etype, keep)  # an operand several chosen dots read is quantized once
            if key not in done:
                if self._prequantized(module, x, etype, keep, readers):
                    rw.set_shape(x, _like(x.shape, etype))
                    done[key] = (x, self._scale_parameter(module, x, keep, rw))
                else:
                    done[key] = self._quantize(module, x, etype, keep, dot, rw, maxc)
            return done[key]

        ins = lambda i: rw.insert_before(dot, i)  # noqa: E731 - local shorthand
        if self.form == "int8w":
            qb, sb = quantized(b, "s8", kb)
            deq = self._dequantize(qb, sb, kb, tb, dot, rw)
            new = qdot = ins(Instruction.create(_H.DOT, dot.shape, [a, deq], dot.name + ".int8w", **dims))
        elif self.form == "fp8-qdq":
            (qa, sa), (qb, sb) = quantized(a, choice.lhs, ka), quantized(b, choice.rhs, kb)
            da = self._dequantize(qa, sa, ka, ta, dot, rw)
            db = self._dequantize(qb, sb, kb, tb, dot, rw)
            new = qdot = ins(Instruction.create(_H.DOT, dot.shape, [da, db], dot.name + ".qdq", **dims))
        else:
            acc = "f32" if self.form == "fp8" else "s32"
            (qa, sa), (qb, sb) = quantized(a, choice.lhs, ka), quantized(b, choice.rhs, kb)
            low = qdot = ins(Instruction.create(_H.DOT, _like(dot.shape, acc), [qa, qb], dot.name + "." + self.form,
                                                **dims))
            y = low if acc == "f32" else ins(Instruction.create(_H.CONVERT, _like(dot.shape, "f32"), [low], "quant.f32"))
            if not ka and not kb:
                s = ins(Instruction.create(_H.MULTIPLY, "f32[]", [sa, sb], "quant.scale.ab"))
                y = ins(Instruction.create(_H.MULTIPLY, y.shape, [y, ins(Instruction.create(
                    _H.BROADCAST, y.shape, [s], "quant.scale.b", dimensions="{}"))], "quant.out"))
            else:  # each side's scales broadcast to where its dimensions sit in the output
                for s, side, keep in ((sa, "lhs", ka), (sb, "rhs", kb)):
                    at = _output_dims(dot, side, keep) or ()
                    sbc = ins(Instruction.create(_H.BROADCAST, y.shape, [s], "quant.scale.b",
                                                 dimensions=format_int_list(at)))
                    y = ins(Instruction.create(_H.MULTIPLY, y.shape, [y, sbc], "quant.out"))
            new = y if out_t == "f32" else ins(Instruction.create(_H.CONVERT, dot.shape, [y], "quant.out"))
        # XLA renames dots on its way (dot_general.26 -> dot.52) but keeps their
        # metadata: the tag is how hlo_analysis.quantization finds the GEMM it became
        rw.set_attribute(qdot, "metadata", f'{{op_name="{quantized_tag(dot.name)}"}}')
        rw.replace_all_uses_with(dot, new)
        rw.erase(dot)

    def apply(self, module: Module, plan: list[Choice]) -> bool:
        """Rewrites the dots of ``plan`` (``plan(module)`` or a caller's choice)."""
        if not plan:
            return False
        rw = Rewriter()
        maxc = self._max_computation(module, rw)
        done: dict = {}
        readers = self._readers(plan)
        for choice in plan:
            self._rewrite(choice, module, rw, maxc, done, readers)
        return True

    def run(self, module: Module) -> bool:
        return self.apply(module, self.plan(module))
