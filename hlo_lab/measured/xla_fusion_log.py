"""XLA:GPU's priority-fusion log (the FusionProcessDumpProto that
xla/service/gpu/transforms/priority_fusion.cc dumps), and how often our roofline
agrees with it.

The log's steps, the replay and the scores: docs/analysis.md#agreement-with-xlas-priority-fusion-log-xla_fusion_log
"""

from __future__ import annotations

import codecs
import glob
import os
import re
import tempfile
from dataclasses import asdict, dataclass, field

from corpus.dump import from_dump_dir
from hlo_tools.ir import Instruction, Module
from hlo_tools.opcode import HloOpcode
from hlo_tools.parser import parse
from xla_bridge.measure import Measurement

from hlo_analysis import cost, devices, roofline
from hlo_analysis.devices import Device
from hlo_analysis.kernels import extract_kernel, fused_region

_H = HloOpcode
DUMP_SUFFIX = "priority_fusion_dump.txt"


# -- the dump ------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class XlaFusionStep:
    """``fusion``: ``producer`` was fused into ``consumer``, the result named ``fusion``."""

    fusion: str
    producer: str
    consumer: str


@dataclass(frozen=True, slots=True)
class PriorityUpdate:
    """``update_priority``: XLA's estimate for fusing ``producer`` into ``consumers``."""

    producer: str
    consumers: tuple[str, ...]
    us_fused: float
    us_unfused: float


@dataclass(frozen=True, slots=True)
class ProducerIneligible:
    """``producer_ineligible``: a legality refusal."""

    producer: str
    reason: str


XlaStep = XlaFusionStep | PriorityUpdate | ProducerIneligible


@dataclass(frozen=True)
class XlaFusionLog:
    """One module's priority-fusion dump."""

    module_name: str
    steps: tuple[XlaStep, ...] = field(repr=False)
    before_fusion_text: str = field(repr=False)
    optimized_text: str = field(default="", repr=False)

    def fused_pairs(self) -> list[tuple[str, str]]:
        """``(producer, consumer)`` of every fusion step, in order."""
        return [(s.producer, s.consumer) for s in self.steps if isinstance(s, XlaFusionStep)]

    def ineligible(self) -> list[ProducerIneligible]:
        return [s for s in self.steps if isinstance(s, ProducerIneligible)]

    def before_fusion(self) -> Module:
        return parse(self.before_fusion_text, source=f"<{self.module_name} before priority-fusion>")


def parse_textproto(text: str) -> dict:
    """A protobuf text-format message as nested dicts; every field is a list (the
    dump's messages are small and regular: one field or one ``{`` per line)."""
    root: dict = {}
    stack = [root]
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line == "}":
            stack.pop()
            continue
        if line.endswith("{"):
            child: dict = {}
            stack[-1].setdefault(line[:-1].strip().rstrip(":").strip(), []).append(child)
            stack.append(child)
            continue
        key, _, value = line.partition(":")
        stack[-1].setdefault(key.strip(), []).append(_scalar(value.strip()))
    return root


def _scalar(value: str):
    if value.startswith('"') and value.endswith('"'):
        return codecs.escape_decode(value[1:-1].encode("utf-8"))[0].decode("utf-8")
    try:
        return float(value) if any(c in value for c in ".eE") or value in ("inf", "-inf", "nan") else int(value)
    except ValueError:
        return value  # enum names


def parse_dump(text: str, *, module_name: str = "?", optimized_text: str = "") -> XlaFusionLog:
    """An ``XlaFusionLog`` from the text of a ``*.priority_fusion_dump.txt``."""
    msg = parse_textproto(text)
    steps: list[XlaStep] = []
    for s in msg.get("fusion_steps", []):
        if "fusion" in s:
            f = s["fusion"][0]
            steps.append(XlaFusionStep(f["fusion_name"][0], f["producer_name"][0], f["consumer_name"][0]))
        elif "update_priority" in s:
            u = s["update_priority"][0]
            steps.append(PriorityUpdate(u["producer_name"][0], tuple(u.get("consumer_names", ())),
                                        float(u.get("us_fused", [0.0])[0]), float(u.get("us_unfused", [0.0])[0])))
        elif "producer_ineligible" in s:
            p = s["producer_ineligible"][0]
            steps.append(ProducerIneligible(p["producer_name"][0], p.get("reason", [""])[0]))
    before = msg.get("hlo_module_before_fusion", [""])[0]
    return XlaFusionLog(module_name, tuple(steps), before, optimized_text)


