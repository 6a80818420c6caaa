"""Device specs for the roofline: four NVIDIA GPUs with cited numbers, the host CPU
measured once (``hlo_lab.measured.host``) and cached, and user specs from JSON.

Peaks are dense (no 2:4 sparsity) tensor-core rates for matmuls, and the plain
FP32 vector rate for everything else.
"""

from __future__ import annotations

import json
import math
import os
import platform
from dataclasses import MISSING, asdict, dataclass, field, replace
from pathlib import Path
from typing import Callable, Mapping

from hlo_tools.fileio import OutputError, write_output


CACHE_DIR = Path(os.environ.get("HLO_PASS_LAB_CACHE", Path.home() / ".cache" / "hlo-pass-lab"))

#: XLA's GPU performance model constants (xla/service/gpu/model/gpu_performance_model_base.h):
#: kKernelLaunchOverhead = 1 us, kNcclKernelLaunchOverhead = 5 us.
GPU_LAUNCH_OVERHEAD_S = 1e-6
NCCL_LAUNCH_OVERHEAD_S = 5e-6


@dataclass(frozen=True)
class Device:
    """What the roofline needs to know about one accelerator (or the host)."""

    name: str
    kind: str  # "gpu" | "cpu"
    peak_flops: Mapping[str, float]  # matmul dtype -> dense flop/s ("bf16", "f16", "f8", "tf32", "f32", "f64")
    vector_flops: float  # non-matmul flop/s
    transcendentals_per_s: float
    memory_bandwidth: float  # bytes/s
    launch_overhead_s: float
    collective_bandwidth: float = 0.0  # bytes/s per device for collectives (0: use memory bandwidth)
    collective_overhead_s: float = 0.0
    sms: int = 0
    clock_ghz: float = 0.0
    l2_bytes: int = 0
    shared_memory_per_sm: int = 0
    memory_bytes: int = 0
    source: str = ""
    extra: Mapping[str, float] = field(default_factory=dict)
    #: measured (footprint bytes, bytes/s) points, ascending: kernels whose data fits a
    #: cache level stream faster than ``memory_bandwidth`` (empty: one flat bandwidth)
    bandwidth_curve: tuple[tuple[float, float], ...] = ()
    #: measured seconds per output element by opcode (and "reduce": per reduced
    #: element), as XLA:GPU's HloOpProfiles; empty: every flop at ``vector_flops``
    op_seconds: Mapping[str, float] = field(default_factory=dict)
    #: launch cost of a matmul that runs as a library call (the host's YNNPACK or
    #: dot thunk: measured); 0: matmuls launch like any kernel
    library_call_overhead_s: float = 0.0
    #: the interconnect collectives are priced on (``hlo_analysis.collective_time``):
    #: bytes/s per GPU per direction and per-step latency within a node (NVLink) and
    #: across nodes (InfiniBand, one NIC per GPU); 0: not a multi-GPU part
    nvlink_bandwidth: float = 0.0
    nvlink_latency_s: float = 0.0
    gpus_per_node: int = 0
    ib_bandwidth: float = 0.0
    ib_latency_s: float = 0.0
    #: NCCL's latency per step of a tree (all-reduce across nodes)
    ib_tree_latency_s: float = 0.0

    def __post_init__(self):
        object.__setattr__(self, "bandwidth_curve", tuple(sorted((float(b), float(r)) for b, r in self.bandwidth_curve)))
        object.__setattr__(self, "_bandwidths", {})  # footprint -> bandwidth_at's answer

    def bandwidth_at(self, footprint: float) -> float:
        """Bytes/s for a kernel that touches ``footprint`` bytes: interpolated on the
        measured curve in log(bytes), held flat past its ends."""
        curve = self.bandwidth_curve
        if not curve:
            return self.memory_bandwidth
        memo = self._bandwidths  # kernels of one size come back many times
        known = memo.get(footprint)
        if known is None:
            if len(memo) > 65536:
                memo.clear()
            known = memo[footprint] = self._interpolated_bandwidth(footprint)
        return known

    def _interpolated_bandwidth(self, footprint: float) -> float:
        curve = self.bandwidth_curve
        if footprint <= curve[0][0]:
            return curve[0][1]
        for (b0, r0), (b1, r1) in zip(curve, curve[1:]):
            if footprint <= b1:
                f = math.log(footprint / b0) / math.log(b1 / b0)
                return r0 + f * (r1 - r0)
        return curve[-1][1]

    def matmul_peak(self, dtype: str) -> float:
        """Dense matmul flop/s for an element type spelled like HLO (``bf16``, ``f32``...).

        f32 dots run on TF32 tensor cores on GPUs (XLA's default precision); f8
        types use the FP8 rate; anything unknown falls back to the vector rate."""
        p = self.peak_flops
        if dtype.startswith("f8"):
            return p.get("f8", p.get("bf16", self.vector_flops))
        if dtype == "f32":
            return p.get("tf32", p.get("f32", self.vector_flops))
        return p.get(dtype, p.get("f32", self.vector_flops))

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True)

    @classmethod
    def from_dict(cls, d: Mapping) -> "Device":
        known = {f for f in cls.__dataclass_fields__}
        unknown = set(d) - known
        if unknown:
            raise ValueError(f"unknown device spec fields: {', '.join(sorted(unknown))} (known: {', '.join(sorted(known))})")
        required = {n for n, f in cls.__dataclass_fields__.items()
                    if f.default is MISSING and f.default_factory is MISSING}
        if missing := required - set(d):
            raise ValueError(f"device spec lacks the fields: {', '.join(sorted(missing))}")
        return cls(**{k: dict(v) if isinstance(v, Mapping) else v for k, v in d.items()})


