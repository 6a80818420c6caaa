"""Fusion regions of two compiles of one module, matched by the original
instructions they cover, not by names.

Why origins, and how kernels are matched into regions: docs/regress.md#regions
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass

from hlo_tools.ir import Instruction, Module
from hlo_tools.opcode import HloOpcode
from hlo_tools.written import WrittenNames, stamped_name

from .devices import Device
from .roofline import roofline

_H = HloOpcode
CHANGES = ("same", "changed", "split", "merged", "regrouped", "added", "removed")


def _body(kernel: Instruction) -> list[Instruction]:
    """The instructions a kernel computes: itself and, for a fusion, what its fused
    computations hold (nested fusions too); not a reduction's or sort's
    ``to_apply``, which XLA shares between kernels."""
    out, todo = [kernel], [kernel]
    while todo:
        ins = todo.pop()
        if ins.opcode is _H.FUSION or ins.async_wrapped_opcode is _H.FUSION:
            comp = ins.called_computation("calls")
            for i in comp or ():
                out.append(i)
                if i.opcode is _H.FUSION:
                    todo.append(i)
    return out


def origins(kernel: Instruction) -> frozenset[str]:
    """The original instructions (their stamped ``op_name``) a kernel computes."""
    return frozenset(n for i in _body(kernel) if i.opcode is not _H.PARAMETER and (n := stamped_name(i)))


def _root_origin(kernel: Instruction) -> str:
    comp = kernel.called_computation("calls") if kernel.opcode is _H.FUSION else None
    root = comp.root if comp is not None and comp.root is not None else kernel
    return stamped_name(root) or stamped_name(kernel) or kernel.name


@dataclass(frozen=True)
class Kernel:
    """One kernel of an optimized module, priced on one device."""

    name: str
    computation: str
    opcode: str
    kind: str            # a fusion's kind (kLoop, kInput, kOutput, kCustom), else ""
    origins: frozenset[str]
    root_origin: str     # the original instruction its output comes from
    signature: str       # opcode, kind and shape: pairs kernels that cover no original instruction
    time_s: float
    bytes_accessed: float
    flops: float
    root_computation: str = ""  # where the user's file has ``root_origin`` ("" not known)

    @property
    def label(self) -> str:
        return f"{self.name}({self.kind or self.opcode}, {len(self.origins)} ops)"


def kernels(module: Module, device: Device, written: WrittenNames | None = None) -> list[Kernel]:
    """Every kernel of ``module`` (entry and control-flow bodies) with its roofline on
    ``device``; ``written``, the stamped module as the user wrote it, names the
    computation each kernel's output comes from."""
    comps = {c.name: c for c in module.computations}
    out = []
    for k in roofline(module, device).kernels:
        ins = comps[k.computation].get_instruction(k.name)
        kind = (ins.attribute("kind") or "") if ins.opcode is _H.FUSION else ""
        root = _root_origin(ins)
        out.append(Kernel(k.name, k.computation, k.opcode, kind, origins(ins), root,
                          f"{ins.opcode_text}/{kind}/{ins.shape.to_text()}", k.time_s, k.bytes_accessed, k.flops,
                          (written.computation_of(root) or "") if written is not None else ""))
    return out


@dataclass(frozen=True)
class Region:
    """Kernels of A and of B that compute the same original instructions."""

    a: tuple[Kernel, ...]
    b: tuple[Kernel, ...]
    change: str

    @property
    def time_a(self) -> float:
        return sum(k.time_s for k in self.a)

    @property
    def time_b(self) -> float:
        return sum(k.time_s for k in self.b)

    @property
    def delta_s(self) -> float:
        """B's predicted time minus A's (> 0: B is slower here)."""
        return self.time_b - self.time_a

    @property
    def bytes_a(self) -> float:
        return sum(k.bytes_accessed for k in self.a)

    @property
    def bytes_b(self) -> float:
        return sum(k.bytes_accessed for k in self.b)

    @property
    def flops_a(self) -> float:
        return sum(k.flops for k in self.a)

    @property
    def flops_b(self) -> float:
        return sum(k.flops for k in self.b)

    @property
    def origins(self) -> frozenset[str]:
        return frozenset().union(*(k.origins for k in self.a + self.b))

    @property
    def name(self) -> str:
        """The original instruction the region's most expensive kernel outputs, and
        how many more original instructions it covers."""
        ks = sorted(self.a + self.b, key=lambda k: -k.time_s)
        if not ks:
            return "?"
        more = len(self.origins) - 1
        where = f" in %{ks[0].root_computation}" if ks[0].root_computation else ""
        return ks[0].root_origin + where + (f" (+{more})" if more > 0 else "")

    def as_dict(self) -> dict:
        def side(ks):
            return [{"name": k.name, "computation": k.computation, "opcode": k.opcode, "kind": k.kind,
                     "output_of": k.root_origin, "output_of_computation": k.root_computation or None,
                     "origins": sorted(k.origins), "time_s": k.time_s, "bytes": k.bytes_accessed, "flops": k.flops}
                    for k in ks]

        return {"name": self.name, "change": self.change, "time_a_s": self.time_a, "time_b_s": self.time_b,
                "delta_s": self.delta_s, "bytes_a": self.bytes_a, "bytes_b": self.bytes_b, "flops_a": self.flops_a,
                "flops_b": self.flops_b, "a": side(self.a), "b": side(self.b)}


