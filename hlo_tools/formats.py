"""Module files on disk: which names are modules, which format a file holds, and
reading them safely (bounded gunzip, located errors).

A module reaches us as HLO text, a serialized ``HloModuleProto`` (or the
``HloProto``/``HloSnapshot`` wrapping one: ``--xla_dump_hlo_as_proto`` writes
``*.hlo.pb``), or StableHLO (``*.mlir`` text or bytecode), each optionally
gzip'd.  Everything here is plain Python: only turning a proto or StableHLO
into HLO text needs jaxlib, and that lives in ``proto``.

``is_module_file`` is the one rule for "is this file a module, by its name":
``hlo check DIR`` and the corpus scan both walk folders with it, so the side
files an XLA dump holds (buffer assignments, live ranges, memory reports,
debug options, thunk sequences, autotune results, object files, target
configs...) are skipped the same way everywhere.
"""

from __future__ import annotations

import dataclasses
import os
import re
import stat
import zlib
from pathlib import Path
from typing import Callable, Literal

from .errors import HloParseError
from .fileio import describe_mode

__all__ = ["MODULE_SUFFIXES", "FolderWalk", "Format", "gunzip", "is_inside", "is_module_file", "max_decompressed_bytes",
           "module_format", "read_module_bytes", "find_module_proto", "walk_module_files", "wire_fields"]

Format = Literal["hlo", "proto", "stablehlo"]

#: Suffixes of module files (each may also end in ``.gz``).
MODULE_SUFFIXES = (".hlo", ".txt", ".pb", ".mlir", ".mlirbc")
#: the first bytes of an MLIR bytecode file
MLIR_BYTECODE_MAGIC = b"ML\xefR"
#: Decompressed-size limit of a gzip'd module when ``HLO_MAX_DECOMPRESSED_BYTES`` is unset:
#: 64x the largest module text seen (a 16.9 MB corpus stage), and a few times less
#: than the memory a parse of that much text would need anyway.
DEFAULT_MAX_DECOMPRESSED_BYTES = 1 << 30
_CHUNK = 1 << 24

# The last dot-separated part of a dump file's stem, for the files XLA writes
# beside its modules.  ``*_optimizations-<aux>`` covers buffer-assignment(-values),
# live-range and memory-usage-report; the rest are fixed names.
_SIDE_FILE_RE = re.compile(
    r"(?:.*_optimizations-.+|debug_options|thunk_\w+|autotune_results|gpu_target_config|config|compile_options"
    r"|topology|execution_options|.*fusion_dump|.*buffer-assignment.*|.*-live-range|.*-memory-usage-report"
    r"|ir-(?:no|with)-opt.*)")


def _split_suffix(name: str) -> tuple[str, str, bool]:
    """(stem, module suffix or "", gzip'd) of a file name."""
    gz = name.endswith(".gz")
    if gz:
        name = name[:-3]
    for suffix in (".hlo.pb", ".hlo.txt", *MODULE_SUFFIXES):
        if name.endswith(suffix) and len(name) > len(suffix):
            return name[: -len(suffix)], suffix, gz
    return name, "", gz


def is_stablehlo_file(path: str | os.PathLike) -> bool:
    """Named as StableHLO (``.mlir``, ``.mlirbc``, optionally ``.gz``)."""
    return _split_suffix(Path(path).name)[1] in (".mlir", ".mlirbc")


def is_module_file(path: str | os.PathLike) -> bool:
    """True when a file's name says it holds a module: a module suffix
    (``.hlo .txt .pb .mlir .mlirbc``, optionally ``.gz``) and not one of the side
    files XLA dumps beside its modules, nor a hidden file.  Names only: no I/O."""
    name = Path(path).name
    if name.startswith("."):
        return False
    stem, suffix, _ = _split_suffix(name)
    if not suffix:
        return False
    return _SIDE_FILE_RE.fullmatch(stem.rsplit(".", 1)[-1]) is None


@dataclasses.dataclass
class FolderWalk:
    """The files a folder walk found, and those it left out with why: a walk
    never reads outside its folder and never opens a FIFO or a device."""

    files: list[Path] = dataclasses.field(default_factory=list)
    skipped: list[tuple[Path, str]] = dataclasses.field(default_factory=list)


def is_inside(path: str | os.PathLike, real_root: str | os.PathLike) -> bool:
    """Whether ``path``, every symlink followed, lies in the resolved folder ``real_root``."""
    try:
        return Path(os.path.realpath(path)).is_relative_to(real_root)
    except (OSError, ValueError):
        return False


