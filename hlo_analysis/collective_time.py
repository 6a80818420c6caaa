"""A collective's time on a GPU cluster: the alpha-beta ring model (and a tree for an
all-reduce across nodes) with the interconnect figures of ``hlo_analysis.devices``;
``price(collective, device, nodes)`` is the one entry point.

The formulas, the figures and the node split: docs/collectives.md#prices
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .collectives import Collective
from .devices import NCCL_LAUNCH_OVERHEAD_S, Device


@dataclass(frozen=True)
class Price:
    """One collective's time and how it was reached."""

    seconds: float
    link: str        # "nvlink" | "ib" | "none"
    algorithm: str   # "ring" | "tree" | "direct" | "none"


def spans_nodes(collective: Collective, devices: int, nodes: int) -> bool:
    """Whether some group (or permute pair) of ``collective`` crosses a node boundary."""
    if nodes <= 1:
        return False
    per_node = max(1, devices // nodes)
    return any(len({d // per_node for d in g}) > 1 for g in collective.groups)


def price_detail(collective: Collective, device: Device, nodes: int = 1, *, devices: int | None = None) -> Price:
    """:func:`price` with the link and algorithm it chose."""
    if not device.nvlink_bandwidth:
        raise ValueError(f"device {device.name!r} has no interconnect figures (nvlink_bandwidth): "
                         f"use h100 or h200, or a spec file that sets them")
    n, size = collective.group_size, float(collective.bytes)
    if n < 2 or collective.wire_bytes == 0:
        return Price(0.0, "none", "none")
    total = devices or 1 + max(d for g in collective.groups for d in g)
    inter = spans_nodes(collective, total, nodes)
    bw, lat = (device.ib_bandwidth, device.ib_latency_s) if inter else (device.nvlink_bandwidth,
                                                                        device.nvlink_latency_s)
    link = "ib" if inter else "nvlink"
    launch = NCCL_LAUNCH_OVERHEAD_S
    op = collective.opcode
    if op == "all-reduce":
        ring = launch + 2 * (n - 1) * lat + 2 * (n - 1) / n * size / bw
        if inter:
            tree = launch + 2 * math.ceil(math.log2(n)) * device.ib_tree_latency_s + 2 * size / bw
            if tree < ring:
                return Price(tree, link, "tree")
        return Price(ring, link, "ring")
    if op == "collective-permute":
        return Price(launch + lat + size / bw, link, "direct")
    if op == "collective-broadcast":
        return Price(launch + (n - 1) * lat + size / bw, link, "ring")
    return Price(launch + (n - 1) * lat + (n - 1) / n * size / bw, link, "ring")


def price(collective: Collective, device: Device, nodes: int = 1, *, devices: int | None = None) -> float:
    """Seconds for one execution of ``collective`` on ``device`` GPUs spread over
    ``nodes`` nodes (``devices``: the module's device count; default: the largest
    id in its groups + 1)."""
    return price_detail(collective, device, nodes, devices=devices).seconds
