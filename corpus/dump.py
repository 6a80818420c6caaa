"""Read any ``--xla_dump_to`` folder: group files by module id, classify stages.

A dump folder holds, per compiled module ``module_<id>.<name>``:

* ``<name>.before_optimizations.txt`` (or ``.hlo.pb`` with ``--xla_dump_hlo_as_proto``),
* ``<name>.<platform>_after_optimizations.txt`` (``cpu_``, ``gpu_``, ``sm_9.0_gpu_`` ...),
  plus side files such as ``...after_optimizations-buffer-assignment.txt``,
* per-pass dumps with ``--xla_dump_hlo_pass_re``:
  ``<name>.<NNNN>.<pipeline>.after_<pass>.before_<next>.txt``,
* XLA:GPU snapshots such as ``<name>.after_spmd_partitioner.txt``,
* other artefacts (``debug_options``, object files, PTX, thunk sequences, ...).

Nothing here imports jax; decoding a ``.pb`` stage imports jaxlib lazily.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from hlo_tools.formats import is_module_file, walk_module_files  # the rules check DIR and the scan share
from hlo_tools.ir import Module
from hlo_tools.parser import parse
from xla_bridge import read_text

__all__ = ["DumpFolder", "DumpModule", "PassDump", "from_dump_dir", "is_dump_file_name", "is_module_file",
           "read_dump_folder"]

_MODULE_RE = re.compile(r"^module_(?P<id>\d+)\.(?P<rest>.+)$")
_PASS_RE = re.compile(
    r"^(?P<name>.+?)\.(?P<seq>\d{4})\.(?P<pipeline>.+?)\.(?P<after>after_[^.]+)"
    r"(?:\.(?P<before>before_[^.]+))?\.(?P<ext>txt|hlo\.pb|pb)$")
_STAGE_RE = re.compile(
    r"^(?P<name>.+?)\.(?P<stage>(?:sm_\d+\.\d+[a-z]?_)?(?:[a-z0-9]+_)?(?:before|after)_optimizations)"
    r"(?P<aux>-[\w\-]+)?\.(?P<ext>txt|hlo\.pb|pb)$")
# Other whole-module HLO snapshots XLA:GPU dumps, e.g. ``after_spmd_partitioner.txt``.
_SNAPSHOT_RE = re.compile(r"^(?P<name>.+?)\.(?P<stage>(?:after|before)_[A-Za-z0-9_]+)\.(?P<ext>txt|hlo\.pb|pb)$")
_HLO_EXTS = ("txt", "hlo.pb", "pb")


def is_dump_file_name(name: str) -> bool:
    """Whether ``name`` is one XLA gives the files of a dump folder (``module_<id>.<name>...``)."""
    return _MODULE_RE.match(name) is not None


@dataclasses.dataclass(frozen=True)
class PassDump:
    """One per-pass dump: the module after ``pass_name`` ran in ``pipeline``."""

    index: int
    pipeline: str
    pass_name: str
    next_pass: str | None
    path: Path

    @property
    def key(self) -> str:
        """Stage key as used in :attr:`DumpModule.stages`."""
        return f"{self.index:04d}.{self.pipeline}.after_{self.pass_name}"


@dataclasses.dataclass
class DumpModule:
    """All files of one module in a dump folder."""

    module_id: int
    name: str
    stages: dict[str, Path] = dataclasses.field(default_factory=dict)
    passes: list[PassDump] = dataclasses.field(default_factory=list)
    aux: dict[str, Path] = dataclasses.field(default_factory=dict)

    @property
    def before_optimizations(self) -> Path | None:
        """Path of the pre-optimization HLO, if dumped."""
        return self.stages.get("before_optimizations")

    @property
    def after_optimizations(self) -> Path | None:
        """Path of the (first) ``*after_optimizations`` HLO, if dumped."""
        for k, p in sorted(self.stages.items()):
            if k.endswith("after_optimizations"):
                return p
        return None

    def path(self, stage: str) -> Path:
        """Path of a stage (``before_optimizations``, ``after_optimizations``, a pass key)."""
        if stage == "after_optimizations" and self.after_optimizations is not None:
            return self.after_optimizations
        try:
            return self.stages[stage]
        except KeyError:
            raise KeyError(f"module_{self.module_id:04d}.{self.name} has no stage {stage!r}; "
                           f"it has {sorted(self.stages)}") from None

    def text(self, stage: str) -> str:
        """HLO text of a stage (``.pb`` files are decoded through jaxlib)."""
        return read_text(self.path(stage))

    def module(self, stage: str) -> Module:
        """Parse a stage into the project's IR (``.pb`` stages through XLA's text)."""
        return parse(self.text(stage), source=str(self.path(stage)))


def _stage_rank(ext: str) -> int:
    return _HLO_EXTS.index(ext)


@dataclasses.dataclass
class DumpFolder:
    """A dump folder's modules, and the files the walk would not read (a FIFO,
    a symlink out of the folder) with why."""

    modules: list[DumpModule]
    skipped: list[tuple[Path, str]]


def from_dump_dir(path: str | Path) -> list[DumpModule]:
    """The modules of an XLA dump folder, sorted by id (``read_dump_folder``'s)."""
    return read_dump_folder(path).modules


def read_dump_folder(path: str | Path) -> DumpFolder:
    """Group the files of an XLA dump folder by module id; sorted by id.

    Text files are preferred over ``.pb`` when both exist for the same stage.
    The folder is walked by ``walk_module_files`` (its top level only), so no
    file outside it and no FIFO is ever read.
    """
    root = Path(path)
    if not root.is_dir():
        raise NotADirectoryError(f"{root}: not a directory")
    mods: dict[int, DumpModule] = {}
    chosen_ext: dict[tuple[int, str], str] = {}

    def put(mid: int, key: str, p: Path, ext: str, target: dict[str, Path]) -> bool:
        old = chosen_ext.get((mid, key))
        if old is not None and _stage_rank(old) <= _stage_rank(ext):
            return False
        chosen_ext[(mid, key)] = ext
        target[key] = p
        return True

    walk = walk_module_files(root, recursive=False, accept=lambda p: is_dump_file_name(p.name))
    for p in walk.files:
        m = _MODULE_RE.match(p.name)
        mid, rest = int(m.group("id")), m.group("rest")
        pm, sm = _PASS_RE.match(rest), _STAGE_RE.match(rest)
        xm = None if (pm or sm) else _SNAPSHOT_RE.match(rest)
        hit = pm or sm or xm
        name = hit.group("name") if hit else rest.split(".", 1)[0]
        mod = mods.setdefault(mid, DumpModule(mid, name))
        if pm:
            pd = PassDump(int(pm.group("seq")), pm.group("pipeline"), pm.group("after")[len("after_"):],
                          (pm.group("before") or "")[len("before_"):] or None, p)
            if put(mid, pd.key, p, pm.group("ext"), mod.stages):
                mod.passes = [x for x in mod.passes if x.key != pd.key] + [pd]
        elif sm and not sm.group("aux"):
            put(mid, sm.group("stage"), p, sm.group("ext"), mod.stages)
        elif xm:
            put(mid, xm.group("stage"), p, xm.group("ext"), mod.stages)
        else:
            mod.aux[rest[len(name) + 1:] if rest.startswith(name + ".") else rest] = p
    for mod in mods.values():
        mod.passes.sort(key=lambda x: x.index)
    return DumpFolder([mods[k] for k in sorted(mods)], walk.skipped)

