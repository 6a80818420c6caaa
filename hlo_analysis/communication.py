"""What a sharded module's communication costs, from the module alone: its
collective inventory (``collectives``) priced on a target (``collective_time``),
how much of that the module's own schedule hides behind compute, and its memory
per device.

Exposed time, under one model (``overlap.TableCostModel``): a kernel takes its
roofline time on the target (``roofline.estimate``, XLA:GPU's kernel model on a
GPU), a sync collective its price, and an async pair's transfer its price; the
pair is covered by the time of the instructions scheduled strictly between its
start and its done (``overlap.overlap``), capped at its price. A sync collective
is exposed in full, an async one by ``price - covered``. Concurrent transfers
are not charged for sharing a link, so this is the most the schedule could hide.

Memory per device: peak live bytes of the entry under its schedule
(``memory.profile``; entry parameters counted apart), next to XLA's own buffer
assignment when an ``--xla_dump_to`` folder has ``*-buffer-assignment.txt``
beside the module file.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from hlo_tools import HloOpcode, Module

from . import memory
from .collective_time import price_detail
from .collectives import Collective, counts, inventory
from .cost import analyze as analyze_cost
from .cost import is_kernel
from .devices import Device
from .overlap import TableCostModel, is_async_start, overlap
from .replica_groups import Mesh
from .roofline import estimate


@dataclass(frozen=True)
class PricedCollective:
    collective: Collective
    seconds: float          # one execution
    link: str
    algorithm: str
    covered_s: float        # one execution
    exposed_s: float        # one execution

    def as_dict(self) -> dict:
        c = self.collective
        return {"kind": c.kind, "opcode": c.opcode, "name": c.name, "bytes": c.bytes, "wire_bytes": c.wire_bytes,
                "axis": c.axis, "group_size": c.group_size, "is_async": c.is_async, "start": c.start,
                "done": c.done, "mode": c.mode, "channel_id": c.channel_id, "executions": c.executions,
                "trip_count_known": c.trip_count_known, "time_us": self.seconds * 1e6,
                "exposed_us": self.exposed_s * 1e6, "covered_us": self.covered_s * 1e6, "link": self.link,
                "algorithm": self.algorithm, "op_name": c.op_name, "source": c.source,
                "groups": [list(g) for g in c.groups[:8]]}


@dataclass(frozen=True)
class MemoryPerDevice:
    parameters_bytes: int
    peak_temporaries_bytes: int   # peak live bytes, entry parameters left out
    peak_bytes: int               # the same with entry parameters
    peak_at: str
    xla: dict | None = None       # XLA's buffer assignment totals, when dumped

    def as_dict(self) -> dict:
        return {"parameters_bytes": self.parameters_bytes, "peak_temporaries_bytes": self.peak_temporaries_bytes,
                "peak_bytes": self.peak_bytes, "peak_at": self.peak_at, "xla_buffer_assignment": self.xla}


@dataclass(frozen=True)
class CommunicationReport:
    module: str
    mesh: Mesh
    device: str
    nodes: int
    collectives: tuple[PricedCollective, ...]
    compute_s: float
    memory: MemoryPerDevice | None = None
    notes: tuple[str, ...] = field(default=())

    @property
    def comm_s(self) -> float:
        return sum(p.seconds * p.collective.executions for p in self.collectives)

    @property
    def exposed_s(self) -> float:
        return sum(p.exposed_s * p.collective.executions for p in self.collectives)

    @property
    def exposed_fraction(self) -> float:
        """Share of communication time not hidden (0 when there is none)."""
        return self.exposed_s / self.comm_s if self.comm_s else 0.0

    def counts(self) -> dict[str, int]:
        return counts(p.collective for p in self.collectives)

    def bytes_by(self, key: str) -> dict[str, int]:
        """Payload bytes per device, by ``kind`` or ``axis`` (times executions)."""
        out: dict[str, int] = defaultdict(int)
        for p in self.collectives:
            out[getattr(p.collective, key)] += p.collective.bytes * p.collective.executions
        return dict(sorted(out.items()))

    def time_by(self, key: str) -> dict[str, dict[str, float]]:
        out: dict[str, dict[str, float]] = defaultdict(lambda: {"time_us": 0.0, "exposed_us": 0.0, "n": 0})
        for p in self.collectives:
            d = out[getattr(p.collective, key)]
            d["time_us"] += p.seconds * p.collective.executions * 1e6
            d["exposed_us"] += p.exposed_s * p.collective.executions * 1e6
            d["n"] += 1
        return dict(sorted(out.items()))

    def as_dict(self) -> dict:
        return {
            "module": self.module, "mesh": {"axes": list(self.mesh.axes), "shape": list(self.mesh.shape)},
            "target": self.device, "nodes": self.nodes, "counts": self.counts(), "bytes": self.bytes_by("kind"),
            "bytes_by_axis": self.bytes_by("axis"), "time_by_kind": self.time_by("kind"),
            "time_by_axis": self.time_by("axis"),
            "totals": {"collectives": len(self.collectives), "comm_us": self.comm_s * 1e6,
                       "exposed_us": self.exposed_s * 1e6, "exposed_fraction": self.exposed_fraction,
                       "compute_us": self.compute_s * 1e6,
                       "bytes": sum(p.collective.bytes * p.collective.executions for p in self.collectives),
                       "wire_bytes": sum(p.collective.wire_bytes * p.collective.executions
                                         for p in self.collectives)},
            "memory": self.memory.as_dict() if self.memory else None,
            "collectives": [p.as_dict() for p in self.collectives], "notes": list(self.notes)}


def cost_model(module: Module, collectives: list[Collective], device: Device, nodes: int,
               mesh: Mesh) -> TableCostModel:
    """Every instruction of the computations that hold a collective span, timed
    on ``device`` (module docstring); async starts carry their collective's price."""
    by_name = {(c.computation, c.start): c for c in collectives if c.is_async}
    sync = {(c.computation, c.name): c for c in collectives if not c.is_async}
    comps = {c.computation for c in collectives}
    mc = analyze_cost(module)
    kernel_time: dict[tuple[str, str], float] = {}
    index = {(comp.name, i.name): i for comp in module.computations if comp.name in comps for i in comp}
    for ic in mc.instructions:
        instr = index.get((ic.computation, ic.name))
        if instr is not None and is_kernel(instr):
            kernel_time[(ic.computation, ic.name)] = estimate(instr, ic, device).time_s
    compute: dict[int, float] = {}
    transfers: dict[int, float] = {}
    for (cname, name), instr in index.items():
        key = (cname, name)
        if key in sync:
            compute[id(instr)] = price_detail(sync[key], device, nodes, devices=mesh.devices).seconds
        elif is_async_start(instr) or instr.opcode.value.endswith("-done") or instr.opcode is HloOpcode.ASYNC_DONE:
            compute[id(instr)] = 0.0
            if key in by_name:
                transfers[id(instr)] = price_detail(by_name[key], device, nodes, devices=mesh.devices).seconds
            elif is_async_start(instr):
                transfers[id(instr)] = 0.0
        else:
            compute[id(instr)] = kernel_time.get(key, 0.0)
    return TableCostModel(compute=compute, transfers=transfers)


