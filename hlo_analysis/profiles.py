"""A profile joined to the module that ran: measured time per instruction next to
the one cost model's prediction for the device it ran on.

XLA's profiler puts ``hlo_op``, ``hlo_module`` and ``program_id`` on every event of
an instruction it runs (XLA:CPU's thunks, XLA:GPU's kernels): the keys of XLA's own
join (``xla/python/xplane_to_profile_instructions.cc``). Instruction names are
unique in a module, so ``hlo_op`` finds the instruction once the module is found.
Times are per module run (``run_id`` counts the runs): a loop body's kernel sums its
iterations, as the roofline's ``executions`` does. A control-flow instruction's
event (a while, a conditional, a call) holds its body's events: its own time is
what is left outside them, so no time is counted twice.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Iterable, Protocol

from hlo_tools.attributes import format_string, parse_metadata
from hlo_tools.ir import Instruction, Module

from .cost import ModuleCost, analyze
from .devices import Device
from .patterns import Patterns
from .rank_stats import spearman
from .roofline import roofline
from .units import finite


class TraceEvent(Protocol):
    """What the join reads of an event (``xla_bridge.trace.KernelEvent`` has it)."""

    hlo_op: str
    hlo_module: str
    program_id: int | None
    run_id: int | None
    plane: str
    line: str
    start_ns: float
    own_end_ns: float
    end_ns: float
    scope_range_id: int | None
    device_ordinal: int | None


class ProfileJoinError(ValueError):
    """The trace holds no event of the module (the message lists what it holds)."""


@dataclass(frozen=True)
class KernelProfile:
    """One instruction of the module as measured, with its prediction where it is a
    kernel of the cost model (per module run: ``executions`` events each run)."""

    name: str
    computation: str
    opcode: str
    label: str
    executions: float
    measured_s: float
    predicted_s: float | None
    flops: float
    bytes_accessed: float
    bound: str

    @property
    def bytes_per_s(self) -> float:
        return self.bytes_accessed / self.measured_s if self.measured_s > 0 else 0.0

    @property
    def flops_per_s(self) -> float:
        return self.flops / self.measured_s if self.measured_s > 0 else 0.0

    @property
    def roofline_pct(self) -> float | None:
        """Predicted over measured, in percent: 100 runs at the roofline."""
        if self.predicted_s is None or self.measured_s <= 0:
            return None
        return 100.0 * self.predicted_s / self.measured_s


@dataclass(frozen=True)
class ProfileJoin:
    """Every instruction event of one module's program in a trace, joined. Times
    are per run and per device: an SPMD program runs on each of its ``devices``."""

    module: str
    device: str
    program_id: int | None
    runs: int
    devices: int
    kernels: tuple[KernelProfile, ...] = field(repr=False)
    #: own time per run of events whose ``hlo_op`` names no instruction of the module
    unjoined: dict[str, float] = field(default_factory=dict)
    #: other programs of the trace: (module name, program id) -> events
    others: dict[tuple[str, int | None], int] = field(default_factory=dict)

    @property
    def joined_s(self) -> float:
        return sum(k.measured_s for k in self.kernels)

    @property
    def device_s(self) -> float:
        """Measured time per run of every instruction event of the program."""
        return self.joined_s + sum(self.unjoined.values())

    @property
    def joined_share(self) -> float:
        return self.joined_s / self.device_s if self.device_s > 0 else 0.0

    @property
    def predicted_s(self) -> float:
        return sum(k.predicted_s or 0.0 for k in self.kernels)

    def rank_correlation(self) -> float:
        """Spearman's rho of measured against predicted time over the kernels with both."""
        pairs = [(k.measured_s, k.predicted_s) for k in self.kernels if k.predicted_s and k.measured_s > 0]
        return spearman([a for a, _ in pairs], [b for _, b in pairs])

    def as_dict(self, top: int | None = None) -> dict:
        ks = sorted(self.kernels, key=lambda k: -k.measured_s)
        return {
            "module": self.module, "device": self.device, "program_id": self.program_id, "runs": self.runs,
            "devices": self.devices,
            "measured_s": self.device_s, "joined_s": self.joined_s, "joined_share": self.joined_share,
            "predicted_s": self.predicted_s, "rho_measured_vs_model": finite(self.rank_correlation()),
            "unjoined": dict(sorted(self.unjoined.items(), key=lambda kv: -kv[1])),
            "other_programs": [{"module": m, "program_id": p, "events": n} for (m, p), n in self.others.items()],
            "kernels": [{"name": k.name, "computation": k.computation, "opcode": k.opcode, "label": k.label,
                         "executions": k.executions, "measured_s": k.measured_s, "predicted_s": k.predicted_s,
                         "roofline_pct": k.roofline_pct, "bytes_per_s": k.bytes_per_s,
                         "flops_per_s": k.flops_per_s, "bound": k.bound} for k in ks[:top]],
        }


def _own_times(events: list[TraceEvent]) -> list[float]:
    """Each event's time less the events it holds on its line (a while's body),
    in ns: nesting read from the events' own spans."""
    own = [e.end_ns - e.start_ns for e in events]
    by_line: dict[tuple[str, str], list[int]] = defaultdict(list)
    for i, e in enumerate(events):
        by_line[(e.plane, e.line)].append(i)
    for idx in by_line.values():
        idx.sort(key=lambda i: (events[i].start_ns, -events[i].own_end_ns))
        stack: list[int] = []
        for i in idx:
            e = events[i]
            while stack and events[stack[-1]].own_end_ns <= e.start_ns:
                stack.pop()
            if stack:
                own[stack[-1]] -= e.end_ns - e.start_ns
            stack.append(i)
    return [max(0.0, t) for t in own]


