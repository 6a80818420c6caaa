"""What containing XLA in the worker process costs: the first call (the worker
starts: Python, jax, the CPU client) and every later one (a pickle each way), next
to the same compiles in this process.

    python bench/xla_worker_overhead.py [--module corpus-name] [--reps N]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import corpus  # noqa: E402
from xla_bridge import worker  # noqa: E402
from xla_bridge.compiler import compile  # noqa: E402
from xla_bridge.examples import UNFUSED  # noqa: E402
from xla_bridge.runner import run_module  # noqa: E402


def _seconds(fn, reps: int) -> list[float]:
    out = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--module", default="llama3-tiny-decode-f32")
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args(argv)

    text = next(e for e in corpus.load() if e.name == args.module).text("before_optimizations")

    t0 = time.perf_counter()
    compile(text, contained=True)
    first_contained = time.perf_counter() - t0
    t0 = time.perf_counter()
    compile(text)
    first_here = time.perf_counter() - t0  # jax import and client start are in it

    ping = _seconds(lambda: worker.contained(os.getpid), 50)
    contained, here, run_contained, run_here = [], [], [], []
    for _ in range(args.reps):  # interleaved, so that the machine's load hits both alike
        contained += _seconds(lambda: compile(text, contained=True), 1)
        here += _seconds(lambda: compile(text), 1)
    for _ in range(20):
        run_contained += _seconds(lambda: run_module(UNFUSED, contained=True), 1)
        run_here += _seconds(lambda: run_module(UNFUSED), 1)
    w = worker.worker()

    def ms(xs: list[float]) -> str:
        return f"{statistics.median(xs) * 1e3:8.1f} ms"

    print(f"module {args.module} ({len(text) / 1024:.0f} KB of HLO); worker pid {w.pid}, started {w.starts}x")
    print(f"first compile, contained (worker start + jax + compile) {first_contained * 1e3:8.1f} ms")
    print(f"first compile, in process (jax import + compile)        {first_here * 1e3:8.1f} ms")
    print(f"round trip of an empty call to the worker (median)      {statistics.median(ping) * 1e6:8.0f} us")
    print(f"compile again, contained (median of {args.reps})                {ms(contained)}")
    print(f"compile again, in process (median of {args.reps})               {ms(here)}")
    print(f"compile + run a tiny module, contained (median of 20)   {ms(run_contained)}")
    print(f"compile + run a tiny module, in process (median of 20)  {ms(run_here)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
