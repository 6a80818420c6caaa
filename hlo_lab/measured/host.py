"""Measures the host CPU for the roofline (``hlo_analysis.devices.host()`` caches the
result): numpy for DRAM bandwidth and the GEMM rate, XLA:CPU micro-kernels for the rest."""

from __future__ import annotations

import os
import platform
import time

import numpy as np

from hlo_analysis.devices import HOST_SPEC_VERSION, Device, usable_cpus

from . import host_bench, op_profile


def measure_host(*, seconds: float = 0.6) -> Device:
    """Measures this machine: DRAM bandwidth (numpy copy of 128 MiB: read + write)
    and matmul flop rate (numpy f32 GEMM, 1024^3) with numpy; the cache bandwidth
    curve, the fused-loop vector and transcendental rates, the per-thunk launch and
    matmul library-call overheads and the per-opcode costs with XLA:CPU
    micro-kernels (``host_bench``, ``op_profile``), timed by XLA's trace events.

    Run it after pinning the process to fewer cores to get those cores' figures
    (``bench/cost_model_accuracy.py --pin`` does). About four seconds."""

    def best(fn, reps: int = 5) -> float:
        ts = []
        deadline = time.perf_counter() + seconds / 3
        for _ in range(reps):
            t0 = time.perf_counter()
            fn()
            ts.append(time.perf_counter() - t0)
            if time.perf_counter() > deadline and len(ts) >= 2:
                break
        return min(ts)

    n = 32 * 2**20 // 4  # 128 MiB of f32: past any last-level cache here
    src = np.ones(n, np.float32)
    dst = np.empty_like(src)
    np.copyto(dst, src)
    t = best(lambda: np.copyto(dst, src))
    bandwidth = 2 * src.nbytes / t
    k = 1024
    a = np.ones((k, k), np.float32)
    b = np.ones((k, k), np.float32)
    a @ b
    gemm = 2 * k**3 / best(lambda: a @ b)
    # XLA:CPU micro-kernels, in the order host_bench measured them (launch first:
    # every other figure takes it out)
    launch = host_bench.launch_overhead()
    vec = host_bench.vector_rate()
    curve = (*host_bench.bandwidth_curve(launch), (2.0 * src.nbytes, bandwidth))
    transcendentals = host_bench.transcendental_rate(vec)
    library = host_bench.library_call_overhead()
    return Device(
        name="host", kind="cpu", peak_flops={"f32": gemm, "bf16": gemm / 2, "f16": gemm / 2, "f64": gemm / 2},
        memory_bandwidth=bandwidth, bandwidth_curve=curve, vector_flops=vec, transcendentals_per_s=transcendentals,
        launch_overhead_s=launch, library_call_overhead_s=library, op_seconds=op_profile.measure(launch_s=launch),
        sms=usable_cpus(),
        source=f"measured on {platform.node()} ({os.cpu_count()} CPUs) by hlo_lab.measured.host.measure_host",
        extra={"spec_version": HOST_SPEC_VERSION},
    )
