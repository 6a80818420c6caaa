"""Roofline per kernel: ``max(flops/peak, bytes/bandwidth) + launch overhead``.

On a device with a bandwidth curve (the host), ``bandwidth`` is the measured one
for the kernel's footprint; on a device with per-opcode costs (the host,
``op_profile``), a non-matmul kernel's compute time is the sum of its
instructions' measured costs instead of ``flops/peak``; on a device with a
library-call overhead (the host), a matmul launches at that cost.

A kernel is a fusion or an unfused instruction that emits code
(``cost.is_kernel``: parameters, constants, tuples, get-tuple-element and
bitcasts do not; ``*-done`` ops are the second half of their ``*-start``); its
time is ``cost.KernelTime``. Each kernel gets its bound (compute, memory or
launch) and a category (matmul, attention, memory-bound fusion, collective, copy,
other); module totals and per-category headroom follow.

Headroom of a kernel is ``time - compute time``: the part of its predicted time
not spent on arithmetic (memory traffic beyond the math, plus the launch). It is
the most that fusing, tiling or removing the kernel could save; a compute-bound
matmul has only its launch as headroom.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from dataclasses import dataclass, field

from hlo_tools.ir import Instruction, Module
from hlo_tools.opcode import COLLECTIVES, HloOpcode

from .cost import (InstructionCost, ModuleCost, analyze, arithmetic_seconds, executions, kernel_bound, kernel_instructions,
                   kernel_seconds)
from .devices import Device
from .gpu_kernel_model import combine as gpu_combine
from .gpu_kernel_model import kernel_cost as gpu_kernel_cost
from .gpu_kernel_model import operand_reads as gpu_operand_reads
from .gpu_kernel_model import utilization_memo
from .op_profile import compute_seconds as profiled_compute_seconds

_H = HloOpcode
CATEGORIES = ("matmul", "attention", "memory-bound fusion", "collective", "copy", "other")
_MATMUL_OPS = frozenset({_H.DOT, _H.CONVOLUTION, _H.RAGGED_DOT, _H.SCALED_DOT})
_COPY_OPS = frozenset({_H.COPY, _H.COPY_START, _H.TRANSPOSE})


@dataclass(frozen=True, slots=True)
class KernelEstimate:
    """One kernel's roofline."""

    name: str
    computation: str
    opcode: str
    category: str
    flops: float
    transcendentals: float
    bytes_accessed: float
    compute_s: float
    memory_s: float
    launch_s: float
    time_s: float
    bound: str  # "compute" | "memory" | "launch"
    #: runs per module run: a loop body's kernel its loop's known trip count
    executions: int = 1

    @property
    def intensity(self) -> float:
        return (self.flops + self.transcendentals) / self.bytes_accessed if self.bytes_accessed else float("inf")

    @property
    def headroom_s(self) -> float:
        return max(0.0, self.time_s - self.compute_s)


@dataclass(frozen=True)
class CategorySummary:
    category: str
    kernels: int
    time_s: float
    headroom_s: float
    bytes_accessed: float
    flops: float


@dataclass(frozen=True)
class Roofline:
    """All kernels of a module on one device, with totals per category."""

    module: str
    device: str
    kernels: tuple[KernelEstimate, ...] = field(repr=False)
    #: while loops without a known trip count (their bodies counted once)
    unknown_trip_counts: int = 0

    @property
    def time_s(self) -> float:
        """Per module run: each kernel times its executions (``cost.executions``)."""
        return sum(k.time_s * k.executions for k in self.kernels)

    @property
    def headroom_s(self) -> float:
        return sum(k.headroom_s * k.executions for k in self.kernels)

    @property
    def flops(self) -> float:
        return sum(k.flops * k.executions for k in self.kernels)

    @property
    def bytes_accessed(self) -> float:
        return sum(k.bytes_accessed * k.executions for k in self.kernels)

    @property
    def loops_note(self) -> str:
        """What the totals assume about loops, for the output."""
        looped = sum(1 for k in self.kernels if k.executions > 1)
        parts = []
        if looped:
            parts.append(f"{looped} kernels in loops counted per iteration (known trip counts)")
        if self.unknown_trip_counts:
            parts.append(f"{self.unknown_trip_counts} loop(s) without a known trip count counted once")
        return "; ".join(parts)

    def by_category(self) -> dict[str, CategorySummary]:
        acc: dict[str, list] = defaultdict(lambda: [0, 0.0, 0.0, 0.0, 0.0])
        for k in self.kernels:
            a = acc[k.category]
            a[0] += 1
            a[1] += k.time_s * k.executions
            a[2] += k.headroom_s * k.executions
            a[3] += k.bytes_accessed * k.executions
            a[4] += k.flops * k.executions
        return {c: CategorySummary(c, *acc[c]) for c in CATEGORIES if c in acc}

    def bound_counts(self) -> dict[str, int]:
        out: dict[str, int] = defaultdict(int)
        for k in self.kernels:
            out[k.bound] += 1
        return dict(out)


