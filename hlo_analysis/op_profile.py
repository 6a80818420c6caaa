"""Per-opcode elementwise costs for the host: seconds per output element.

XLA:GPU's cost model does not price every flop alike: it reads clock cycles per
opcode and element type from profiles measured on each GPU generation
(``xla/service/gpu/model/hlo_op_profiles``, produced by ``hlo_op_profiler``).
The host roofline does the same with its own measurements
(``hlo_lab.measured.op_profile``, stored in the host ``Device``), so a divide or an
exponential costs what it costs here instead of one "flop" at the multiply rate.

``compute_seconds(kernel, profile)`` is the compute time of one kernel from its
instructions (a fusion's fused computation, nested fusions included): elements
times the opcode's cost, a reduce's reduced elements times the measured
row-reduction cost. Opcodes not profiled fall back to one flop (or one
transcendental) per element at the device's rates. Kernels with a dot return
None: matmuls keep the GEMM rate.
"""

from __future__ import annotations

from typing import Mapping

from hlo_tools.ir import Instruction
from hlo_tools.opcode import ELEMENTWISE, HloOpcode
from .cost import TRANSCENDENTAL_OPS, CostAnalysis, arithmetic_seconds

_H = HloOpcode
#: Data movement: HloCostAnalysis counts no flops for these, so a kernel body's
#: many broadcasts, slices and parameters need no pricing.
_NO_ARITHMETIC = frozenset({_H.PARAMETER, _H.CONSTANT, _H.BITCAST, _H.BROADCAST, _H.RESHAPE, _H.TRANSPOSE, _H.SLICE,
                            _H.DYNAMIC_SLICE, _H.DYNAMIC_UPDATE_SLICE, _H.CONCATENATE, _H.PAD, _H.IOTA, _H.REVERSE,
                            _H.TUPLE, _H.GET_TUPLE_ELEMENT, _H.COPY})

def _elements(instr: Instruction) -> int:
    return instr.shape.num_elements if instr.shape.is_array else 0


def _body(kernel: Instruction) -> list[Instruction] | None:
    """The instructions a kernel runs, or None when it runs a dot."""
    out: list[Instruction] = []
    stack = [kernel]
    while stack:
        i = stack.pop()
        comp = i.fused_computation if i.opcode is _H.FUSION else None
        if comp is not None:
            stack.extend(comp)
            continue
        if i.opcode in (_H.DOT, _H.CONVOLUTION, _H.RAGGED_DOT):
            return None
        out.append(i)
    return out


def compute_seconds(kernel: Instruction, profile: Mapping[str, float], vector_flops: float,
                    transcendentals_per_s: float) -> float | None:
    """The kernel's compute time from ``profile`` (see the module docstring)."""
    body = _body(kernel)
    if body is None:
        return None
    others = None  # XLA's counts for the ops not profiled here (scatter, sort, reduce-window ...)
    total = 0.0
    for i in body:
        op = i.opcode
        if op is _H.REDUCE:
            src = i.operands[0]
            out0 = i.shape if i.shape.is_array else i.shape.tuple_shapes[0]
            total += max(src.shape.num_elements - out0.num_elements, 0) * profile.get("reduce", 1.0 / vector_flops)
        elif op in ELEMENTWISE and op is not _H.COPY:
            per = profile.get(i.opcode_text)
            if per is None:
                per = 1.0 / (transcendentals_per_s if op in TRANSCENDENTAL_OPS else vector_flops)
            total += _elements(i) * per
        elif op not in _NO_ARITHMETIC:
            others = others or CostAnalysis(None)
            p = others.instruction(i)
            total += arithmetic_seconds(p.flops, p.trans, vector_flops, transcendentals_per_s)
    return total