@dataclass(frozen=True)
class RegionDiff:
    """All regions of A and B on one device."""

    device: str
    regions: tuple[Region, ...]

    @property
    def time_a(self) -> float:
        return sum(r.time_a for r in self.regions)

    @property
    def time_b(self) -> float:
        return sum(r.time_b for r in self.regions)

    @property
    def kernels_a(self) -> int:
        return sum(len(r.a) for r in self.regions)

    @property
    def kernels_b(self) -> int:
        return sum(len(r.b) for r in self.regions)

    def changed(self) -> list[Region]:
        """Regions whose fusion differs, largest predicted time change first."""
        return sorted((r for r in self.regions if r.change != "same"), key=lambda r: -abs(r.delta_s))

    def counts(self) -> dict[str, int]:
        c = Counter(r.change for r in self.regions)
        return {k: c[k] for k in CHANGES if c[k]}


def _classify(a: list[Kernel], b: list[Kernel]) -> str:
    if not b:
        return "removed"
    if not a:
        return "added"
    if len(a) == 1 and len(b) == 1:
        ka, kb = a[0], b[0]
        return "same" if (ka.origins == kb.origins and ka.opcode == kb.opcode and ka.kind == kb.kind) else "changed"
    if len(a) == 1:
        return "split"
    if len(b) == 1:
        return "merged"
    return "regrouped"


def match_kernels(ka: list[Kernel], kb: list[Kernel]) -> tuple[Region, ...]:
    """Regions of two kernel lists (``match_regions`` without the pricing):

    1. a kernel of A and one of B covering the same origins with the same opcode,
       kind and shape are one "same" region (paired first, so an origin both
       sides compute in a kernel they agree on does not tie other kernels to it);
    2. the other kernels are linked through each origin that one side computes in
       a single kernel; connected kernels are one region;
    3. a kernel still alone joins the region of the other side's kernel sharing
       most of its origins (a duplicated producer goes where it was fused);
    4. what is left is "added" or "removed" (kernels that cover no original
       instruction, such as layout copies, are paired by opcode, kind and shape).
    """
    regions: list[Region] = []
    exact: dict[tuple, list[int]] = defaultdict(list)
    for j, k in enumerate(kb):
        exact[(k.origins, k.signature)].append(j)
    rest_a, taken_b = [], set()
    for k in ka:
        js = exact.get((k.origins, k.signature))
        if js:
            j = js.pop(0)
            taken_b.add(j)
            regions.append(Region((k,), (kb[j],), "same"))
        else:
            rest_a.append(k)
    rest_b = [k for j, k in enumerate(kb) if j not in taken_b]
    sides = {"a": rest_a, "b": rest_b}
    nodes = [("a", i) for i in range(len(rest_a))] + [("b", j) for j in range(len(rest_b))]
    parent = {n: n for n in nodes}

    def find(x):
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    def union(x, y):
        rx, ry = find(x), find(y)
        if rx != ry:
            parent[ry] = rx

    where: dict[str, dict[str, list]] = defaultdict(lambda: {"a": [], "b": []})
    for side, ks in sides.items():
        for i, k in enumerate(ks):
            for o in k.origins:
                where[o][side].append((side, i))
    linked = set()
    for w in where.values():
        in_a, in_b = w["a"], w["b"]
        if in_a and in_b and (len(in_a) == 1 or len(in_b) == 1):
            for n in in_a + in_b:
                union(in_a[0], n)
                linked.add(n)
    for n in nodes:  # 3: a kernel still alone joins the other side's kernel sharing most origins
        if n in linked:
            continue
        side, i = n
        other = "b" if side == "a" else "a"
        shared: Counter = Counter(m for o in sides[side][i].origins for m in where[o][other])
        if shared:
            union(shared.most_common(1)[0][0], n)
    groups: dict[tuple, tuple[list, list]] = defaultdict(lambda: ([], []))
    for n in nodes:
        side, i = n
        groups[find(n)][0 if side == "a" else 1].append(sides[side][i])
    lone_a, lone_b = defaultdict(list), defaultdict(list)
    for ga, gb in groups.values():
        if ga and gb:
            regions.append(Region(tuple(ga), tuple(gb), _classify(ga, gb)))
        else:
            k = (ga or gb)[0]
            (lone_a if ga else lone_b)[k.signature if not k.origins else k.origins].append(k)
    for key in list(lone_a):
        while lone_a[key] and lone_b.get(key):
            x, y = lone_a[key].pop(0), lone_b[key].pop(0)
            regions.append(Region((x,), (y,), _classify([x], [y])))
    for lone, side in ((lone_a, "a"), (lone_b, "b")):
        for ks in lone.values():
            for k in ks:
                regions.append(Region((k,), (), "removed") if side == "a" else Region((), (k,), "added"))
    regions.sort(key=lambda r: (-abs(r.delta_s), r.name))
    return tuple(regions)


def match_regions(a: Module, b: Module, device: Device, written: WrittenNames | None = None) -> RegionDiff:
    """The regions of two optimized modules of one stamped module (``hlo_tools.written.stamp_names``),
    each kernel priced on ``device``, named in ``written`` (the user's module) when given."""
    return RegionDiff(device.name, match_kernels(kernels(a, device, written), kernels(b, device, written)))