def _wrapped_body(instr: Instruction) -> list[Instruction]:
    if instr.opcode is _H.FUSION or (instr.opcode is _H.ASYNC_START and instr.async_wrapped_opcode is _H.FUSION):
        comp = instr.called_computation("calls")
        if comp is None:
            return []
        out = []
        for i in comp:
            out.append(i)
            if i.opcode is _H.FUSION and i.fused_computation is not None:
                out.extend(i.fused_computation)
        return out
    return []


def _op_name(instr: Instruction) -> str:
    raw = instr.attributes.get("metadata") or ""
    i = raw.find('op_name="')
    return raw[i + 9: raw.find('"', i + 9)] if i >= 0 else ""


def _is_batched_dot(i: Instruction) -> bool:
    return i.opcode is _H.DOT and bool((i.attribute("lhs_batch_dims") or "").strip("{}"))


def _named_attention(instr: Instruction) -> bool:
    """The op_name or the instruction's name mentions attention (asked last: reading
    the metadata parses the instruction's attributes)."""
    name = (_op_name(instr) + " " + instr.name).lower()
    return "attention" in name or "attn" in name


def category(instr: Instruction, body: list[Instruction] | None = None) -> str:
    """matmul / attention / memory-bound fusion / collective / copy / other.

    Attention: a batched dot (QK^T, PV) or a fusion with exp and reduce (softmax)
    under an op_name that mentions attention; other dots are matmuls. ``body``:
    ``_wrapped_body(instr)`` when the caller has it."""
    op = instr.opcode
    wrapped = instr.async_wrapped_opcode
    body = _wrapped_body(instr) if body is None else body
    if op in COLLECTIVES or (wrapped is not None and wrapped in COLLECTIVES) or any(i.opcode in COLLECTIVES for i in body):
        return "collective"
    dots = [i for i in body if i.opcode in _MATMUL_OPS] if body else ([instr] if op in _MATMUL_OPS else [])
    target = (instr.custom_call_target or "") if op is _H.CUSTOM_CALL else ""
    if dots or "gemm" in target or "matmul" in target:
        return "attention" if any(_is_batched_dot(d) for d in dots) and _named_attention(instr) else "matmul"
    if body:
        ops = {i.opcode for i in body}
        if _H.EXPONENTIAL in ops and _H.REDUCE in ops and _named_attention(instr):
            return "attention"
        if ops <= {_H.PARAMETER, _H.COPY, _H.TRANSPOSE, _H.BITCAST}:
            return "copy"
        return "memory-bound fusion"
    if op in _COPY_OPS:
        return "copy"
    return "other"


def _is_matrix_vector(instr: Instruction) -> bool:
    """A plain dot with one operand's free (non-batch, non-contracting) dims of size 1.
    XLA:CPU emits those as a tiled GEMV loop kernel instead of a library call
    (measured: [1,64]x[64,64] takes 1.2 us, [2,64]x[64,64] 4.5 us)."""
    if instr.opcode is not _H.DOT:
        return False

    def free(operand: Instruction, batch: str, contracting: str) -> int:
        skip = {int(d) for key in (batch, contracting)
                for d in (instr.attribute(key) or "").strip("{}").split(",") if d.strip()}
        n = 1
        for axis, size in enumerate(operand.shape.dims):
            if axis not in skip:
                n *= size
        return n

    lhs, rhs = instr.operands[:2]
    return (free(lhs, "lhs_batch_dims", "lhs_contracting_dims") == 1
            or free(rhs, "rhs_batch_dims", "rhs_contracting_dims") == 1)


def _matmul_dtype(instr: Instruction, body: list[Instruction]) -> str | None:
    """The element type a matmul kernel multiplies (a dot, a fusion around one, a
    cuBLAS call), None for any other kernel. ``body``: ``_wrapped_body(instr)``."""
    for i in [instr, *body]:
        if i.opcode in _MATMUL_OPS or (i.opcode is _H.CUSTOM_CALL and (i.custom_call_target or "").startswith("__cublas$")
                                       and i.operands and i.operands[0].shape.is_array):
            return i.operands[0].shape.element_type.value
    return None


