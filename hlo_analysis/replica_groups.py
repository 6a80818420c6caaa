"""Which devices a collective talks to, and along which mesh axis.

XLA prints a collective's groups in three forms (xla/hlo/ir/collective_device_list.h):
an explicit list ``{{0,1,2,3},{4,5,6,7}}`` (``{}``: everyone), an iota list
``[G,S]<=[d0,d1,...]T(p...)`` (``iota(d0*d1*...)`` reshaped to ``dims``,
transposed by ``p``, reshaped to G groups of S), and the mesh-axes form
``mesh['batch'=2,'model'=4] {'model'}`` (the devices of a row-major mesh grouped
along the named axes). Ids in a group are replica, partition or global ids by
XLA's CollectiveOpGroupMode (xla/service/collective_ops_utils.cc
``GetCollectiveOpGroupMode``); :func:`device_groups` turns them into device ids.

A mesh maps a device id to coordinates: device id = row-major position in the
mesh (jax's ``Mesh(devices.reshape(shape))`` over ``jax.devices()``, the
default device assignment), unless a mesh says otherwise.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Sequence

import numpy as np

Groups = tuple[tuple[int, ...], ...]


class ReplicaGroupsError(ValueError):
    """A replica-groups or source-target-pairs text this module cannot read."""


@dataclass(frozen=True)
class Mesh:
    """Named mesh axes (``batch=2,model=4``); device id = row-major position."""

    axes: tuple[str, ...]
    shape: tuple[int, ...]
    #: The device at each row-major mesh position (XLA's ``device_ids=(...)``);
    #: None: the position is the device id.
    device_ids: tuple[int, ...] | None = None

    @property
    def devices(self) -> int:
        return int(np.prod(self.shape)) if self.shape else 1

    def __str__(self) -> str:
        return ",".join(f"{a}={n}" for a, n in zip(self.axes, self.shape))

    @classmethod
    def parse(cls, spec: str) -> "Mesh":
        """``batch=2,model=4`` (the ``--mesh`` spelling)."""
        axes, shape = [], []
        for part in spec.split(","):
            name, eq, size = part.strip().partition("=")
            if not eq or not name or not size.strip().isdigit() or int(size) < 1:
                raise ReplicaGroupsError(f"mesh {spec!r}: expected NAME=SIZE[,NAME=SIZE...], e.g. batch=2,model=4")
            axes.append(name.strip())
            shape.append(int(size))
        if len(set(axes)) != len(axes):
            raise ReplicaGroupsError(f"mesh {spec!r}: an axis is named twice")
        return cls(tuple(axes), tuple(shape))

    def coords(self, device: int) -> tuple[int, ...]:
        position = device if self.device_ids is None else self.device_ids.index(device)
        return tuple(int(c) for c in np.unravel_index(position, self.shape))

    def axis_of_groups(self, groups: Groups) -> str:
        """The axes a group's members vary along: ``model``; ``batch,model``;
        ``model (2 of 4)`` when a group holds only part of its axes; ``none`` for
        groups of one device."""
        varied: set[int] = set()
        size = 1
        for g in groups:
            if len(g) < 2:
                continue
            size = max(size, len(g))
            cs = [self.coords(d) for d in g if 0 <= d < self.devices]
            varied |= {k for k in range(len(self.shape)) if len({c[k] for c in cs}) > 1}
        return self._spell(varied, size)

    def axis_of_pairs(self, pairs: Sequence[tuple[int, int]]) -> str:
        """The axes along which a permute's sources and targets differ."""
        varied: set[int] = set()
        for s, t in pairs:
            if s != t and 0 <= s < self.devices and 0 <= t < self.devices:
                a, b = self.coords(s), self.coords(t)
                varied |= {k for k in range(len(self.shape)) if a[k] != b[k]}
        return self._spell(varied, None)

    def _spell(self, varied: set[int], size: int | None) -> str:
        if not varied:
            return "none"
        names = ",".join(self.axes[k] for k in sorted(varied))
        full = int(np.prod([self.shape[k] for k in varied]))
        return names if size is None or size == full else f"{names} ({size} of {full})"


_IOTA = re.compile(r"\[([\d,\s]+)\]<=\[([\d,\s]+)\](?:T\(([\d,\s]+)\))?$")
#: The mesh-axes form as XLA prints it: ``mesh['a'=2,'b'=4] {'b'}``, names quoted
#: (jaxlib 0.10-0.12) or bare (newer XLA), an optional explicit device order
#: ``, device_ids=(7,6,...)`` or ``, device_ids=([4,2]T(1,0))``, then the axes.
_MESH = re.compile(r"mesh\[(?P<axes>[^\]]*)\](?:\s*,\s*device_ids=\((?P<ids>(?:[^()]|\([^()]*\))*)\))?"
                   r"\s*\{(?P<refs>.*)\}$")