def capture(module: Module | str, target: str = "h100", *, dump_dir: str | None = None) -> XlaFusionLog:
    """Compiles ``module`` (HLO text or our IR, pre-optimization) for ``target``
    without a GPU and returns its priority-fusion log. Raises FileNotFoundError
    when XLA wrote no dump (e.g. a pipeline without priority fusion)."""
    with tempfile.TemporaryDirectory(prefix="pfusion-") as tmp:
        where = dump_dir or tmp
        measurement = Measurement("gpu", target=target,
                                  flags={"xla_dump_hlo_pass_re": "priority-fusion", "xla_dump_hlo_as_text": True})
        res = measurement.compile(module, dump_dir=where)
        paths = sorted(glob.glob(os.path.join(where, f"*{DUMP_SUFFIX}")))
        if not paths:
            raise FileNotFoundError(f"XLA:GPU wrote no {DUMP_SUFFIX} for {res.module_name} in {where}")
        with open(paths[-1]) as fh:
            text = fh.read()
    return parse_dump(text, module_name=res.module_name, optimized_text=res.optimized_text)


# -- replay and agreement ----------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class XlaDecision:
    """One producer verdict, XLA's and our roofline's, on the same regions (ours
    in seconds; XLA's logged estimate in microseconds, None when it logged none).

    ``kind``: "fused" (XLA fused the producer into these consumers), "refused"
    (XLA's last priority for it stayed negative and it was never fused), or
    "update" (one logged priority update: XLA's sign at that moment)."""

    kind: str
    producer: str
    consumers: tuple[str, ...]
    xla_fused: bool
    ours_fused_s: float
    ours_unfused_s: float
    xla_us_fused: float | None = None
    xla_us_unfused: float | None = None

    @property
    def ours_fuse(self) -> bool:
        return self.ours_fused_s <= self.ours_unfused_s

    @property
    def agrees(self) -> bool:
        return self.ours_fuse == self.xla_fused


@dataclass(frozen=True)
class Agreement:
    """``decisions``: what XLA did (fused and refused producers); ``updates``: every
    logged priority update, a wider but looser sample (incremental updates log a
    delta whose sign need not be the priority's)."""

    module_name: str
    device: str
    decisions: tuple[XlaDecision, ...] = field(repr=False)
    updates: tuple[XlaDecision, ...] = field(default=(), repr=False)
    skipped: int = 0  # decisions naming an instruction the replay could not resolve

    @property
    def rate(self) -> float:
        return _rate(self.decisions)

    @property
    def update_rate(self) -> float:
        return _rate(self.updates)

    @property
    def disagreeing(self) -> list[XlaDecision]:
        return [d for d in self.decisions if not d.agrees]

    def counts(self) -> dict[str, int]:
        """Confusion counts: ``fuse/fuse`` = both fuse, ``fuse/apart`` = XLA fuses, we would not..."""
        out = {"fuse/fuse": 0, "fuse/apart": 0, "apart/fuse": 0, "apart/apart": 0}
        for d in self.decisions:
            out[f"{'fuse' if d.xla_fused else 'apart'}/{'fuse' if d.ours_fuse else 'apart'}"] += 1
        return out


def _rate(ds) -> float:
    return sum(d.agrees for d in ds) / len(ds) if ds else float("nan")


class _Replay:
    """Name -> (root, members) of the region each current instruction stands for,
    starting from the module before fusion, with cached roofline times."""

    def __init__(self, module: Module, device: Device):
        self.device = device
        self.regions: dict[str, tuple[Instruction, frozenset[Instruction]]] = {}
        for comp in module.computations:
            for instr in comp:
                self.regions.setdefault(instr.name, (instr, frozenset((instr,))))
        self._times: dict[tuple[int, frozenset[int]], float] = {}

    def fuse(self, step: XlaFusionStep) -> bool:
        p, c = self.regions.get(step.producer), self.regions.get(step.consumer)
        if p is None or c is None:
            return False
        if step.fusion != step.consumer:
            del self.regions[step.consumer]
        self.regions[step.fusion] = (c[0], c[1] | p[1])
        return True

    def is_bitcast(self, name: str) -> bool:
        r = self.regions.get(name)
        return r is not None and len(r[1]) == 1 and r[0].opcode is _H.BITCAST

    def time(self, name: str, with_producer: str | None = None) -> float:
        root, members = self.regions[name]
        if with_producer is not None:
            members = members | self.regions[with_producer][1]
        key = (id(root), frozenset(map(id, members)))
        t = self._times.get(key)
        if t is None:
            t = self._times[key] = self._price(root, members)
        return t

    def _price(self, root: Instruction, members: frozenset[Instruction]) -> float:
        if len(members) == 1:
            if not cost.is_kernel(root):
                return 0.0
            m = extract_kernel(root)
        else:
            m = fused_region(members, root=root)
        mc = cost.analyze(m)
        k = m.entry.root
        return roofline.estimate(k, mc.by_name()[k.name], self.device).time_s