def walk_module_files(folder: str | os.PathLike, *, recursive: bool = True,
                      accept: Callable[[Path], bool] = is_module_file) -> FolderWalk:
    """The one folder walk: the files under ``folder`` whose names ``accept``
    (default: module files), sorted. Hidden folders are not entered; a symlink
    leading out of ``folder`` and a file that is not a regular file (FIFO, socket,
    device, dangling link) are listed in ``skipped`` instead of read."""
    root = Path(folder)
    real_root = os.path.realpath(root)
    walk = FolderWalk()
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        here = Path(dirpath)
        for d in sorted(dirnames):
            if recursive and not d.startswith(".") and (here / d).is_symlink() and not is_inside(here / d, real_root):
                walk.skipped.append((here / d, "symlink to a folder outside the folder"))
        dirnames[:] = sorted(d for d in dirnames if not d.startswith(".")) if recursive else []
        for name in sorted(filenames):
            p = here / name
            if not accept(p):
                continue
            why = _unreadable_reason(p, real_root)
            if why:
                walk.skipped.append((p, why))
            else:
                walk.files.append(p)
    return walk


def _unreadable_reason(p: Path, real_root: str) -> str:
    """Why a walk must not read ``p`` ("" when it may)."""
    if p.is_symlink() and not is_inside(p, real_root):
        return "symlink to a file outside the folder"
    try:
        mode = os.stat(p).st_mode
    except OSError as e:
        return f"cannot read: {e.strerror or e}"
    if not stat.S_ISREG(mode):
        return f"not a regular file ({describe_mode(mode)})"
    return ""


def max_decompressed_bytes() -> int:
    """The gunzip limit: ``HLO_MAX_DECOMPRESSED_BYTES`` (bytes) or 1 GiB."""
    raw = os.environ.get("HLO_MAX_DECOMPRESSED_BYTES", "")
    try:
        return int(raw) if raw.strip() else DEFAULT_MAX_DECOMPRESSED_BYTES
    except ValueError:
        return DEFAULT_MAX_DECOMPRESSED_BYTES


def gunzip(data: bytes, source: str = "<bytes>", *, max_bytes: int | None = None) -> bytes:
    """Decompresses gzip ``data`` (all members) with a bound on the output, so a
    gzip bomb stops at ``max_bytes`` instead of filling memory; corrupt,
    truncated or oversized data is an ``HloParseError`` at ``source``:1:1."""
    limit = max_decompressed_bytes() if max_bytes is None else max_bytes

    def fail(what: str) -> HloParseError:
        return HloParseError(what, source, 1, 1)

    try:
        return _gunzip(data, limit, fail)
    except MemoryError:
        raise fail(f"gzip data does not fit in memory when decompressed (limit {limit:,} bytes; set "
                   "HLO_MAX_DECOMPRESSED_BYTES lower to stop sooner)") from None


def _gunzip(data: bytes, limit: int, fail: Callable[[str], HloParseError]) -> bytes:
    out = bytearray()
    d = zlib.decompressobj(zlib.MAX_WBITS | 16)
    pending = data
    while True:
        try:
            chunk = d.decompress(pending, min(_CHUNK, limit - len(out) + 1))
        except zlib.error as e:
            raise fail(f"corrupt gzip data: {e}") from None
        out += chunk
        if len(out) > limit:
            raise fail(f"gzip data decompresses to more than {limit:,} bytes (the limit; set "
                       "HLO_MAX_DECOMPRESSED_BYTES to raise it)")
        pending = d.unconsumed_tail
        if d.eof:
            rest = d.unused_data
            if not rest.strip(b"\0"):
                return bytes(out)
            if rest[:2] != b"\x1f\x8b":
                raise fail("trailing data after the end of the gzip stream")
            d, pending = zlib.decompressobj(zlib.MAX_WBITS | 16), rest  # another gzip member
        elif not pending and not chunk:
            raise fail("truncated gzip file: the data ends before the end of the compressed stream")


