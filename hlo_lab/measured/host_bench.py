"""Micro-benchmarks of the host CPU as XLA:CPU uses it, for the host roofline:
small synthetic kernels compiled by stock XLA:CPU, timed by XLA's trace events.

Each benchmark and why it is built so: docs/analysis.md#host-micro-benchmarks-host_bench
"""

from __future__ import annotations

import statistics

import numpy as np

from xla_bridge.measure import Measurement
from xla_bridge.trace import thunk_times

from hlo_analysis.cost import is_kernel

#: footprints (bytes read + written) the bandwidth curve is measured at
CURVE_BYTES = tuple(2**k for k in range(13, 25))  # 8 KiB .. 16 MiB


def _hlo(name: str, n: int, body: list[str], root: str) -> str:
    lines = [f"HloModule {name}", "", "ENTRY %main {", f"  %p0 = f32[{n}]{{0}} parameter(0)"]
    lines += [f"  {b}" for b in body]
    lines.append(f"  ROOT {root}")
    lines.append("}")
    return "\n".join(lines) + "\n"


def compiled_kernel(text: str):
    """Compiles ``text`` with stock XLA:CPU; returns the result and its one kernel."""
    res = Measurement("cpu").compile(text)
    ks = [i for i in res.optimized_module.entry if is_kernel(i)]
    if len(ks) != 1:
        raise RuntimeError(f"micro-benchmark {res.module_name} compiled to {len(ks)} kernels, not 1: "
                           f"{[k.name for k in ks]}")
    return res, ks[0]


def kernel_us(text: str, shapes: list[tuple[int, ...]], reps: int, *, compiled=None) -> float:
    """The median trace time, in microseconds, of the one kernel of ``text``, whose
    f32 parameters have ``shapes`` (the first holds values in [0.25, 0.75], the
    others alternately in [0.5, 1.0] and [1.0, 1.5]). Two input sets take turns,
    as in the kernel bench: with one, XLA:CPU's run times triple here (a buffer
    reuse effect), which is not how a module runs."""
    res, kernel = compiled or compiled_kernel(text)

    def inputs(flip: bool) -> list[np.ndarray]:
        out = []
        for k, dims in enumerate(shapes):
            a = _array(int(np.prod(dims))) + (0.0 if k == 0 else 0.75 - 0.5 * (k % 2))
            out.append((a[::-1] if flip else a).reshape(dims).copy())
        return out

    sets = [inputs(False), inputs(True)]
    return thunk_times(res, sets, [kernel.name], reps=reps, warmup=3)[kernel.name].median_us


def _array(n: int) -> np.ndarray:
    return np.linspace(0.25, 0.75, n, dtype=np.float32)


#: passes over every micro-kernel. A rate is the best pass (a ceiling is what the
#: machine can do, and on this VM a pass sees one point in five 2-20x slow for a
#: second or so: outside load, fresh-page faults for outputs over glibc's mmap
#: threshold, which interleaved passes do not see at the same point); an overhead
#: is the median pass.
PASSES = 3


def best_of_passes(texts: dict, reps: dict, *, pick=min) -> dict:
    """Median trace time (us) of each micro-kernel in each of ``PASSES`` interleaved
    passes, reduced over the passes by ``pick``: ``min`` for a ceiling (what the
    machine can do), ``statistics.median`` for an overhead (what each call pays).
    ``texts``: key -> (HLO text, parameter shapes)."""
    compiled = {key: compiled_kernel(text) for key, (text, _) in texts.items()}
    seen: dict = {key: [] for key in texts}
    for _ in range(PASSES):
        for key, (_, shapes) in texts.items():
            seen[key].append(kernel_us("", shapes, reps[key], compiled=compiled[key]))
    return {key: pick(v) for key, v in seen.items()}


def bandwidth_curve(launch_s: float, sizes: tuple[int, ...] = CURVE_BYTES) -> tuple[tuple[float, float], ...]:
    """(footprint bytes, bytes/s) for a read-once write-once loop at each size, with
    ``launch_s`` (the roofline adds it back) taken out of each time."""
    texts = {size: (_hlo(f"bw_{size // 8}", size // 8, [], f"%neg = f32[{size // 8}]{{0}} negate(%p0)"),
                    [(size // 8,)]) for size in sizes}
    us = best_of_passes(texts, {size: int(min(50, max(5, 2e8 / size))) for size in sizes})
    return tuple((float(size), size / max(us[size] * 1e-6 - launch_s, 0.5 * us[size] * 1e-6)) for size in sizes)


def _two_op_chain(name: str, n: int, steps: int, first: str, second: str, setup: list[str]) -> str:
    """A module applying ``first`` then ``second`` (templates on ``{x}``) ``steps``
    times to its f32[n] parameter: one loop fusion once XLA has fused it."""
    body = list(setup)
    prev = "%p0"
    for i in range(steps):
        body.append(f"%first{i} = f32[{n}]{{0}} " + first.format(x=prev))
        body.append(f"%second{i} = f32[{n}]{{0}} " + second.format(x=f"%first{i}"))
        prev = f"%second{i}"
    last = body.pop().split(" = ", 1)[1]
    return _hlo(name, n, body, f"%out = {last}")


def _one_kernel_us(text: str, n: int) -> float:
    return best_of_passes({0: (text, [(n,)])}, {0: 50})[0]


def vector_rate(n: int = 8192, steps: int = 16) -> float:
    """flop/s of a fused elementwise chain: ``x = x * 0.5 + 0.25`` ``steps`` times
    (two flops a step) on f32[n] (32 KiB: cache-resident)."""
    setup = ["%h = f32[] constant(0.5)", "%q = f32[] constant(0.25)",
             f"%hb = f32[{n}]{{0}} broadcast(%h), dimensions={{}}", f"%qb = f32[{n}]{{0}} broadcast(%q), dimensions={{}}"]
    text = _two_op_chain("vector_rate", n, steps, "multiply({x}, %hb)", "add({x}, %qb)", setup)
    return 2 * steps * n / (_one_kernel_us(text, n) * 1e-6)


def transcendental_rate(vector_flops: float, n: int = 8192, steps: int = 8) -> float:
    """transcendentals/s of ``x = exp(-x)`` ``steps`` times on f32[n], with the
    negates' time at ``vector_flops`` taken out."""
    text = _two_op_chain("transcendental_rate", n, steps, "negate({x})", "exponential({x})", [])
    us = _one_kernel_us(text, n)
    seconds = max(us * 1e-6 - steps * n / vector_flops, 0.1 * us * 1e-6)
    return steps * n / seconds


def launch_overhead() -> float:
    """Seconds one near-empty thunk takes (negate of four floats)."""
    text = _hlo("launch", 4, [], "%neg = f32[4]{0} negate(%p0)")
    return best_of_passes({0: (text, [(4,)])}, {0: 200}, pick=statistics.median)[0] * 1e-6


def library_call_overhead() -> float:
    """Seconds a matmul library call (YNNPACK, or XLA:CPU's own dot thunk) takes
    before any arithmetic: a [4,16]x[16,16] dot (2 kFLOP). Measured here: 1.5-3.8 us
    over all runs (3.3-3.8 us in the pinned runs of the docs), while a loop
    kernel's launch is 0.4-0.7 us."""
    text = """HloModule library_call

ENTRY %main {
  %p0 = f32[4,16]{1,0} parameter(0)
  %p1 = f32[16,16]{1,0} parameter(1)
  ROOT %d = f32[4,16]{1,0} dot(%p0, %p1), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}
"""
    return best_of_passes({0: (text, [(4, 16), (16, 16)])}, {0: 100}, pick=statistics.median)[0] * 1e-6
