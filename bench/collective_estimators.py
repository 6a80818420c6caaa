"""Our collective prices (``hlo_analysis.collective_time.price``) against XLA's
own estimates (``xla_bridge.collective_estimates``: the numbers XLA:GPU's
latency-hiding scheduler logs, from its NCCL tables within a node and its SOL
formulas across nodes) on the same collectives: the ratio table of docs/collectives.md.

Each sharded corpus module's ``before_optimizations`` is compiled by XLA for 8 GPUs
of ``--target`` without a GPU; both sides price the collectives of the module XLA
scheduled, joined by instruction name, so the groups and bytes are the same.
``--nodes 2`` tells XLA 4 GPUs per node (``gpus_per_node``/``partition_size``) and
us ``nodes=2``.

    python bench/collective_estimators.py [--target h100] [--nodes 1] [--per-collective]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from corpus import bundled  # noqa: E402
from hlo_analysis import devices  # noqa: E402
from hlo_analysis.collective_time import price_detail  # noqa: E402
from hlo_analysis.collectives import inventory  # noqa: E402
from hlo_analysis.replica_groups import Mesh  # noqa: E402
from hlo_tools.parser import parse  # noqa: E402
from hlo_analysis.units import fmt_bytes, fmt_seconds  # noqa: E402
from xla_bridge.collective_estimates import xla_collective_estimates  # noqa: E402

DEVICES = 8


def pairs(entry, target: str, nodes: int) -> list[dict]:
    """One row per collective XLA estimated: kind, bytes, axis, ours and XLA's seconds."""
    options = {"gpus_per_node": DEVICES // nodes, "partition_size": DEVICES // nodes} if nodes > 1 else None
    est = xla_collective_estimates(entry.text("before_optimizations"), target=target,
                                   topology=f"1x1x{DEVICES}", options=options)
    mesh = Mesh(tuple(entry.meta["mesh"]["axes"]), tuple(entry.meta["mesh"]["shape"]))
    ours = {c.name: c for c in inventory(parse(est.scheduled_text, source="<scheduled>"), mesh)}
    dev = devices.load(target)
    rows = []
    for x in est.collectives:
        c = ours.get(x.name)
        if c is None or x.seconds is None:
            continue
        p = price_detail(c, dev, nodes, devices=DEVICES)
        rows.append({"module": entry.name, "name": x.name, "kind": x.kind, "triton": x.triton, "bytes": c.bytes,
                     "axis": c.axis, "group": c.group_size, "link": p.link, "ours_s": p.seconds,
                     "xla_s": x.seconds, "ratio": p.seconds / x.seconds})
    missed = len(est.collectives) - len(rows)
    if missed:
        print(f"# {entry.name}: {missed} of {len(est.collectives)} collectives not joined "
              f"(XLA gave no number, or our inventory lacks the name)", file=sys.stderr)
    return rows


def table(cols: list[str], rows: list[list[str]]) -> None:
    print("| " + " | ".join(cols) + " |")
    print("|" + "---|" * len(cols))
    for r in rows:
        print("| " + " | ".join(r) + " |")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default="h100")
    ap.add_argument("--nodes", type=int, default=1, choices=(1, 2, 4))
    ap.add_argument("--per-collective", action="store_true", help="also a row per collective")
    args = ap.parse_args()
    rows = [r for e in bundled.load("*-dp2tp4") for r in pairs(e, args.target, args.nodes)]
    groups: dict[tuple[str, str], list[dict]] = {}
    for r in rows:
        groups.setdefault((r["kind"] + (" (Triton one-shot)" if r["triton"] else ""), r["link"]), []).append(r)
    out = []
    for (kind, link), rs in sorted(groups.items()):
        ratios = [r["ratio"] for r in rs]
        out.append([kind, link, str(len(rs)), f"{fmt_bytes(min(r['bytes'] for r in rs))}..{fmt_bytes(max(r['bytes'] for r in rs))}",
                    fmt_seconds(sum(r["ours_s"] for r in rs)), fmt_seconds(sum(r["xla_s"] for r in rs)),
                    f"{statistics.median(ratios):.2f}", f"{min(ratios):.2f}..{max(ratios):.2f}"])
    all_ratios = [r["ratio"] for r in rows]
    out.append(["all", "", str(len(rows)), "", fmt_seconds(sum(r["ours_s"] for r in rows)),
                fmt_seconds(sum(r["xla_s"] for r in rows)), f"{statistics.median(all_ratios):.2f}",
                f"{min(all_ratios):.2f}..{max(all_ratios):.2f}"])
    print(f"## ours / XLA's estimate, {args.target}, {DEVICES} GPUs on {args.nodes} node(s), "
          f"3 sharded corpus modules\n")
    table(["kind", "link (ours)", "collectives", "bytes per device", "ours (sum)", "XLA (sum)", "median ours/XLA",
           "min..max"], out)
    if args.per_collective:
        print()
        table(["module", "collective", "kind", "bytes", "axis", "ours", "XLA", "ours/XLA"],
              [[r["module"].replace("-tiny-train-f32-dp2tp4", ""), r["name"], r["kind"], fmt_bytes(r["bytes"]),
                r["axis"], fmt_seconds(r["ours_s"]), fmt_seconds(r["xla_s"]), f"{r['ratio']:.2f}"] for r in rows])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
