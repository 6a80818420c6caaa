"""The sharded corpus modules' communication as Markdown tables (docs/collectives.md):
counts and bytes per kind and per mesh axis, peak memory per device, predicted
communication time and its exposed fraction; and our latency-hiding scheduler's
exposed communication against XLA's schedule on the 8-GPU modules.

    python bench/collectives_corpus.py [--target h100] [--nodes 1]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from corpus import bundled  # noqa: E402
from hlo_analysis import devices  # noqa: E402
from hlo_analysis.communication import analyze  # noqa: E402
from hlo_analysis.replica_groups import Mesh  # noqa: E402

from hlo_lab.cli.collectives import latency_hiding_comparison  # noqa: E402
from hlo_analysis.units import fmt_bytes, fmt_seconds  # noqa: E402

STAGES = {"cpu_after_optimizations": "cpu", "gpu_h100_after_optimizations": "gpu h100"}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default="h100")
    ap.add_argument("--nodes", type=int, default=1)
    args = ap.parse_args()
    dev = devices.load(args.target)
    inv_rows, axis_rows, lhs_rows = [], [], []
    for e in bundled.load("*-dp2tp4"):
        mesh = Mesh(tuple(e.meta["mesh"]["axes"]), tuple(e.meta["mesh"]["shape"]))
        for stage, short in STAGES.items():
            m = e.module(stage)
            r = analyze(m, mesh, dev, args.nodes)
            d = r.as_dict()
            name = e.name.replace("-tiny-train-f32-dp2tp4", "")
            inv_rows.append([name, short, ", ".join(f"{k} {n}" for k, n in d["counts"].items()),
                             ", ".join(f"{k} {fmt_bytes(b)}" for k, b in d["bytes"].items()),
                             fmt_bytes(r.memory.peak_bytes), fmt_bytes(r.memory.parameters_bytes),
                             fmt_seconds(r.comm_s), fmt_seconds(r.exposed_s), f"{r.exposed_fraction:.0%}"])
            axis_rows.append([name, short, "; ".join(
                f"{k}: {v['n']}, {fmt_bytes(d['bytes_by_axis'][k])}, {fmt_seconds(v['time_us'] * 1e-6)}"
                for k, v in d["time_by_axis"].items())])
            if stage.startswith("gpu"):
                for k in (2, 8):
                    s = latency_hiding_comparison(m, mesh, dev, args.nodes, max_in_flight=k, memory_slack=0.1)
                    lhs_rows.append([name, str(k), fmt_seconds(s.comm_s), fmt_seconds(s.before_exposed_s),
                                     fmt_seconds(s.after_exposed_s),
                                     f"{s.before_exposed_s / s.comm_s:.0%} -> {s.after_exposed_s / s.comm_s:.0%}",
                                     f"{fmt_bytes(s.before_peak_bytes)} -> {fmt_bytes(s.after_peak_bytes)}"])

    def table(cols, rows):
        print("| " + " | ".join(cols) + " |")
        print("|" + "---|" * len(cols))
        for r in rows:
            print("| " + " | ".join(r) + " |")
        print()

    print(f"target {dev.name}, {args.nodes} node(s)\n")
    table(["module", "stage", "counts", "bytes per device by kind", "peak memory/device", "of which parameters",
           "comm time", "exposed", "exposed %"], inv_rows)
    table(["module", "stage", "per mesh axis: collectives, bytes per device, time"], axis_rows)
    table(["module (gpu h100)", "LHS max in flight", "comm time", "exposed, XLA's schedule", "exposed, ours",
           "exposed %", "peak temporaries"], lhs_rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