# -- interconnect (collective_time) -------------------------------------------------
# NVLink 4 on H100/H200 SXM: 18 links x 25 GB/s per direction = 450 GB/s per GPU per
# direction (900 GB/s bidirectional: H100 and H200 datasheets), 8 GPUs per HGX/DGX
# node behind NVSwitch. Across nodes: DGX H100 / HGX H200 give each GPU its own
# ConnectX-7 NIC, 400 Gb/s InfiniBand NDR = 50 GB/s per direction (DGX H100 user
# guide). Latencies are NCCL's per-step figures for the ring, LL128 protocol
# (nccl src/graph/tuning.cc hwLat: NVLink ring 1.9 us, network ring 4.0 us, network
# tree 8.5 us); the launch is XLA's kNcclKernelLaunchOverhead (NCCL_LAUNCH_OVERHEAD_S).
# XLA's own SoL model (xla/service/gpu/model/sol_gpu_cost_model.cc) uses, for an
# "NVIDIA H100 80GB HBM3", nic_speed 55.56 GB/s, rtt 68.89 us and 8 GPUs per node.
HOPPER_INTERCONNECT = dict(nvlink_bandwidth=450e9, nvlink_latency_s=1.9e-6, gpus_per_node=8,
                           ib_bandwidth=50e9, ib_latency_s=4.0e-6, ib_tree_latency_s=8.5e-6)