def _gpu_estimate(instr: Instruction, cost: InstructionCost, device: Device, cat: str, dtype: str | None,
                  compute: float, executions: int) -> KernelEstimate:
    """XLA:GPU's kernel model (``gpu_kernel_model``): launch-dimension-aware compute
    and memory times, overlapped 95%, plus the launch. A matmul keeps its
    tensor-core compute time and the full overlap of the roofline (its headroom
    stays its launch when compute-bound), and reads each operand once: XLA's
    model counts a dot's re-reads of its operands per output element, which a
    tiled GEMM serves from shared memory (it priced a decode's GEMMs at several
    times their weight bytes)."""
    reads = None
    if dtype:  # a GEMM tiles its operands through shared memory: each read from DRAM once, coalesced
        reads = [dataclasses.replace(r, total=r.net, coalesced=True) for r in gpu_operand_reads(instr)]
    k = gpu_kernel_cost(instr, device, compute_s=compute if dtype else None, reads=reads,
                        written=cost.bytes_written if dtype else None)  # a cuBLAS call's result, not its workspace
    launch = device.launch_overhead_s
    body = max(k.compute_s, k.memory_s) if dtype else gpu_combine(k.compute_s, k.memory_s)
    bound = "launch" if launch > body else ("compute" if k.compute_s >= k.memory_s else "memory")
    return KernelEstimate(cost.name, cost.computation, cost.opcode, cat, max(cost.flops, 0.0), cost.transcendentals,
                          cost.bytes_accessed, k.compute_s, k.memory_s, launch, body + launch, bound, executions)


def estimate(instr: Instruction, cost: InstructionCost, device: Device, cat: str | None = None, *,
             executions: int = 1) -> KernelEstimate:
    """One kernel's roofline on ``device`` (``executions``: its runs per module run).
    On a GPU (``device.kind == "gpu"``) a kernel other than a collective is priced
    by XLA:GPU's kernel model (``gpu_kernel_model``), with dots at the tensor-core peak."""
    body = _wrapped_body(instr)
    cat = cat or category(instr, body)
    dtype = _matmul_dtype(instr, body)
    peak = device.matmul_peak(dtype) if dtype else device.vector_flops
    flops = max(cost.flops, 0.0)
    compute = arithmetic_seconds(flops, max(cost.transcendentals, 0.0), peak, device.transcendentals_per_s)
    if device.kind == "gpu" and cat != "collective" and device.sms and device.clock_ghz:
        return _gpu_estimate(instr, cost, device, cat, dtype, compute, executions)
    if device.op_seconds and not dtype and cat != "collective":
        profiled = profiled_compute_seconds(instr, device.op_seconds, device.vector_flops, device.transcendentals_per_s)
        compute = compute if profiled is None else profiled
    if cat == "collective" and device.collective_bandwidth:
        memory = max(cost.bytes_accessed, 0.0) / device.collective_bandwidth
        launch = device.collective_overhead_s or device.launch_overhead_s
    else:
        memory = max(cost.bytes_accessed, 0.0) / device.bandwidth_at(cost.bytes_accessed)
        library = dtype and device.library_call_overhead_s and not _is_matrix_vector(instr)
        launch = device.library_call_overhead_s if library else device.launch_overhead_s
    return KernelEstimate(cost.name, cost.computation, cost.opcode, cat, flops, cost.transcendentals,
                          cost.bytes_accessed, compute, memory, launch, kernel_seconds(compute, memory, launch),
                          kernel_bound(compute, memory, launch), executions)


def roofline(module: Module, device: Device, cost: ModuleCost | None = None) -> Roofline:
    """Every kernel of ``module`` on ``device`` (entry and control-flow bodies)."""
    cost = cost or analyze(module)
    by_key = {(c.computation, c.name): c for c in cost.instructions}
    runs, unknown = executions(module)
    with utilization_memo():  # each fusion body priced once, not once per question about it
        kernels = [estimate(i, by_key[(i.parent.name, i.name)], device, executions=runs.get(i.parent.name, 1))
                   for i in kernel_instructions(module, cost)]
    return Roofline(module.name, device.name, tuple(kernels), unknown)
