"""``hlo collectives``: a sharded module's collectives, memory and exposed
communication (``hlo_analysis.communication``), and what our latency-hiding
scheduler (``passes.scheduling``) makes of its schedule under the same model.

The comparison lives here, in the application: analysis may not run a pass."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

from hlo_tools import Module
from hlo_analysis.units import fmt_us

from ..console import stdout_console
from .args import at_least_one, non_negative
from .inputs import load_verified


@dataclass(frozen=True)
class SchedulerComparison:
    """Exposed communication under the module's schedule and under ours."""

    comm_s: float
    before_exposed_s: float
    after_exposed_s: float
    changed: bool
    max_in_flight: int
    memory_slack: float
    before_peak_bytes: int
    after_peak_bytes: int

    def as_dict(self) -> dict:
        return {"comm_us": self.comm_s * 1e6, "before_exposed_us": self.before_exposed_s * 1e6,
                "after_exposed_us": self.after_exposed_s * 1e6, "changed": self.changed,
                "max_in_flight": self.max_in_flight, "memory_slack": self.memory_slack,
                "before_peak_bytes": self.before_peak_bytes, "after_peak_bytes": self.after_peak_bytes}


def latency_hiding_comparison(module: Module, mesh, device, nodes: int = 1, *, max_in_flight: int = 2,
                              memory_slack: float = 0.1) -> SchedulerComparison:
    """Runs ``LatencyHidingScheduler`` on a copy of ``module``, scheduling by the
    model that measures it (``communication.cost_model``), and measures the
    exposed communication and peak temporaries before and after. The scheduler
    keeps the incoming order unless it hides more within ``memory_slack`` of
    its peak."""
    from hlo_analysis.collectives import inventory  # lazy: start-up of every hlo command
    from hlo_analysis.communication import cost_model, exposure  # lazy: start-up
    from hlo_analysis.memory import profile  # lazy: start-up
    from passes.scheduling import LatencyHidingScheduler  # lazy: start-up

    copy = module.clone()
    inv = inventory(copy, mesh)
    cost = cost_model(copy, inv, device, nodes, mesh)
    before, _ = exposure(copy, inv, device, nodes, mesh, cost)
    peak_before = profile(copy.entry).peak_bytes
    changed = LatencyHidingScheduler(max_in_flight=max_in_flight, memory_slack=memory_slack, cost=cost).run(copy)
    after, _ = exposure(copy, inventory(copy, mesh), device, nodes, mesh, cost)

    def total(ps):
        return sum(p.exposed_s * p.collective.executions for p in ps)

    comm = sum(p.seconds * p.collective.executions for p in before)
    return SchedulerComparison(comm, total(before), total(after), changed, max_in_flight, memory_slack,
                               peak_before, profile(copy.entry).peak_bytes)


def resolve(spec: str) -> Path:
    """A module file, or a bundled corpus module ``NAME[/STAGE]`` (default stage:
    ``gpu_h100_after_optimizations`` when it has one, else its last stage)."""
    p = Path(spec)
    if p.exists():
        return p
    from corpus import bundled  # lazy: reads the manifest

    name, _, stage = spec.partition("/")
    entries = list(bundled.load(name))
    if len(entries) != 1 or not entries[0].name == name:
        return p  # not a corpus name either: the loader says the file is missing
    e = entries[0]
    if not stage:
        stage = "gpu_h100_after_optimizations" if "gpu_h100_after_optimizations" in e.files else e.stages[-1]
    try:
        return e.path(stage)
    except KeyError as err:
        raise ValueError(err.args[0]) from None


def _cmd_collectives(args) -> int:
    from hlo_analysis import devices  # lazy: start-up
    from hlo_analysis.collectives import awaits_partitioning, infer_mesh, mesh_from_entry  # lazy: start-up
    from hlo_analysis.communication import analyze  # lazy: start-up
    from hlo_analysis.replica_groups import Mesh, ReplicaGroupsError  # lazy: start-up

    try:
        device = devices.load(args.target)
        if not device.nvlink_bandwidth:
            raise ValueError(f"--target {args.target}: no interconnect figures; use h100 or h200")
        mesh = Mesh.parse(args.mesh) if args.mesh else None
        path = resolve(args.file)
    except (ValueError, ReplicaGroupsError) as e:
        print(f"hlo collectives: {e}", file=sys.stderr)
        return 2
    module = load_verified(str(path))
    mesh = mesh or mesh_from_entry(path) or infer_mesh(module)
    parts = int(module.attributes.get("num_partitions", 1) or 1) * int(module.attributes.get("replica_count", 1) or 1)
    if mesh.devices != parts:
        print(f"hlo collectives: mesh {mesh} has {mesh.devices} devices, the module {parts}", file=sys.stderr)
        return 2
    if parts % args.nodes:
        print(f"hlo collectives: --nodes {args.nodes} does not divide the module's {parts} devices", file=sys.stderr)
        return 2
    try:
        report = analyze(module, mesh, device, args.nodes, source=path)
    except ReplicaGroupsError as e:
        print(f"hlo collectives: {path}: {e}", file=sys.stderr)
        return 1
    d = report.as_dict()
    d["file"] = str(path)
    d["awaits_partitioning"] = awaits_partitioning(module)
    if args.lhs:
        d["latency_hiding_scheduler"] = latency_hiding_comparison(
            module, mesh, device, args.nodes, max_in_flight=args.lhs_in_flight,
            memory_slack=args.lhs_memory_slack / 100).as_dict()
    if args.json:
        print(json.dumps(d, indent=1))
        return 0
    _print(d, args.top)
    return 0