_NAME = r"(?:'([^']*)'|([A-Za-z_][\w.\-]*))"
_MESH_AXIS = re.compile(_NAME + r"\s*=\s*(\d+)")
_DEVICE_IOTA = re.compile(r"\[([\d,\s]+)\](?:T\(([\d,\s]+)\))?$")


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def mesh_of_text(text: str) -> Mesh | None:
    """The mesh a mesh-axes replica-groups text names, or None for other forms."""
    m = _MESH.match(text.strip())
    return _mesh(text, m.group("axes"), m.group("ids")) if m else None


#: A named sharding: ``{mesh['fsdp'=4,'tensor'=2], [{'fsdp'}, {}]}``, maybe with
#: the mesh's ``device_ids=(...)``.
_SHARDING_MESH = re.compile(r"\{\s*mesh\[(?P<axes>[^\]]*)\](?:\s*,\s*device_ids=\((?P<ids>(?:[^()]|\([^()]*\))*)\))?")


def mesh_of_sharding(text: str) -> Mesh | None:
    """The mesh a named ``sharding={mesh[...], ...}`` attribute names, or None."""
    m = _SHARDING_MESH.match(text.strip())
    return _mesh(text, m.group("axes"), m.group("ids")) if m else None


def _mesh(text: str, axes: str, ids: str | None) -> Mesh:
    found = _MESH_AXIS.findall(axes)
    if re.sub(_MESH_AXIS, "", axes).replace(",", "").strip():
        raise ReplicaGroupsError(f"{text!r}: expected mesh['axis'=N,...] (or mesh[axis=N,...])")
    mesh = Mesh(tuple(q or b for q, b, _ in found), tuple(int(n) for _, _, n in found))
    if ids is None:
        return mesh
    return Mesh(mesh.axes, mesh.shape, _device_ids(text, ids.strip(), mesh.devices))


def _device_ids(text: str, ids: str, devices: int) -> tuple[int, ...]:
    """A mesh's ``device_ids``: listed, or iota ``[dims]T(perm)`` (the iota of
    their product, reshaped to dims, transposed by perm, read row-major)."""
    m = _DEVICE_IOTA.match(ids)
    if m:
        dims = _ints(m.group(1))
        perm = _ints(m.group(2)) if m.group(2) else list(range(len(dims)))
        if sorted(perm) != list(range(len(dims))):
            raise ReplicaGroupsError(f"replica_groups={text!r}: device_ids=({ids}): T(perm) is not a permutation "
                                     "of the dims")
        order = tuple(int(x) for x in np.arange(int(np.prod(dims))).reshape(dims).transpose(perm).ravel())
    elif re.fullmatch(r"[\d,\s]+", ids):
        order = tuple(_ints(ids))
    else:
        raise ReplicaGroupsError(f"replica_groups={text!r}: expected device_ids=(0,1,...) or device_ids=([dims]T(perm))")
    if sorted(order) != list(range(devices)):
        raise ReplicaGroupsError(f"replica_groups={text!r}: device_ids=({ids}) is not an order of the mesh's "
                                 f"{devices} devices")
    return order


#: One axis reference of the mesh-axes form: ``'fsdp'``, or a sub-axis ``'fsdp':(2)2``
#: (Shardy's AxisRef: the part of size 2 whose more-major parts multiply to 2).
_AXIS_REF = re.compile(_NAME + r"(?:\s*:\s*\((\d+)\)\s*(\d+))?")


