"""Writing outputs the user named (``-o``, ``--dump-dir``, reports, caches).

One helper for every writer, so every command keeps the same promises:
- a regular file is replaced atomically (temporary file in the same folder, then
  a rename): a failure never leaves a partial file;
- a symlink is written through to its target; the link itself stays a link;
- an existing file keeps its permission bits (a 0600 file stays 0600), and a
  file with other hard links is rewritten in place so the links still share it;
- a character device (``/dev/null``, ``/dev/stdout``) is written directly; any
  other non-regular target (folder, FIFO, socket, block device) is refused;
- every failure is an ``OutputError`` naming the path and the reason.
"""

from __future__ import annotations

import errno
import os
import stat
import tempfile
from pathlib import Path

from .errors import HloError


class OutputError(HloError):
    """An output path that cannot be written; the message names path and reason."""


def _reason(e: OSError) -> str:
    return e.strerror or str(e)


def _resolve(path: Path) -> Path:
    """The file a write to ``path`` lands in: a symlink chain is followed to its
    final target (which may not exist yet)."""
    try:
        return Path(os.path.realpath(path))
    except OSError as e:  # a symlink loop
        raise OutputError(f"cannot write {path}: {_reason(e)}") from None


def _stat(p: Path, target: Path) -> os.stat_result | None:
    """``target``'s stat, or None when it is not there yet (or sits under a file,
    which the caller reports)."""
    try:
        return os.stat(target)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as e:
        raise OutputError(f"cannot write {p}: {_reason(e)}") from None


def check_writable(path: str | os.PathLike, *, directory: bool = False) -> Path:
    """Fails early (before long work) if ``path`` could not be written later.

    ``directory=True``: ``path`` is an output folder; it may exist (as a folder)
    or be creatable.  Returns the resolved path.
    """
    p = Path(path)
    target = _resolve(p)
    st = _stat(p, target)
    if directory:
        if st is not None and not stat.S_ISDIR(st.st_mode):
            raise OutputError(f"cannot write into {p}: it exists and is not a folder")
        probe = target if st is not None else _existing_parent(target)
        if not probe.is_dir():
            raise OutputError(f"cannot write into {p}: {probe} is not a folder")
        if not os.access(probe, os.W_OK | os.X_OK):
            raise OutputError(f"cannot write into {p}: {probe} is not writable")
        return target
    if st is not None:
        if stat.S_ISDIR(st.st_mode):
            raise OutputError(f"cannot write {p}: it is a folder")
        if stat.S_ISCHR(st.st_mode):
            if not os.access(target, os.W_OK):
                raise OutputError(f"cannot write {p}: permission denied")
            return target
        if not stat.S_ISREG(st.st_mode):
            raise OutputError(f"cannot write {p}: not a regular file ({describe_mode(st.st_mode)}); refusing to replace it")
    parent = _existing_parent(target.parent)
    if not parent.is_dir():
        raise OutputError(f"cannot write {p}: {parent} is not a folder")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise OutputError(f"cannot write {p}: folder {parent} is not writable")
    return target


def _existing_parent(p: Path) -> Path:
    while not p.exists() and p != p.parent:
        p = p.parent
    return p


def file_stem(text: str) -> str:
    """A file name made from ``text`` (a pass, module or instruction name) that
    stays in the folder it is written to: letters, digits, ``_`` and inner dots
    only, so ``../`` and ``/`` cannot lead out of it."""
    import re  # lazy: fileio is imported on every hlo start

    stem = re.sub(r"\.{2,}", "_", re.sub(r"[^0-9A-Za-z_.]+", "_", text))
    return re.sub(r"_{2,}", "_", stem).strip("._") or "unnamed"


def describe_mode(mode: int) -> str:
    """What a file that is not a regular file is, in words ("a FIFO")."""
    for test, name in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"), (stat.S_ISBLK, "a block device"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISDIR, "a folder")):
        if test(mode):
            return name
    return "not a regular file"


def make_dirs(path: str | os.PathLike) -> Path:
    """Creates an output folder (and its parents); an OutputError if it cannot."""
    p = Path(path)
    try:
        p.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise OutputError(f"cannot create folder {p}: a file of that name exists") from None
    except OSError as e:
        raise OutputError(f"cannot create folder {p}: {_reason(e)}") from None
    return p


def write_output(path: str | os.PathLike, data: str | bytes) -> Path:
    """Writes ``data`` to ``path`` with the promises in the module docstring.
    Text is written as UTF-8.  Returns the path of the file written."""
    p = Path(path)
    payload = data.encode() if isinstance(data, str) else bytes(data)
    target = _resolve(p)
    st = _stat(p, target)
    if st is not None and stat.S_ISCHR(st.st_mode):
        return _write_in_place(p, target, payload)
    if st is not None and not stat.S_ISREG(st.st_mode):
        what = "it is a folder" if stat.S_ISDIR(st.st_mode) else f"not a regular file ({describe_mode(st.st_mode)}); refusing to replace it"
        raise OutputError(f"cannot write {p}: {what}")
    make_dirs(target.parent)
    try:
        fd, tmp = tempfile.mkstemp(prefix="." + target.name + ".", suffix=".tmp", dir=target.parent)
    except OSError as e:
        raise OutputError(f"cannot write {p}: {_reason(e)}") from None
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(payload)
        if st is not None:
            os.chmod(tmp, stat.S_IMODE(st.st_mode))
        else:
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes it 0600; a new output gets a normal file's mode
        if st is not None and st.st_nlink > 1:
            # Other hard links share this file: rewrite it in place (the data is
            # complete on disk first), so they keep seeing the new contents.
            _write_in_place(p, target, payload)
            os.unlink(tmp)
        else:
            os.replace(tmp, target)
    except OutputError:
        _discard(tmp)
        raise
    except OSError as e:
        _discard(tmp)
        raise OutputError(f"cannot write {p}: {_reason(e)}") from None
    except BaseException:
        _discard(tmp)
        raise
    return target


def _write_in_place(p: Path, target: Path, payload: bytes) -> Path:
    try:
        fd = os.open(target, os.O_WRONLY | os.O_TRUNC)
    except OSError as e:
        raise OutputError(f"cannot write {p}: {_reason(e)}") from None
    try:
        view = memoryview(payload)
        while view:
            n = os.write(fd, view)
            view = view[n:]
    except OSError as e:
        if e.errno != errno.EPIPE:
            raise OutputError(f"cannot write {p}: {_reason(e)}") from None
    finally:
        os.close(fd)
    return target


def _discard(tmp: str) -> None:
    try:
        os.unlink(tmp)
    except FileNotFoundError:
        pass