def _print(d: dict, top: int) -> None:
    from hlo_analysis.units import fmt_bytes  # lazy: start-up
    from rich.table import Table

    con = stdout_console()
    t = d["totals"]
    con.print(f"[bold]{d['module']}[/] ({d['file']}): mesh "
              + ",".join(f"{a}={n}" for a, n in zip(d["mesh"]["axes"], d["mesh"]["shape"]))
              + f", {d['target']} x {d['nodes']} node(s)")
    con.print(f"{t['collectives']} collectives, {fmt_bytes(t['bytes'])} per device ({fmt_bytes(t['wire_bytes'])} "
              f"on the wire); communication {fmt_us(t['comm_us'])}, exposed {fmt_us(t['exposed_us'])} "
              f"({t['exposed_fraction']:.0%}); compute {fmt_us(t['compute_us'])}")
    m = d["memory"]
    if d.get("awaits_partitioning"):
        con.print("note: the module is not partitioned yet (named shardings, no collective): its shapes are the "
                  "whole program's, not one device's; its after_optimizations dump has the partitioned module")
    if m:
        line = (f"memory {'of the whole program' if d.get('awaits_partitioning') else 'per device'}: peak {fmt_bytes(m['peak_bytes'])} at %{m['peak_at']} (parameters "
                f"{fmt_bytes(m['parameters_bytes'])}, temporaries {fmt_bytes(m['peak_temporaries_bytes'])})")
        x = m.get("xla_buffer_assignment")
        if x:
            line += (f"; XLA's buffer assignment: parameters {fmt_bytes(x['parameters_bytes'])}, temporaries "
                     f"{fmt_bytes(x['temporaries_bytes'])}" + (f", total {fmt_bytes(x['total_bytes'])}"
                                                               if "total_bytes" in x else ""))
        con.print(line)
    for key, title in (("kind", "per kind"), ("axis", "per mesh axis")):
        tab = Table(title=title)
        for col in (key, "n", "bytes", "time", "exposed"):
            tab.add_column(col, justify="left" if col == key else "right", no_wrap=True)
        by_bytes = d["bytes"] if key == "kind" else d["bytes_by_axis"]
        for k, v in d[f"time_by_{key}"].items():
            tab.add_row(k, str(v["n"]), fmt_bytes(by_bytes[k]), fmt_us(v["time_us"]), fmt_us(v["exposed_us"]))
        con.print(tab)
    if "latency_hiding_scheduler" in d:
        s = d["latency_hiding_scheduler"]
        con.print(f"latency-hiding-scheduler (max {s['max_in_flight']} in flight, memory slack "
                  f"{s['memory_slack']:.0%}): exposed {fmt_us(s['before_exposed_us'])} -> "
                  f"{fmt_us(s['after_exposed_us'])} of {fmt_us(s['comm_us'])}; peak temporaries "
                  f"{fmt_bytes(s['before_peak_bytes'])} -> {fmt_bytes(s['after_peak_bytes'])}")
    tab = Table(title=f"top {top} exposed collectives")
    for col in ("name", "kind", "axis", "bytes", "time", "exposed", "op_name"):
        tab.add_column(col, overflow="fold" if col == "op_name" else "ellipsis", no_wrap=col != "op_name",
                       min_width=min(len(col) + 12, 24) if col in ("name", "kind", "op_name") else None, justify="right" if col in ("bytes", "time", "exposed") else "left")
    for c in sorted(d["collectives"], key=lambda c: -c["exposed_us"] * c["executions"])[:top]:
        tab.add_row(c["name"], c["kind"], c["axis"], fmt_bytes(c["bytes"]), fmt_us(c["time_us"]),
                    fmt_us(c["exposed_us"]), _tail(c["op_name"]))
    con.print(tab)
    for n in d["notes"]:
        con.print(f"note: {n}")


def _tail(op_name: str, n: int = 48) -> str:
    """The end of an op_name (its last scopes say what it is); --json has it whole."""
    return op_name if len(op_name) <= n else "..." + op_name[-n:]


def register(subparsers) -> None:

    c = subparsers.add_parser("collectives", help="a sharded module's collectives: counts and bytes per kind and "
                                                  "mesh axis, memory per device, predicted and exposed time")
    c.add_argument("file", help="HLO file (text, .gz, .pb) or a corpus module NAME[/STAGE]")
    c.add_argument("--target", default="h100", help="h100 or h200 (NVLink in a node, InfiniBand across nodes)")
    c.add_argument("--nodes", type=at_least_one, default=1, help="nodes the devices are split over (default 1)")
    c.add_argument("--mesh", help="mesh axes, e.g. batch=2,model=4 (default: the corpus entry, else from the module)")
    c.add_argument("--lhs", action="store_true", help="also run our latency-hiding scheduler and show exposed "
                                                       "communication before and after")
    c.add_argument("--lhs-in-flight", type=at_least_one, default=2, help="--lhs: async pairs in flight (default 2)")
    c.add_argument("--lhs-memory-slack", type=non_negative, default=10.0, metavar="PCT",
                   help="--lhs: peak memory the scheduler may add, in %% of the module's (default 10)")
    c.add_argument("--top", type=int, default=10, help="collectives listed (default 10)")
    c.add_argument("--json", action="store_true", help="counts, bytes, collectives[...], totals, memory as JSON")
    c.set_defaults(func=_cmd_collectives)
