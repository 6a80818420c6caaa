"""What XLA:GPU made of quantized dots: the GEMM kernels of an optimized module,
the element types each multiplies, and the predicted GEMM and module times.

XLA:GPU lowers a dot to a Triton GEMM (a ``kCustom`` fusion around the dot), a
cuBLAS call (``__cublas$gemm``, ``__cublas$lt$matmul``, ``...$f8`` for fp8) or
leaves it a plain dot. A GEMM is 8-bit when what it multiplies is (f8 types,
s8/u8); a quantized dot whose GEMM multiplies bf16 or f16 fell back silently (the
scaling went before it: XLA's QDQ pattern on a deviceless compile, or weight-only
int8 by design). XLA renames dots on its way but keeps their metadata:
``passes.quantize`` tags each new dot's ``op_name`` and ``lowered`` looks for it.
"""

from __future__ import annotations

from dataclasses import dataclass

from hlo_tools.attributes import parse_metadata
from hlo_tools.ir import Instruction, Module
from hlo_tools.opcode import HloOpcode

from .cost import ModuleCost, analyze, kernel_instructions
from .devices import Device
from .roofline import Roofline, roofline

_H = HloOpcode
_EIGHT_BIT = ("f8", "s8", "u8")
#: the element types a dot multiplies that an 8-bit rewrite replaces
FLOATING = ("bf16", "f16", "f32")


@dataclass(frozen=True)
class Gemm:
    """One GEMM kernel of an optimized module."""

    name: str
    kind: str  # "triton" | "cublas" | "dot"
    #: what identifies it: the kernel's and its dot's names and metadata op_names
    names: tuple[str, ...]
    operand_types: tuple[str, ...]
    flops: float
    #: the element types the kernel reads from memory (its operands)
    read_types: tuple[str, ...]
    #: elements of its output (0 for a tuple): a merged GEMM writes two dots' outputs
    output_elements: int = 0

    @property
    def eight_bit(self) -> bool:
        """It multiplies 8-bit operands."""
        return bool(self.operand_types) and all(t.startswith(_EIGHT_BIT) for t in self.operand_types)

    @property
    def reads_8bit(self) -> bool:
        """It reads an 8-bit operand (weight-only int8: dequantized inside the GEMM)."""
        return any(t.startswith(_EIGHT_BIT) for t in self.read_types)


def _types(instrs) -> tuple[str, ...]:
    return tuple(i.shape.element_type.value for i in instrs if i.shape.is_array)


def _gemm(kernel: Instruction, flops: float) -> Gemm | None:
    reads = _types(kernel.operands)
    out = kernel.shape.num_elements if kernel.shape.is_array else 0
    if kernel.opcode is _H.DOT:
        return Gemm(kernel.name, "dot", (kernel.name, _op_name(kernel)), _types(kernel.operands), flops, reads, out)
    if kernel.opcode is _H.CUSTOM_CALL and (kernel.custom_call_target or "").startswith("__cublas$"):
        return Gemm(kernel.name, "cublas", (kernel.name, _op_name(kernel)), _types(kernel.operands[:2]), flops, reads,
                    out)
    dot = _fused_dot(kernel)
    if dot is not None:
        return Gemm(kernel.name, "triton", (kernel.name, dot.name, _op_name(kernel), _op_name(dot)),
                    tuple(_source(o).shape.element_type.value for o in dot.operands), flops, reads, out)
    return None


def _fused_dot(kernel: Instruction) -> Instruction | None:
    """The dot inside a fusion kernel (a Triton GEMM), else None."""
    if kernel.opcode is not _H.FUSION or kernel.fused_computation is None:
        return None
    return next((i for i in kernel.fused_computation if i.opcode is _H.DOT), None)


