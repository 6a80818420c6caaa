"""The bundled corpus: ``manifest.json`` plus gzip'd HLO stages under ``modules/``.

Nothing here imports jax or keras.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import hashlib
import json
import os
from pathlib import Path
from typing import Any, Iterator

from hlo_tools.errors import HloParseError
from hlo_tools.formats import is_inside
from hlo_tools.ir import Module
from hlo_tools.parser import parse, read_hlo_text

__all__ = ["CORPUS_DIR", "Entry", "load", "manifest"]

CORPUS_DIR = Path(__file__).resolve().parent


@dataclasses.dataclass(frozen=True, eq=False)
class Entry:
    """One bundled module with its manifest metadata."""

    name: str
    model: str
    source_package: str
    config: dict[str, Any]
    workload: str
    size: str
    sharded: bool
    dtype: str
    files: dict[str, str]
    sha256: dict[str, str]
    runnable: bool
    root: Path
    meta: dict[str, Any]  # the full manifest record, including the fields above

    @property
    def stages(self) -> list[str]:
        """Stored stages of this module."""
        return list(self.files)

    def path(self, stage: str) -> Path:
        """Path of the gzip'd file of a stage: inside the corpus folder, so a
        manifest naming ``../x``, ``/etc/x`` or a symlink out of it reads nothing."""
        try:
            rel = self.files[stage]
        except KeyError:
            raise KeyError(f"{self.name} has no stage {stage!r}; it has {sorted(self.files)}") from None
        path = self.root / rel
        if not is_inside(path, os.path.realpath(self.root)):
            raise HloParseError(f"manifest entry {self.name!r} stage {stage!r} names {rel!r}, which is outside "
                                "the corpus folder: only files inside it are read",
                                str(Path(self.root) / "manifest.json"), 1, 1)
        return path

    def text(self, stage: str) -> str:
        """HLO text of a stage (gunzipped with the one bounded decompressor)."""
        return read_hlo_text(self.path(stage))

    def verify(self, stage: str) -> bool:
        """True when the stored file's sha256 matches the manifest."""
        return hashlib.sha256(self.path(stage).read_bytes()).hexdigest() == self.sha256[stage]

    def module(self, stage: str) -> Module:
        """Parse a stage into the project's IR."""
        return parse(self.text(stage), source=f"{self.path(stage)}")

    def __repr__(self) -> str:
        return f"Entry({self.name!r}, stages={self.stages})"


def manifest(root: str | Path | None = None) -> dict[str, Any]:
    """The parsed ``manifest.json`` of a corpus root (default: the bundled one)."""
    r = Path(root) if root is not None else CORPUS_DIR
    return json.loads((r / "manifest.json").read_text())


def load(pattern: str | None = None, root: str | Path | None = None) -> Iterator[Entry]:
    """Iterate corpus entries whose name matches the fnmatch ``pattern`` (all if None)."""
    r = Path(root) if root is not None else CORPUS_DIR
    for rec in manifest(r)["modules"]:
        if pattern and not fnmatch.fnmatch(rec["name"], pattern):
            continue
        yield Entry(
            name=rec["name"], model=rec["model"], source_package=rec["source_package"],
            config=rec["config"], workload=rec["workload"], size=rec["size"],
            sharded=rec["sharded"], dtype=rec["dtype"], files=rec["files"], sha256=rec["sha256"],
            runnable=rec["runnable"], root=r, meta=rec)