# -- GPUs ------------------------------------------------------------------------
# H100 SXM5 80GB: NVIDIA H100 Tensor Core GPU datasheet (2023) and the Hopper
# architecture whitepaper: 132 SMs, 1.98 GHz boost (also XLA's target config
# ../shared/gpu_specs/h100_sxm.txtpb: core_count 132, clock_rate_ghz 1.98,
# memory_bandwidth 3.35e12, l2_cache_size 52428800, shared_memory_per_core 233472),
# dense BF16/FP16 989.4 TFLOPS, FP8 1978.9, INT8 1978.9 TOPS, TF32 494.7, FP32 66.9, FP64 tensor 66.9;
# HBM3 3.35 TB/s; NVLink 4 900 GB/s bidirectional (450 GB/s each way).
# Transcendentals: 16 SFU results / clock / SM (CUDA C Programming Guide,
# arithmetic-instruction throughput table, cc 9.0) = 132 * 16 * 1.98e9.
H100_SXM = Device(
    name="h100", kind="gpu",
    peak_flops={"bf16": 989.4e12, "f16": 989.4e12, "f8": 1978.9e12, "s8": 1978.9e12, "tf32": 494.7e12,
                "f64": 66.9e12},
    vector_flops=66.9e12, transcendentals_per_s=132 * 16 * 1.98e9,
    memory_bandwidth=3.35e12, launch_overhead_s=GPU_LAUNCH_OVERHEAD_S,
    collective_bandwidth=450e9, collective_overhead_s=NCCL_LAUNCH_OVERHEAD_S,
    sms=132, clock_ghz=1.98, l2_bytes=50 * 2**20, shared_memory_per_sm=228 * 1024, memory_bytes=80 * 10**9,
    source="NVIDIA H100 datasheet + Hopper whitepaper; gpu_specs/h100_sxm.txtpb",
    # XLA:GPU's kernel model (hlo_analysis.gpu_kernel_model): fpus_per_core 128 and
    # threads_per_core_limit 2048 from gpu_specs/h100_sxm.txtpb (128 FP32 cores per SM:
    # Hopper whitepaper); memory_transactions_per_clock 32 and l1_cache_size_per_SM
    # 2 KiB are DeviceDescription's hard-coded values in XLA (stream_executor).
    extra={"fpus_per_core": 128, "threads_per_sm": 2048, "memory_transactions_per_clock": 32,
           "l1_bytes_per_sm": 2048},
    **HOPPER_INTERCONNECT,
)
# H200 SXM 141GB: NVIDIA H200 Tensor Core GPU datasheet (2024): same GH100 compute as
# H100 SXM (989 TFLOPS dense BF16, 1979 FP8, 494 TF32, 67 FP32), HBM3e 4.8 TB/s,
# 141 GB; gpu_specs/h200_sxm.txtpb: core_count 132, memory_bandwidth 4.8e12, L2 50 MiB.
H200_SXM = replace(
    H100_SXM, name="h200", memory_bandwidth=4.8e12, memory_bytes=141 * 10**9,
    source="NVIDIA H200 datasheet; gpu_specs/h200_sxm.txtpb",
)
# A100 SXM4 80GB: NVIDIA A100 Tensor Core GPU datasheet (2021) and the Ampere (GA100)
# whitepaper: 108 SMs, 1.41 GHz boost, dense BF16/FP16 312 TFLOPS, INT8 624 TOPS, TF32 156, FP32 19.5,
# FP64 tensor 19.5; no FP8 (f8 falls back to the BF16 rate); HBM2e 2,039 GB/s; L2 40 MB;
# 164 KB shared memory per SM; NVLink 3 600 GB/s bidirectional.
A100_SXM_80GB = Device(
    name="a100", kind="gpu",
    peak_flops={"bf16": 312e12, "f16": 312e12, "s8": 624e12, "tf32": 156e12, "f64": 19.5e12},
    vector_flops=19.5e12, transcendentals_per_s=108 * 16 * 1.41e9,
    memory_bandwidth=2.039e12, launch_overhead_s=GPU_LAUNCH_OVERHEAD_S,
    collective_bandwidth=300e9, collective_overhead_s=NCCL_LAUNCH_OVERHEAD_S,
    sms=108, clock_ghz=1.41, l2_bytes=40 * 2**20, shared_memory_per_sm=164 * 1024, memory_bytes=80 * 10**9,
    source="NVIDIA A100 datasheet + Ampere GA100 whitepaper",
    # 64 FP32 cores per SM, 2048 threads per SM (Ampere GA100 whitepaper); the last
    # two as on H100 (XLA's hard-coded DeviceDescription values)
    extra={"fpus_per_core": 64, "threads_per_sm": 2048, "memory_transactions_per_clock": 32,
           "l1_bytes_per_sm": 2048},
)
# B200 (HGX B200, per GPU): NVIDIA HGX B200 / DGX B200 datasheets (2024): dense FP8
# 4.5 PFLOPS (INT8 4.5 POPS), BF16/FP16 2.25 PFLOPS, TF32 1.1 PFLOPS, FP64 40 TFLOPS (FP32 vector
# taken as 80 TFLOPS); HBM3e 8 TB/s, 180 GB; NVLink 5 1.8 TB/s bidirectional.
# SM count 148, ~1.965 GHz boost and 126 MB L2 are from public Blackwell
# analyses, not the datasheet: treat them as approximate.
B200 = Device(
    name="b200", kind="gpu",
    peak_flops={"bf16": 2.25e15, "f16": 2.25e15, "f8": 4.5e15, "s8": 4.5e15, "tf32": 1.1e15, "f64": 40e12},
    vector_flops=80e12, transcendentals_per_s=148 * 16 * 1.965e9,
    memory_bandwidth=8.0e12, launch_overhead_s=GPU_LAUNCH_OVERHEAD_S,
    collective_bandwidth=900e9, collective_overhead_s=NCCL_LAUNCH_OVERHEAD_S,
    sms=148, clock_ghz=1.965, l2_bytes=126 * 2**20, shared_memory_per_sm=228 * 1024, memory_bytes=180 * 10**9,
    source="NVIDIA HGX/DGX B200 datasheets (SMs, clock, L2 approximate)",
    # 128 FP32 cores and 2048 threads per SM as Hopper (Blackwell tuning guide);
    # the last two are XLA's hard-coded DeviceDescription values
    extra={"fpus_per_core": 128, "threads_per_sm": 2048, "memory_transactions_per_clock": 32,
           "l1_bytes_per_sm": 2048},
)