def _program(module: Module, events: Iterable[TraceEvent], program_id: int | None):
    """The module's events (one program: the given one, else the one with the
    most events) and the trace's other programs."""
    by_program: dict[tuple[str, int | None], list[TraceEvent]] = defaultdict(list)
    for e in events:
        by_program[(e.hlo_module, e.program_id)].append(e)
    mine = [k for k in by_program if k[0] == module.name and (program_id is None or k[1] == program_id)]
    if not mine:
        held = ", ".join(f"{m} (program {p}, {len(v)} events)" for (m, p), v in
                         sorted(by_program.items(), key=lambda kv: -len(kv[1]))[:8]) or "no instruction events at all"
        want = f"module {module.name}" + (f" program {program_id}" if program_id is not None else "")
        raise ProfileJoinError(f"the trace holds no events of {want}; it holds: {held}")
    key = max(mine, key=lambda k: len(by_program[k]))
    return key[1], by_program[key], {k: len(v) for k, v in by_program.items() if k != key}


def join(module: Module, events: Iterable[TraceEvent], device: Device, cost: ModuleCost | None = None, *,
         program_id: int | None = None, runs: int | None = None) -> ProfileJoin:
    """Joins the trace's events of ``module`` (the module as it ran: XLA's optimized
    one) to its instructions, with the roofline of ``device`` beside each.
    ``runs``: module runs in the trace, when its events carry no ``run_id``.
    Times are per run and per device (``device_ordinal``): each device of an SPMD
    program runs every instruction once a run, the prediction is one device's."""
    pid, mine, others = _program(module, events, program_id)
    run_ids = {e.run_id for e in mine if e.run_id is not None}
    n_runs = runs or len(run_ids) or 1
    n_devices = len({e.device_ordinal for e in mine if e.device_ordinal is not None}) or 1
    own = _own_times(mine)
    per_op: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
    for e, t in zip(mine, own):
        acc = per_op[e.hlo_op]
        acc[0] += 1
        acc[1] += t
    instrs: dict[str, Instruction] = {i.name: i for c in module.computations for i in c}
    cost = cost or analyze(module)
    estimates = {(k.computation, k.name): k for k in roofline(module, device, cost).kernels}
    patterns = Patterns(module)
    kernels, unjoined = [], {}
    for name, (count, ns) in per_op.items():
        instr = instrs.get(name)
        seconds = ns / 1e9 / n_runs / n_devices
        if instr is None:
            unjoined[name] = seconds
            continue
        est = estimates.get((instr.parent.name, name))
        labels = patterns.labels(instr)
        execs = est.executions if est is not None else 1
        kernels.append(KernelProfile(
            name, instr.parent.name, instr.opcode.value, labels[0] if labels else "", count / n_runs / n_devices, seconds,
            est.time_s * execs if est is not None else None, est.flops * execs if est is not None else 0.0,
            est.bytes_accessed * execs if est is not None else 0.0, est.bound if est is not None else ""))
    return ProfileJoin(module.name, device.name, pid, n_runs, n_devices, tuple(kernels), unjoined, others)


# -- profile-guided latency estimation (PGLE) ------------------------------------------------


def pgle_key_prefix(module: Module) -> str:
    """XLA keys a module's costs ``FINGERPRINT::name`` when its entry root carries
    the ``fingerprint_before_lhs`` frontend attribute (set before the latency-hiding
    scheduler), else by name alone."""
    root = module.entry.root if module.entry is not None else None
    raw = root.attributes.get("frontend_attributes") if root is not None else None
    fp = parse_metadata(raw).get("fingerprint_before_lhs") if isinstance(raw, str) else None
    return f"{fp}::" if fp else ""


def pgle_costs(module: Module, events: Iterable[TraceEvent], *, program_id: int | None = None) -> dict[str, float]:
    """The module's profile as XLA's profile-guided latency estimator reads it
    (``ProfiledInstructionsProto``), by XLA's rule (``xplane_to_profile_instructions.cc``):
    each instruction's mean event span in microseconds, an event's own span
    (a while's includes its body), the fragments of one launch (same
    ``scope_range_id``) merged into one span."""
    _, mine, _ = _program(module, events, program_id)
    prefix = pgle_key_prefix(module)
    spans: dict[tuple[str, float], list[float]] = {}
    for e in mine:
        key = (prefix + e.hlo_op, e.scope_range_id if e.scope_range_id is not None else e.start_ns)
        span = spans.get(key)
        if span is None:
            spans[key] = [e.start_ns, e.own_end_ns]
        else:
            span[0], span[1] = min(span[0], e.start_ns), max(span[1], e.own_end_ns)
    acc: dict[str, list[float]] = defaultdict(lambda: [0.0, 0])
    for (name, _), (t0, t1) in spans.items():
        a = acc[name]
        a[0] += (t1 - t0) / 1e3
        a[1] += 1
    return {name: total / n for name, (total, n) in acc.items()}


def pgle_text(costs: dict[str, float]) -> str:
    """``costs`` as a text ``ProfiledInstructionsProto``: what
    ``--xla_gpu_pgle_profile_file_or_directory_path`` reads (a ``.pbtxt`` file)."""
    return "".join(f"costs {{ name: {format_string(n)} cost_us: {c!r} }}\n" for n, c in sorted(costs.items()))