def decisions(log: XlaFusionLog, device: Device | str = "h100") -> tuple[list[XlaDecision], list[XlaDecision], int]:
    """Replays ``log``: the scored producer decisions (fused, refused) with both
    verdicts, every priority update likewise, and how many could not be resolved
    to instructions of the module before fusion."""
    device = devices.load(device)
    replay = _Replay(log.before_fusion(), device)
    out: list[XlaDecision] = []
    updates: list[XlaDecision] = []
    skipped = 0
    last_update: dict[str, PriorityUpdate] = {}
    last_event: dict[str, str] = {}
    steps = log.steps
    i = 0
    while i < len(steps):
        s = steps[i]
        if isinstance(s, PriorityUpdate):
            last_update[s.producer] = s
            last_event[s.producer] = "update"
            consumers = _scored_consumers(replay, s.producer, s.consumers)
            if consumers:
                d = _decide(replay, "update", s.producer, consumers, s.us_unfused >= s.us_fused, s)
                if d is not None:
                    updates.append(d)
            i += 1
            continue
        if isinstance(s, ProducerIneligible):
            last_event[s.producer] = "ineligible"
            i += 1
            continue
        # a run of fusion steps with one producer is one decision (fused into each user)
        j = i
        while j < len(steps) and isinstance(steps[j], XlaFusionStep) and steps[j].producer == s.producer:
            j += 1
        run = steps[i:j]
        last_event[s.producer] = "fused"
        for r in run:
            last_event.pop(r.consumer, None)  # a consumer that became a fusion is gone
        if s.producer not in replay.regions:
            skipped += 1
        elif not replay.is_bitcast(s.producer):
            d = _decide(replay, "fused", s.producer, [r.consumer for r in run], True, last_update.get(s.producer))
            if d is None:
                skipped += 1
            else:
                out.append(d)
        for r in run:
            replay.fuse(r)
        i = j
    for name, event in last_event.items():
        if event != "update" or name not in replay.regions or replay.is_bitcast(name):
            continue
        u = last_update[name]
        consumers = _scored_consumers(replay, name, u.consumers)
        if not consumers:
            continue
        d = _decide(replay, "refused", name, consumers, False, u)
        if d is None:
            skipped += 1
        else:
            out.append(d)
    return out, updates, skipped


def _scored_consumers(replay: _Replay, producer: str, consumers) -> list[str]:
    """Consumers that take part in a cost decision: known, and not bitcasts
    (XLA never fuses into a lone bitcast)."""
    if producer not in replay.regions or replay.is_bitcast(producer):
        return []
    return [c for c in consumers if c in replay.regions and not replay.is_bitcast(c)]


def _decide(replay: _Replay, kind: str, producer: str, consumers: list[str], fused: bool,
            update: PriorityUpdate | None) -> XlaDecision | None:
    """XLA's formula with our roofline: unfused = producer + each consumer; fused =
    each consumer with the producer in it (the producer itself goes away)."""
    try:
        unfused = replay.time(producer) + sum(replay.time(c) for c in consumers)
        together = sum(replay.time(c, with_producer=producer) for c in consumers)
    except (KeyError, ValueError):
        return None
    return XlaDecision(kind, producer, tuple(consumers), fused, together, unfused,
                    update.us_fused if update else None, update.us_unfused if update else None)


def agreement(log: XlaFusionLog, device: Device | str = "h100") -> Agreement:
    """How often our roofline's fused-vs-unfused verdict matches XLA's decisions."""
    device = devices.load(device)
    ds, ups, skipped = decisions(log, device)
    return Agreement(log.module_name, device.name, tuple(ds), tuple(ups), skipped)