# The latency-hiding scheduler's device (hlo_analysis.overlap.CostModel): round
# H100-class figures, older than the cited spec above (400 TFLOP/s for every flop,
# 3 TB/s, 200 GB/s per link, 5 us per async transfer). Only their ratios steer a
# schedule; they stay as they were so that schedules do not change. Not a ``load``able
# device: the roofline uses H100_SXM.
SCHEDULING_H100 = Device(
    name="h100-scheduling", kind="gpu", peak_flops={}, vector_flops=400e12, transcendentals_per_s=400e12,
    memory_bandwidth=3.0e12, launch_overhead_s=0.0, collective_bandwidth=200e9, collective_overhead_s=5e-6,
    source="round H100-class figures for the scheduler (only ratios matter)",
)

GPUS: dict[str, Device] = {d.name: d for d in (H100_SXM, H200_SXM, A100_SXM_80GB, B200)}
ALIASES = {"h100_sxm": "h100", "h200_sxm": "h200", "a100_sxm": "a100", "a100_80gb": "a100", "cpu": "host", "host_cpu": "host"}


# -- the host CPU, measured ----------------------------------------------------------
#: bumped when measure_host measures differently: older cached specs are measured again
HOST_SPEC_VERSION = 4


#: How ``host()`` measures this machine when no current spec is cached: set by the
#: application (``hlo_lab.measured.host``), since measuring compiles with XLA and
#: analysis does not.
_HOST_MEASURER: Callable[[], Device] | None = None


def register_host_measurer(measure: Callable[[], Device]) -> None:
    """Sets what ``host()`` calls to measure the host (``hlo_lab`` does on import)."""
    global _HOST_MEASURER
    _HOST_MEASURER = measure


def usable_cpus() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def host_cache_path() -> Path:
    """Keyed by the CPUs this process may use: a spec measured under ``taskset`` is
    not one for the whole machine, nor the reverse."""
    return CACHE_DIR / f"host_spec_{platform.node() or 'host'}_{usable_cpus()}.json"


def host(*, remeasure: bool = False) -> Device:
    """The host spec: measured once per machine and cached as JSON."""
    path = host_cache_path()
    if path.is_file() and not remeasure:
        try:
            cached = Device.from_dict(json.loads(path.read_text()))
            if cached.extra.get("spec_version") == HOST_SPEC_VERSION:
                return cached
        except (ValueError, TypeError, json.JSONDecodeError):
            pass  # a stale or broken cache is measured again
    if _HOST_MEASURER is None:
        raise LookupError(f"no host spec at {path} and nothing here measures one: "
                          "import hlo_lab (hlo_lab.measured.host measures the host with XLA:CPU)")
    dev = _HOST_MEASURER()
    try:
        write_output(path, dev.to_json())
    except OutputError:
        pass  # an unwritable cache costs a re-measure next time, not this run
    return dev


def load(spec: str | Device) -> Device:
    """A device by name (``h100``, ``h200``, ``a100``, ``b200``, ``host``) or from a
    JSON file with :class:`Device`'s fields."""
    if isinstance(spec, Device):
        return spec
    key = ALIASES.get(spec.lower(), spec.lower())
    if key in GPUS:
        return GPUS[key]
    if key == "host":
        return host()
    p = Path(spec)
    if p.is_file():
        return Device.from_dict(json.loads(p.read_text()))
    raise ValueError(f"unknown device {spec!r}: use one of {', '.join([*GPUS, 'host'])} or a JSON spec file")


NAMES = (*GPUS, "host")
