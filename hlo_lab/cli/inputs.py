"""Folder inputs of ``hlo`` commands: the one folder walk
(``formats.walk_module_files``) decides what is read, and the user hears what is not."""

from __future__ import annotations

import os
import sys

from hlo_tools.errors import HloParseError
from corpus.dump import read_dump_folder
from hlo_tools.errors import VerificationError
from hlo_tools.ir import Module
from hlo_tools.verifier import verify
from xla_bridge import load
from hlo_tools.formats import walk_module_files

__all__ = ["check_inputs", "load_verified", "note_skipped"]


def check_inputs(paths: list[str]) -> tuple[list[str], list[HloParseError]]:
    """The files ``check`` reads: each file as given, each folder walked by the
    one folder walk (``formats.walk_module_files``: an XLA dump's side files are
    skipped); and a located error for each file the walk would not read (a FIFO,
    a symlink out of the folder) or folder with no module files."""
    out: list[str] = []
    problems: list[HloParseError] = []
    for f in paths:
        if not os.path.isdir(f):
            out.append(f)
            continue
        walk = walk_module_files(f)
        problems += [HloParseError(f"{why}: only module files inside the folder are read", str(p), 1, 1)
                     for p, why in walk.skipped]
        if not walk.files and not walk.skipped:
            problems.append(HloParseError("a folder with no module files (.hlo .txt .pb .mlir, optionally .gz)", f, 1, 1))
        out += [str(p) for p in walk.files]
    return out, problems


def note_skipped(command: str, folder: str | os.PathLike | None) -> None:
    """Lists on stderr the files of a dump folder that its reader
    (``corpus.read_dump_folder``, the one folder walk) does not read: symlinks
    out of it, FIFOs, devices, unreadable files. The user hears which and why."""
    if folder is None or not os.path.isdir(folder):
        return
    for p, why in read_dump_folder(folder).skipped:
        print(f"hlo {command}: skipped {p}: {why} (only files inside the folder are read)", file=sys.stderr)


def load_verified(path: str | os.PathLike) -> Module:
    """The module of a file (any form ``xla_bridge.load`` reads), verified before a
    command analyses, rewrites or compiles it: an invalid module is the verifier's
    message naming the file and the instruction, not a crash deep inside an
    analysis or XLA's parse error."""
    module = load(path)
    try:
        verify(module)
    except VerificationError as e:
        raise VerificationError(f"{path}: {e.problems[0]}", e.instruction_name, e.context, e.problems) from None
    return module