def _gemm_operands(kernel: Instruction) -> list[Instruction]:
    """What a GEMM kernel multiplies, as the kernel reads it: a Triton fusion's dot
    operands traced back to the fusion's operands (its epilogue's inputs, a bias or
    a residual, are not multiplied), a cuBLAS call's first two, a dot's own."""
    if kernel.opcode is _H.FUSION:
        dot = _fused_dot(kernel)
        out = []
        for o in dot.operands if dot is not None else ():
            src = _source(o)
            n = src.parameter_number if src.opcode is _H.PARAMETER else None
            if n is not None and n < len(kernel.operands):
                out.append(kernel.operands[n])
        return out
    return list(kernel.operands[:2])


def _op_name(instr: Instruction) -> str:
    raw = instr.attributes.get("metadata")
    return str(parse_metadata(raw).get("op_name", "")) if isinstance(raw, str) else ""


def _source(operand: Instruction) -> Instruction:
    """A Triton GEMM's dot operand seen through the layout ops inside the fusion (a
    GEMM that converts f8 to bf16 inside its tile multiplies bf16: only layout ops
    are seen through, so the type found is the one multiplied)."""
    x = operand
    while x.opcode in (_H.BITCAST, _H.RESHAPE, _H.TRANSPOSE, _H.COPY) and x.operands:
        x = x.operands[0]
    return x


def gemms(module: Module, cost: ModuleCost | None = None) -> list[Gemm]:
    """Every GEMM kernel of an optimized module, with its flops (``cost``)."""
    cost = cost or analyze(module)
    flops = {(c.computation, c.name): c.flops for c in cost.instructions}
    out = []
    for instr in kernel_instructions(module, cost):
        g = _gemm(instr, flops.get((instr.parent.name, instr.name), 0.0))
        if g is not None:
            out.append(g)
    return out


def lowered(tag: str, kernels: list[Gemm]) -> Gemm | None:
    """The GEMM whose kernel or dot carries ``tag`` (a name or metadata op_name), else None."""
    for g in kernels:
        if tag in g.names:
            return g
    return None


@dataclass(frozen=True)
class PredictedTimes:
    """Predicted time per run on one device: the GEMM kernels and the whole module."""

    gemm_s: float
    module_s: float


def predicted_times(module: Module, device: Device, cost: ModuleCost | None = None,
                    kernels: list[Gemm] | None = None) -> PredictedTimes:
    """``cost`` and ``kernels`` (``gemms``) when the caller has them already."""
    cost = cost or analyze(module)
    r = roofline(module, device, cost)
    names = {g.name for g in (kernels if kernels is not None else gemms(module, cost))}
    return PredictedTimes(sum(k.time_s * k.executions for k in r.kernels if k.name in names), r.time_s)


def headroom_s(module: Module, device: Device, rf: Roofline) -> float | None:
    """Predicted seconds saved per run if every GEMM on floating operands ran at 8
    bits: its compute at ``device``'s fp8 tensor-core peak and its operands read at
    one byte an element, the rest of its time as it is. The quantize ops are not in
    it (pre-quantized weights, scales from the previous step: the ceiling). None on
    a device without an fp8 peak (XLA:CPU has no 8-bit GEMM)."""
    if "f8" not in device.peak_flops:
        return None
    saved = 0.0
    for k in rf.kernels:
        if k.category not in ("matmul", "attention"):
            continue
        comp = module.get_computation(k.computation)
        instr = comp.get_instruction(k.name) if comp is not None else None
        g = _gemm(instr, k.flops) if instr is not None else None
        if g is None or not g.operand_types or not all(t in FLOATING for t in g.operand_types):
            continue
        compute = k.compute_s * device.matmul_peak(g.operand_types[0]) / device.matmul_peak("f8")
        wide = sum(o.shape.byte_size - o.shape.num_elements for o in _gemm_operands(instr)
                   if o.shape.is_array and o.shape.element_type.value in FLOATING)
        memory = k.memory_s * max(k.bytes_accessed - wide, 0.0) / k.bytes_accessed if k.bytes_accessed else k.memory_s
        saved += max(0.0, k.time_s - (max(compute, memory) + k.launch_s)) * k.executions
    return saved
