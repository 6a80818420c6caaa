"""The collective inventory of an SPMD module: every all-reduce, all-gather,
reduce-scatter, all-to-all, collective-permute (and collective-broadcast, ragged
all-to-all) in every computation reachable from the entry, with its bytes per device,
the devices it talks to mapped onto mesh axes, and the op that caused it.

How each is counted, sized and repeated in loops: docs/collectives.md#the-inventory
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from hlo_tools import Computation, HloOpcode, Instruction, Module

from .cost import known_trip_count
from .overlap import matching_done
from .replica_groups import Groups, Mesh, device_groups, group_mode, mesh_of_sharding, mesh_of_text, parse_pairs

#: The collectives' own opcodes (sync form).
SYNC = frozenset({HloOpcode.ALL_GATHER, HloOpcode.ALL_REDUCE, HloOpcode.REDUCE_SCATTER, HloOpcode.ALL_TO_ALL,
                  HloOpcode.COLLECTIVE_PERMUTE, HloOpcode.COLLECTIVE_BROADCAST, HloOpcode.RAGGED_ALL_TO_ALL})
#: Dedicated async starts -> the collective they run.
STARTS = {HloOpcode.ALL_GATHER_START: HloOpcode.ALL_GATHER, HloOpcode.ALL_REDUCE_START: HloOpcode.ALL_REDUCE,
          HloOpcode.COLLECTIVE_PERMUTE_START: HloOpcode.COLLECTIVE_PERMUTE}
#: For a grep of the module text: every spelling :func:`counts` uses.
KINDS = tuple(sorted({op.value for op in SYNC} | {op.value + "-start" for op in SYNC}))
GREP = re.compile(r"[\]})] (" + "|".join(re.escape(k) for k in sorted(KINDS, key=len, reverse=True)) + r")\(")


@dataclass(frozen=True)
class Collective:
    """One collective instruction (an async pair counted once, by its start)."""

    name: str               # the instruction (the start of a pair)
    kind: str               # XLA's opcode spelling: all-gather, all-gather-start ...
    opcode: str             # the collective it runs: all-gather ...
    is_async: bool
    computation: str        # where its schedule span lives (the caller of an async computation)
    start: str              # first and last instruction of its span in that computation
    done: str
    bytes: int              # payload per device (module docstring)
    wire_bytes: float       # sent per device by a ring
    group_size: int
    num_groups: int
    groups: Groups
    axis: str               # mesh axes the groups vary along
    mode: str               # XLA's CollectiveOpGroupMode
    channel_id: int | None
    executions: int
    trip_count_known: bool
    op_name: str
    source: str             # file:line of the op, when the metadata has it
    dtype: str

    def as_dict(self) -> dict:
        d = {k: getattr(self, k) for k in self.__dataclass_fields__ if k != "groups"}
        d["groups"] = [list(g) for g in self.groups[:8]]
        return d


def grep_counts(text: str) -> Counter:
    """What a grep of the module text counts: `` KIND(`` after a shape."""
    return Counter(GREP.findall(text))


def counts(collectives: Iterable[Collective]) -> dict[str, int]:
    """kind -> number, XLA's spelling (module docstring)."""
    return dict(sorted(Counter(c.kind for c in collectives).items()))


# -- the walk -------------------------------------------------------------------------
def _array_bytes(shapes) -> int:
    return sum(leaf.byte_size for s in shapes for _, leaf in s.leaves())


def _attr(instr: Instruction, key: str) -> str | None:
    v = instr.attributes.get(key)
    return None if v is None else str(v)


class _Walker:
    def __init__(self, module: Module, mesh: Mesh):
        self.module = module
        self.mesh = mesh
        attrs = module.attributes
        self.partitions = int(attrs.get("num_partitions", 1) or 1)
        self.replicas = int(attrs.get("replica_count", 1) or 1)
        self.frames = _StackFrames(module)
        self.out: list[Collective] = []
        self.seen: set[int] = set()

    def walk(self, comp: Computation, executions: int, known: bool, span: tuple[Instruction, Instruction] | None,
             span_comp: Computation | None) -> None:
        """Every collective of ``comp`` and of what it calls, in text order with a
        callee's right after its caller (an explicit stack: call chains of any depth)."""
        # a frame: [computation, its instructions (None until entered), executions, known, span, span_comp]
        stack: list[list] = [[comp, None, executions, known, span, span_comp]]
        while stack:
            frame = stack[-1]
            comp, it, executions, known, span, span_comp = frame
            if it is None:
                if id(comp) in self.seen:
                    stack.pop()
                    continue  # a computation called twice is listed once (as grep sees it once)
                self.seen.add(id(comp))
                frame[1] = it = iter(comp)
            instr = next(it, None)
            if instr is None:
                stack.pop()
                continue
            op = instr.opcode
            if op in SYNC:
                self._add(instr, op, instr.opcode.value, span, span_comp or comp, executions, known)
            elif op in STARTS or (op is HloOpcode.ASYNC_START and instr.async_wrapped_opcode in SYNC
                                  and "calls" not in instr.called_computation_map):
                done = matching_done(instr)
                base = STARTS.get(op) or instr.async_wrapped_opcode
                self._add(instr, base, instr.opcode_text, (instr, done or instr), comp, executions, known, done=done)
            frames = []
            for callee in instr.called_computations:
                if op is HloOpcode.WHILE:
                    n = known_trip_count(instr)
                    frames.append([callee, None, executions * (n or 1), known and n is not None, span, span_comp])
                elif op is HloOpcode.ASYNC_START:
                    done = matching_done(instr)
                    frames.append([callee, None, executions, known, (instr, done or instr), comp])
                else:
                    frames.append([callee, None, executions, known, span, span_comp])
            stack.extend(reversed(frames))  # the first callee walked first, before the caller goes on

    def _add(self, instr: Instruction, base: HloOpcode, kind: str, span, comp: Computation, executions: int,
             known: bool, done: Instruction | None = None) -> None:
        operand_bytes = _array_bytes(o.shape for o in instr.operands[:1 if base is HloOpcode.COLLECTIVE_PERMUTE
                                                                       else None])
        result = done.shape if done is not None else instr.shape
        payload = max(operand_bytes, _array_bytes([result]))
        cid = _attr(instr, "channel_id")
        if base is HloOpcode.COLLECTIVE_PERMUTE:
            pairs = parse_pairs(_attr(instr, "source_target_pairs"))
            groups: Groups = tuple(pairs)
            n = 2 if any(s != t for s, t in pairs) else 1
            axis = self.mesh.axis_of_pairs(pairs)
            mode = group_mode(cid is not None, None)
            wire = float(payload) if n == 2 else 0.0
        else:
            ugdi = _attr(instr, "use_global_device_ids")
            has_attr = base in (HloOpcode.ALL_GATHER, HloOpcode.ALL_REDUCE, HloOpcode.REDUCE_SCATTER)
            mode = group_mode(cid is not None, (ugdi == "true") if has_attr else None)
            groups = device_groups(_attr(instr, "replica_groups"), mode, self.replicas, self.partitions)
            n = max((len(g) for g in groups), default=1)
            axis = self.mesh.axis_of_groups(groups)
            share = (n - 1) / n if n else 0.0
            wire = payload * (2 * share if base is HloOpcode.ALL_REDUCE else share)
        leaves = [leaf for o in instr.operands[:1] for _, leaf in o.shape.leaves()]
        md = instr.metadata or {}
        start, end = span if span is not None else (instr, instr)
        self.out.append(Collective(
            name=instr.name, kind=kind, opcode=base.value, is_async=span is not None, computation=comp.name,
            start=start.name, done=end.name, bytes=payload, wire_bytes=wire, group_size=n, num_groups=len(groups),
            groups=groups, axis=axis, mode=mode, channel_id=int(cid) if cid and cid.isdigit() else None,
            executions=executions, trip_count_known=known, op_name=str(md.get("op_name", "")),
            source=self.frames.source(md), dtype=str(leaves[0].element_type.value) if leaves else ""))


class _StackFrames:
    """file:line of an op from its metadata (``source_file``/``source_line``, or the
    innermost frame of ``stack_frame_id`` in the module's stack-frame tables)."""

    def __init__(self, module: Module):
        tables = {name: lines for name, lines in module.stack_frames}
        self.files = self._table(tables.get("FileNames", []), r'"(.*)"')
        self.locations = self._table(tables.get("FileLocations", []), r"file_name_id=(\d+).*?\bline=(\d+)")
        self.frames = self._table(tables.get("StackFrames", []), r"file_location_id=(\d+)")

    @staticmethod
    def _table(lines: list[str], pattern: str) -> dict[int, tuple]:
        out = {}
        for line in lines:
            k, _, rest = line.partition(" ")
            m = re.search(pattern, rest)
            if k.isdigit() and m:
                out[int(k)] = m.groups()
        return out

    def source(self, md: dict) -> str:
        if md.get("source_file"):
            return f"{md['source_file']}:{md.get('source_line', '')}"
        fid = md.get("stack_frame_id")
        try:
            (loc,) = self.frames[int(fid)]
            file_id, line = self.locations[int(loc)]
            return f"{self.files[int(file_id)][0]}:{line}"
        except (KeyError, TypeError, ValueError):
            return ""


def inventory(module: Module, mesh: Mesh | None = None) -> list[Collective]:
    """Every collective reachable from the entry, in walk order (module docstring)."""
    walker = _Walker(module, mesh or infer_mesh(module))
    walker.walk(module.entry, 1, True, None, None)
    return walker.out


# -- the mesh -------------------------------------------------------------------------
def awaits_partitioning(module: Module) -> bool:
    """Whether ``module`` is a whole program still to be partitioned (a
    ``before_optimizations`` dump of a sharded jit): shardings that split values
    across devices and no collective yet. Its shapes are global, so memory and
    bytes are the program's, not one device's."""
    tiled = False
    for instr in module.instructions():
        if instr.opcode in SYNC or instr.opcode in STARTS:
            return False
        shard = instr.attributes.get("sharding")
        tiled = tiled or (isinstance(shard, str) and ("mesh[" in shard or "devices=[" in shard))
    return tiled


def infer_mesh(module: Module) -> Mesh:
    """The module's mesh when nobody says: the mesh of mesh-axes replica groups or
    of named shardings (named axes preferred over ``axis_N``), else a ``[G,S]<=[N]`` iota split into
    axes ``axis0=G,axis1=S``, else one axis ``axis0`` over every device."""
    attrs = module.attributes
    total = int(attrs.get("num_partitions", 1) or 1) * int(attrs.get("replica_count", 1) or 1)
    meshes: list[Mesh] = []
    split: tuple[int, int] | None = None
    for instr in module.instructions():
        text = instr.attributes.get("replica_groups")
        if not isinstance(text, str):
            shard = instr.attributes.get("sharding")  # a named sharding (Shardy) before partitioning
            if isinstance(shard, str) and (m := mesh_of_sharding(shard)) is not None and m.devices == total:
                meshes.append(m)
            continue
        m = mesh_of_text(text)
        if m is not None and m.devices == total:
            meshes.append(m)
        elif split is None and (it := re.match(r"\[(\d+),(\d+)\]<=\[(\d+)\]$", text.strip())):
            g, s, _ = (int(x) for x in it.groups())
            if g * s == total and g > 1 and s > 1:
                split = (g, s)
    named = [m for m in meshes if not all(re.fullmatch(r"axis_?\d+", a) for a in m.axes)]
    if named or meshes:
        return (named or meshes)[0]
    if split:
        return Mesh(("axis0", "axis1"), split)
    return Mesh(("axis0",), (total,))


def mesh_from_entry(path: str | Path) -> Mesh | None:
    """The mesh of a corpus module from the ``entry.json`` next to its file."""
    entry = Path(path).parent / "entry.json"
    if not entry.is_file():
        return None
    try:
        meta = json.loads(entry.read_text()).get("mesh") or {}
        return Mesh(tuple(meta["axes"]), tuple(int(n) for n in meta["shape"]))
    except (KeyError, TypeError, ValueError):
        return None
