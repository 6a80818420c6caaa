"""XLA:GPU's own performance model, read back from a module XLA optimized.

With ``--xla_gpu_collect_cost_model_stats`` XLA:GPU runs
``GpuCostModelStatsCollection`` right after its fusion passes: every fusion then
present gets its ``GpuPerformanceModel`` estimate in its backend config, as
``reification_cost`` entries (``exec_time_us``, ``compute_time_us``,
``memory_access_time_us``; a second entry named ``sol`` is the speed-of-light
variant; Triton fusions also get ``indexing-cost-model``, XLA's tiled model,
which is the one read for them: the unnamed entry does not know the tiling). The estimate is the kernel's body alone: no launch overhead. It
survives to the optimized module on the fusions that XLA does not rebuild later
(Triton GEMMs that the autotuner turns into cuBLAS calls, and the one-op fusions
that ``fusion-wrapper`` adds after scheduling, carry none).

A deviceless compile for a named target is enough (``compile_priced``), so our
roofline can be scored against XLA's model per kernel without a GPU.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

from hlo_tools.ir import Instruction, Module
from hlo_tools.opcode import HloOpcode
from xla_bridge.measure import STOCK, Measurement, XlaPipeline
from xla_bridge.compiler import CompileResult

from hlo_analysis.devices import Device
from hlo_analysis.roofline import roofline

#: the XLA debug option that makes XLA:GPU write its estimates into backend configs
COLLECT_FLAG = "xla_gpu_collect_cost_model_stats"


@dataclass(frozen=True, slots=True)
class XlaEstimate:
    """XLA:GPU's ``GpuPerformanceModel`` estimate of one fusion, in seconds (no launch)."""

    exec_s: float
    compute_s: float
    memory_s: float


def estimate_of(instr: Instruction) -> XlaEstimate | None:
    """The estimate XLA wrote into ``instr``'s backend config, or None when it has none."""
    if instr.opcode is not HloOpcode.FUSION or "reification_cost" not in (instr.attributes.get("backend_config") or ""):
        return None
    config = instr.backend_config
    if not isinstance(config, dict):
        return None
    entries = {e.get("name", ""): e for e in config.get("reification_cost") or () if "exec_time_us" in e}
    kind = (config.get("fusion_backend_config") or {}).get("kind", "")
    # a Triton fusion other than a GEMM is priced by XLA with its tiled model (the
    # indexing-cost-model entry); GpuPerformanceModel's own entry does not know the
    # tiling and re-reads every broadcast per element (seconds for a softmax)
    entry = entries.get("indexing-cost-model") if kind == "__triton" else None
    entry = entry or entries.get("")
    if entry is None:
        return None
    return XlaEstimate(float(entry["exec_time_us"]) * 1e-6, float(entry.get("compute_time_us", 0.0)) * 1e-6,
                       float(entry.get("memory_access_time_us", 0.0)) * 1e-6)


def priced(module: Module) -> Iterator[tuple[Instruction, XlaEstimate]]:
    """Every fusion of ``module`` (in any computation) that carries XLA's estimate."""
    for instr in module.instructions():
        est = estimate_of(instr)
        if est is not None:
            yield instr, est


def compile_priced(module: Module | str, target: str, pipeline: XlaPipeline = STOCK, *,
                   contained: bool = True) -> CompileResult:
    """``module`` compiled by XLA:GPU for ``target`` without a GPU, with XLA's
    estimate written into each fusion it decided (see the module docstring)."""
    return Measurement("gpu", target=target, flags={COLLECT_FLAG: True}, contained=contained).compile(module, pipeline)


@dataclass(frozen=True, slots=True)
class ModuleTime:
    """A module's time under XLA's model where it priced the kernels: XLA's
    estimate for each ``priced`` kernel, our roofline for the others, and one
    launch per kernel (XLA's 1 us, ``kKernelLaunchOverhead``)."""

    seconds: float
    priced: int
    kernels: int


#: Triton GEMM fusions: XLA's GpuPerformanceModel entry prices their dot at the
#: CUDA-core FMA rate (no tensor cores), so ``module_time`` takes our roofline's
#: tensor-core time for them (bench/gpu_cost_vs_xla.py reports them apart).
GEMM_KINDS = frozenset({"__triton_gemm", "__triton_nested_gemm_fusion", "__cublas"})


def is_gemm_fusion(instr: Instruction) -> bool:
    """A Triton GEMM fusion (``GEMM_KINDS``), by its backend config."""
    config = instr.backend_config if "backend_config" in instr.attributes else None
    kind = (config.get("fusion_backend_config") or {}).get("kind", "") if isinstance(config, dict) else ""
    return kind in GEMM_KINDS


def module_time(module: Module, device: Device) -> ModuleTime:
    """``module``'s time on ``device`` under XLA's model, completed by our roofline
    (for the kernels XLA did not price, and for GEMMs: see ``GEMM_KINDS``). Each
    kernel counts its runs per module run, a while loop's body its trip count
    (``roofline``'s ``executions``): a scan over layers runs its kernels per layer."""
    xla = {(i.parent.name, i.name): est for i, est in priced(module) if not is_gemm_fusion(i)}
    total, n_priced = 0.0, 0
    kernels = roofline(module, device).kernels
    for k in kernels:
        est = xla.get((k.computation, k.name))
        if est is None:
            total += k.time_s * k.executions
        else:
            total += (est.exec_s + k.launch_s) * k.executions
            n_priced += 1
    return ModuleTime(total, n_priced, len(kernels))