def exposure(module: Module, collectives: list[Collective], device: Device, nodes: int, mesh: Mesh,
             cost: TableCostModel | None = None) -> tuple[tuple[PricedCollective, ...], float]:
    """Each collective priced and its exposed time under the module's own order;
    with the compute time of the entry."""
    cost = cost or cost_model(module, collectives, device, nodes, mesh)
    comps = {c.name: c for c in module.computations}
    covered: dict[tuple[str, str], float] = {}
    for cname in {c.computation for c in collectives if c.is_async}:
        for pair in overlap(comps[cname], cost=cost).pairs:
            covered[(cname, pair.start)] = pair.covered_s
    out = []
    for c in collectives:
        p = price_detail(c, device, nodes, devices=mesh.devices)
        cov = min(p.seconds, covered.get((c.computation, c.start), 0.0)) if c.is_async else 0.0
        out.append(PricedCollective(c, p.seconds, p.link, p.algorithm, cov, p.seconds - cov))
    compute = sum(cost.compute_seconds(i) for i in module.entry
                  if not (i.opcode.value in {c.opcode for c in collectives}))
    return tuple(out), compute


def memory_per_device(module: Module, source: str | Path | None = None) -> MemoryPerDevice:
    entry = module.entry
    model = memory.BufferModel()
    temps = memory.profile(entry, model=model)
    full = memory.profile(entry, include_parameters=True, model=model)
    params = sum(leaf.byte_size for i in entry if i.opcode is HloOpcode.PARAMETER for _, leaf in i.shape.leaves())
    return MemoryPerDevice(params, temps.peak_bytes, full.peak_bytes, full.peak_at,
                           xla_buffer_assignment(source) if source else None)


def buffer_assignment_file(source: str | Path) -> Path | None:
    """XLA's ``NAME-buffer-assignment.txt`` beside a dumped ``NAME.txt``."""
    p = Path(source)
    stem = p.name[:-4] if p.name.endswith(".txt") else None
    if stem is None:
        return None
    cand = p.with_name(stem + "-buffer-assignment.txt")
    return cand if cand.is_file() else None


_ALLOCATION = re.compile(r"^allocation \d+: size (\d+), (.*)$")


def xla_buffer_assignment(source: str | Path) -> dict | None:
    """Totals of XLA's buffer assignment dump (``--xla_dump_to``): bytes of the
    parameter, constant, output and temporary allocations (thread-local ones
    left out), and XLA's own total from the memory-usage report if dumped."""
    path = buffer_assignment_file(source)
    if path is None:
        return None
    sums = {"parameters_bytes": 0, "constants_bytes": 0, "output_bytes": 0, "temporaries_bytes": 0}
    for line in path.read_text().splitlines():
        m = _ALLOCATION.match(line)
        if not m:
            continue
        size, rest = int(m.group(1)), m.group(2)
        if "thread-local" in rest:
            continue
        if re.search(r"\bparameter \d+", rest):
            sums["parameters_bytes"] += size
        elif "constant" in rest:
            sums["constants_bytes"] += size
        elif "output" in rest:
            sums["output_bytes"] += size
        else:
            sums["temporaries_bytes"] += size
    out: dict = {"file": path.name, **sums}
    report = path.with_name(path.name.replace("-buffer-assignment.txt", "-memory-usage-report.txt"))
    if report.is_file():
        m = re.search(r"Total bytes: (\d+)", report.read_text())
        if m:
            out["total_bytes"] = int(m.group(1))
    return out


def analyze(module: Module, mesh: Mesh, device: Device, nodes: int = 1, *,
            source: str | Path | None = None) -> CommunicationReport:
    """The inventory, priced and set against the module's schedule, and memory."""
    inv = inventory(module, mesh)
    priced, compute = exposure(module, inv, device, nodes, mesh)
    notes = []
    if module.attributes.get("is_scheduled") != "true":
        notes.append("the module is not scheduled: exposure is under its text order")
    if any(not c.trip_count_known for c in inv):
        notes.append("a while loop without a known trip count holds collectives: counted once per loop")
    return CommunicationReport(module.name, mesh, device.name, nodes, priced, compute,
                               memory_per_device(module, source), tuple(notes))