def read_module_bytes(path: str | os.PathLike, *, max_bytes: int | None = None) -> bytes:
    """The bytes of a module file, gunzipped (by content) with a bound; a missing
    or unreadable file or a folder is an ``HloParseError`` naming the path."""
    p = Path(path)
    try:
        st = os.stat(p)
    except OSError as e:
        raise HloParseError(f"cannot read file: {e.strerror or e}", str(p), 1, 1) from None
    if not stat.S_ISREG(st.st_mode) and not stat.S_ISDIR(st.st_mode):
        # a FIFO or a device would block or never end: only files are modules
        raise HloParseError(f"not a regular file ({describe_mode(st.st_mode)}): only module files are read", str(p), 1, 1)
    try:
        data = p.read_bytes()
    except IsADirectoryError:
        raise HloParseError("is a folder, not a module file (`hlo check` walks folders)", str(p), 1, 1) from None
    except OSError as e:
        raise HloParseError(f"cannot read file: {e.strerror or e}", str(p), 1, 1) from None
    if data[:2] == b"\x1f\x8b":
        data = gunzip(data, str(p), max_bytes=max_bytes)
    return data


_MLIR_TEXT_RE = re.compile(rb"\s*(?://[^\n]*\n\s*)*(?:module\b|func\.func\b|#loc\w*\s*=|#\w+\s*=)")


def module_format(path: str | os.PathLike, data: bytes) -> Format:
    """Which format ``data`` (already gunzipped) holds: by suffix first
    (``.pb``: proto, ``.mlir``/``.mlirbc``: StableHLO), else by content."""
    _, suffix, _ = _split_suffix(Path(path).name)
    if suffix in (".pb", ".hlo.pb"):
        # HLO text someone named .pb is read as text; anything else is a proto (or an error saying what it is not)
        is_text = find_module_proto(data) is None and data.lstrip()[:9] == b"HloModule"
        return "hlo" if is_text else "proto"
    if suffix in (".mlir", ".mlirbc"):
        return "stablehlo"
    if data[:4] == MLIR_BYTECODE_MAGIC:
        return "stablehlo"
    if _MLIR_TEXT_RE.match(data[:4096]):
        return "stablehlo"
    try:
        data[:4096].decode("utf-8")
    except UnicodeDecodeError as e:
        if e.start < 4092 and find_module_proto(data) is not None:  # a real decoding error, not a cut character
            return "proto"
    return "hlo"


# -- protobuf wire format: enough to find the HloModuleProto in a dump file (and read
# the small profile protos of ``xla_bridge.trace``) ---------------------------------


def wire_fields(data: bytes) -> dict[int, list[tuple[int, int, int]]] | None:
    """Top-level fields of a serialized message: number -> [(wire type, start, end)]
    (for length-delimited fields the payload span); None if it is not well formed."""
    fields: dict[int, list[tuple[int, int, int]]] = {}
    i, n = 0, len(data)

    def varint(i: int) -> tuple[int, int]:
        shift = val = 0
        while True:
            if i >= n or shift > 63:
                raise ValueError
            b = data[i]
            val |= (b & 0x7F) << shift
            i += 1
            if not b & 0x80:
                return val, i
            shift += 7

    try:
        while i < n:
            tag, i = varint(i)
            number, wire = tag >> 3, tag & 7
            if number == 0:
                return None
            if wire == 0:
                start = i
                _, i = varint(i)
            elif wire == 1:
                start, i = i, i + 8
            elif wire == 5:
                start, i = i, i + 4
            elif wire == 2:
                size, i = varint(i)
                start, i = i, i + size
            else:
                return None  # groups (3, 4) are not used by XLA's protos
            if i > n:
                return None
            fields.setdefault(number, []).append((wire, start, i))
    except ValueError:
        return None
    return fields


def _is_hlo_module_proto(data: bytes) -> bool:
    """An ``HloModuleProto`` by its shape: a UTF-8 name (1), computations (3) and
    the host program shape (4), all length-delimited, and nothing malformed."""
    f = wire_fields(data)
    if not f or any(k not in f or f[k][0][0] != 2 for k in (1, 3, 4)):
        return False
    _, start, end = f[1][0]
    try:
        data[start:end].decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def find_module_proto(data: bytes) -> bytes | None:
    """The serialized ``HloModuleProto`` in ``data``: the data itself, or field 1
    of an ``HloProto`` (what ``--xla_dump_hlo_as_proto`` writes), or of an
    ``HloSnapshot``'s ``HloProto``; None when there is none."""
    blob = data
    for _ in range(3):
        if _is_hlo_module_proto(blob):
            return blob
        f = wire_fields(blob)
        if not f or 1 not in f or f[1][0][0] != 2:
            return None
        _, start, end = f[1][0]
        blob = blob[start:end]
    return None