def fused_in_optimized(log: XlaFusionLog) -> dict[str, set[str]]:
    """For the optimized module XLA produced with the log: instruction name (as
    the dump spells it, see ``base_name``) -> the fusions whose bodies hold it (a
    duplicated producer is in several). Lets a test check that logged pairs
    really ended up fused."""
    m = parse(log.optimized_text, source=f"<{log.module_name} optimized>")
    out: dict[str, set[str]] = {}
    for comp in m.computations:
        for instr in comp:
            if instr.opcode is not _H.FUSION or instr.fused_computation is None:
                continue
            for inner in m.walk(instr.fused_computation):
                out.setdefault(base_name(inner.name), set()).add(instr.name)
    return out


_CLONE_SUFFIX = re.compile(r"(\.clone(\.\d+)?)+$")


def base_name(name: str) -> str:
    """``broadcast.12.0`` -> ``broadcast.12``: priority fusion appends ``.0`` to
    every name and bumps that last number on each duplicate; later passes add
    ``.clone`` / ``.clone.N`` when they copy an instruction into another fusion."""
    name = _CLONE_SUFFIX.sub("", name)
    head, dot, tail = name.rpartition(".")
    return head if dot and tail.isdigit() and head else name


# -- reading the log from a dump folder, for people ----------------------------------------

def dump_logs(folder: str, module: str | None = None) -> list[tuple[str, str]]:
    """``(module label, path)`` of every priority-fusion log in a dump folder
    (XLA:GPU writes one per module when ``--xla_dump_hlo_pass_re`` matches
    ``priority-fusion``), or of the one file given; ``module`` picks a module by
    id (``1``, ``0001``) or name. A ``LookupError`` says what there is."""
    if os.path.isfile(folder):
        return [(os.path.basename(folder).removesuffix("." + DUMP_SUFFIX), folder)]
    logs = [(f"module_{m.module_id:04d}.{m.name}", str(p), m) for m in from_dump_dir(folder)
            for key, p in sorted(m.aux.items()) if key.endswith(DUMP_SUFFIX)]
    if not logs:
        raise LookupError(f"{folder}: no *{DUMP_SUFFIX} (XLA:GPU writes it with --xla_dump_to and "
                          f"--xla_dump_hlo_pass_re matching priority-fusion; XLA:CPU has no priority fusion)")
    if module is not None:
        picked = [x for x in logs if (module.isdigit() and x[2].module_id == int(module))
                  or module in (x[2].name, x[0])]
        if not picked:
            raise LookupError(f"{folder}: no priority-fusion log for module {module!r}; there are: "
                              + ", ".join(x[0] for x in logs))
        logs = picked
    return [(label, path) for label, path, _ in logs]


def step_kind(step: XlaStep) -> str:
    """``fuse``, ``price`` (a priority update) or ``refuse`` (not eligible)."""
    return "fuse" if isinstance(step, XlaFusionStep) else "price" if isinstance(step, PriorityUpdate) else "refuse"


def describe_step(step: XlaStep) -> tuple[str, str, str]:
    """``(kind, producer -> consumers, what happened)`` of one step, for a table."""
    if isinstance(step, XlaFusionStep):
        return "fuse", f"{step.producer} -> {step.consumer}", f"= {step.fusion}"
    if isinstance(step, PriorityUpdate):
        gain = step.us_unfused - step.us_fused
        verdict = "fuse" if gain >= 0 else "keep apart"
        return ("price", f"{step.producer} -> {', '.join(step.consumers) or '(no consumers)'}",
                f"fused {step.us_fused:.4g} us, unfused {step.us_unfused:.4g} us: {verdict} ({gain:+.4g} us)")
    return "refuse", step.producer, step.reason


def step_dict(step: XlaStep) -> dict:
    """One step as JSON data, with its ``kind``."""
    return {"kind": step_kind(step), **asdict(step)}


def summary(log: XlaFusionLog) -> dict[str, int]:
    """How many steps of each kind, and how many distinct producers XLA fused."""
    kinds = {"fuse": 0, "price": 0, "refuse": 0}
    for s in log.steps:
        kinds[step_kind(s)] += 1
    return {"steps": len(log.steps), **kinds, "producers_fused": len({p for p, _ in log.fused_pairs()})}


def matches(step: XlaStep, name: str) -> bool:
    """Whether ``step`` involves the instruction ``name`` (as producer, consumer
    or result; ``broadcast.12`` also finds the log's ``broadcast.12.0``)."""
    names = [step.producer]
    if isinstance(step, XlaFusionStep):
        names += [step.consumer, step.fusion]
    elif isinstance(step, PriorityUpdate):
        names += list(step.consumers)
    want = name.lstrip("%")
    return any(n == want or base_name(n) == want for n in names)
