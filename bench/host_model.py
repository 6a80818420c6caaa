"""The host roofline's measured figures, each as a ratio to a reference timed in
the same run (so machine load hits both alike). The unit tests check what these
figures are made of; how big they come out is a measurement, and lives here.

    JAX_PLATFORMS=cpu .venv/bin/python bench/host_model.py [--reps 6] [--json]

* ``thunk / execute``: the longest per-thunk time XLA's trace gives for a corpus
  module (``trace.thunk_times``) over the wall time of one whole execute
  (``bench.time_compiled``). Each thunk runs inside one execute: a ratio near
  1 or above means a span was paired with a later run's end event.
* ``library call / launch``: a matmul library call's fixed cost
  (``host_bench.library_call_overhead``) over a loop kernel's launch
  (``host_bench.launch_overhead``); above 1 on XLA:CPU (3.3-3.8 us against
  0.4-0.7 us pinned, in the docs).
* ``<op> / add``: the per-element cost of each profiled opcode
  (``op_profile.measure``) over ``add``'s: the profile is per opcode, not one
  rate for all (transcendentals cost more than an add).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import corpus  # noqa: E402
from hlo_analysis import kernels  # noqa: E402
from hlo_lab.measured import host_bench, op_profile  # noqa: E402
from xla_bridge.bench import time_compiled  # noqa: E402
from xla_bridge.compiler import compile as xla_compile  # noqa: E402
from xla_bridge.inputs import make_inputs  # noqa: E402
from xla_bridge.trace import thunk_times  # noqa: E402

MODULE = "llama3-tiny-decode-f32"


def thunk_vs_execute(reps: int) -> dict:
    """The longest thunk's median over a whole execute's median, on ``MODULE``."""
    compiled = xla_compile(next(corpus.load(MODULE)).text("before_optimizations"), "cpu", "stock")
    names = [k.name for k in kernels.kernels_of(compiled.optimized_module)]
    sets = make_inputs(compiled.optimized_module, sets=2)
    times = thunk_times(compiled, sets, names, reps=reps)
    name, longest = max(((n, t.median_us) for n, t in times.items()), key=lambda x: x[1])
    wall = time_compiled(compiled, sets, reps=20).median_us
    return {"figure": f"thunk / execute ({MODULE}: {name})", "value_us": longest, "reference_us": wall,
            "ratio": longest / wall, "expected": "< 0.5"}


def library_call_vs_launch() -> dict:
    launch = host_bench.launch_overhead()
    library = host_bench.library_call_overhead()
    return {"figure": "library call / launch", "value_us": library * 1e6, "reference_us": launch * 1e6,
            "ratio": library / launch, "expected": "> 1"}


def ops_vs_add() -> list[dict]:
    per_element = op_profile.measure(launch_s=host_bench.launch_overhead())
    add = per_element["add"]
    return [{"figure": f"{op} / add (per element)", "value_us": s * 1e6, "reference_us": add * 1e6,
             "ratio": s / add, "expected": "> 1" if op == "exponential" else ""}
            for op, s in sorted(per_element.items()) if op != "add"]


def _met(ratio: float, expected: str) -> str:
    """``expected`` is "< x", "> x" or "" (no expectation: a figure to read)."""
    if not expected:
        return ""
    op, bound = expected.split()
    return "yes" if (ratio < float(bound) if op == "<" else ratio > float(bound)) else "NO"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=6, help="traced runs per thunk (thunk / execute)")
    ap.add_argument("--json", action="store_true", help="print the rows as JSON instead of a table")
    args = ap.parse_args(argv)
    rows = [thunk_vs_execute(args.reps), library_call_vs_launch(), *ops_vs_add()]
    for r in rows:
        r["met"] = _met(r["ratio"], r["expected"])
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    from rich.console import Console
    from rich.table import Table

    table = Table("figure", "value us", "reference us", "ratio", "expected", "met")
    for r in rows:
        table.add_row(r["figure"], f"{r['value_us']:.4g}", f"{r['reference_us']:.4g}", f"{r['ratio']:.3g}", r["expected"], r["met"])
    Console(width=160).print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