def _mesh_groups(text: str, mesh: Mesh, refs_text: str) -> Groups:
    """Groups of the mesh-axes form: devices of the row-major mesh that differ only
    along the named axes or sub-axes.  A sub-axis ``'a':(m)k`` splits axis ``a`` of
    size n into major-to-minor parts at pre-sizes m and m*k, and names the parts
    between them."""
    refs = [(q or b, int(m) if m else None, int(k) if k else None) for q, b, m, k in _AXIS_REF.findall(refs_text)]
    if re.sub(_AXIS_REF, "", refs_text).replace(",", "").strip() or not mesh.axes \
            or any(a not in mesh.axes for a, _, _ in refs):
        raise ReplicaGroupsError(f"replica_groups={text!r}: expected mesh['axis'=N,...] {{'axis' or 'axis':(pre)size,...}} "
                                 f"naming the mesh's axes")
    cuts: dict[str, set[int]] = {a: {1, n} for a, n in zip(mesh.axes, mesh.shape)}
    for a, pre, size in refs:
        n = mesh.shape[mesh.axes.index(a)]
        if pre is not None:
            if pre < 1 or size < 1 or n % (pre * size):
                raise ReplicaGroupsError(f"replica_groups={text!r}: sub-axis '{a}':({pre}){size} does not divide "
                                         f"'{a}'={n}")
            cuts[a] |= {pre, pre * size}
    parts: list[tuple[str, int, int]] = []   # (axis, pre-size, size) per expanded mesh dim, major to minor
    for a in mesh.axes:
        bounds = sorted(cuts[a])
        if any(hi % lo for lo, hi in zip(bounds, bounds[1:])):
            raise ReplicaGroupsError(f"replica_groups={text!r}: the sub-axes of '{a}' overlap")
        parts += [(a, lo, hi // lo) for lo, hi in zip(bounds, bounds[1:])]
    keep: list[int] = []
    for a, pre, size in refs:
        lo, hi = (pre, pre * size) if pre is not None else (1, mesh.shape[mesh.axes.index(a)])
        keep += [i for i, (b, p, k) in enumerate(parts) if b == a and p >= lo and p * k <= hi and i not in keep]
    rest = [i for i in range(len(parts)) if i not in keep]
    ids = np.arange(mesh.devices).reshape([k for _, _, k in parts] or [1]).transpose(rest + keep)
    size = int(np.prod([parts[i][2] for i in keep])) if keep else 1
    if mesh.device_ids is not None:  # positions to the devices placed there
        ids = np.asarray(mesh.device_ids)[ids]
    return tuple(tuple(int(x) for x in row) for row in ids.reshape(-1, size))


def parse_replica_groups(text: str | None, total: int) -> Groups:
    """Groups of ids from XLA's printed ``replica_groups``; ``total`` is how many
    ids there are (``{}`` or a missing attribute: one group of all of them)."""
    t = (text or "").strip()
    if t in ("", "{}"):
        return (tuple(range(total)),)
    if t.startswith("{"):
        inner = t[1:-1].strip()
        groups = re.findall(r"\{([\d,\s]*)\}", inner)
        if not groups or re.sub(r"\{[\d,\s]*\}|[,\s]", "", inner):
            raise ReplicaGroupsError(f"replica_groups={t!r}: expected {{{{0,1,...}},...}}")
        return tuple(tuple(_ints(g)) for g in groups)
    m = _IOTA.match(t)
    if m:
        gs, dims = _ints(m.group(1)), _ints(m.group(2))
        perm = _ints(m.group(3)) if m.group(3) else list(range(len(dims)))
        if len(gs) != 2 or sorted(perm) != list(range(len(dims))) or np.prod(gs) != np.prod(dims):
            raise ReplicaGroupsError(f"replica_groups={t!r}: expected [G,S]<=[dims]T(perm) with G*S = prod(dims)")
        ids = np.arange(int(np.prod(dims))).reshape(dims).transpose(perm).reshape(gs)
        return tuple(tuple(int(x) for x in row) for row in ids)
    m = _MESH.match(t)
    if m:
        mesh = mesh_of_text(t)
        assert mesh is not None
        return _mesh_groups(t, mesh, m.group("refs"))
    raise ReplicaGroupsError(f"replica_groups={t!r}: expected {{{{...}}}}, [G,S]<=[dims]T(perm) or mesh[...] {{...}}")


def parse_pairs(text: str | None) -> tuple[tuple[int, int], ...]:
    """``source_target_pairs={{0,1},{1,2}}`` as (source, target) pairs."""
    t = (text or "").strip()
    pairs = re.findall(r"\{\s*(\d+)\s*,\s*(\d+)\s*\}", t)
    if t not in ("", "{}") and not pairs:
        raise ReplicaGroupsError(f"source_target_pairs={t!r}: expected {{{{source,target}},...}}")
    return tuple((int(a), int(b)) for a, b in pairs)


#: XLA's CollectiveOpGroupMode names (collective_ops_utils.h).
CROSS_REPLICA = "cross-replica"
CROSS_PARTITION = "cross-partition"
CROSS_REPLICA_AND_PARTITION = "cross-replica-and-partition"
FLATTENED_ID = "flattened-id"


def group_mode(has_channel_id: bool, use_global_device_ids: bool | None) -> str:
    """XLA's GetCollectiveOpGroupMode: no channel id -> cross-replica; a channel id
    and no use_global_device_ids attribute (all-to-all, permute) -> cross-partition;
    use_global_device_ids=false -> cross-replica-and-partition; true -> flattened ids."""
    if not has_channel_id:
        return CROSS_REPLICA
    if use_global_device_ids is None:
        return CROSS_PARTITION
    return FLATTENED_ID if use_global_device_ids else CROSS_REPLICA_AND_PARTITION


def device_groups(text: str | None, mode: str, replicas: int, partitions: int) -> Groups:
    """The groups as global device ids (replica * partitions + partition)."""
    if mode == FLATTENED_ID:
        return parse_replica_groups(text, replicas * partitions)
    if mode == CROSS_PARTITION:
        groups = parse_replica_groups(text, partitions)
        return tuple(tuple(r * partitions + p for p in g) for r in range(replicas) for g in groups)
    groups = parse_replica_groups(text, replicas)
    if mode == CROSS_REPLICA:
        return tuple(tuple(r * partitions + p for r in g) for p in range(partitions) for g in groups)
    return tuple(tuple(r * partitions + p for r in g for p in range(partitions)) for g in groups)
