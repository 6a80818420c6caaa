"""Rendering DOT with Graphviz's ``dot`` binary (SVG, PNG), and writing files by suffix.

``dot`` has no time bound of its own: a 4k-instruction train step sat in it for
13 minutes.  Every call here has a timeout; past it (or on Ctrl-C) the ``dot``
process is killed, never left running, and ``LayoutTimeout`` says so.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from pathlib import Path
from typing import Iterator, Literal

from hlo_tools.fileio import write_output

from .view import VisualizeError

#: Output formats ``dot`` renders; ``.dot``/``.gv`` are written as text, ``.html`` by ``page``.
RENDERED = ("svg", "png", "pdf")
INSTALL_HINT = "install Graphviz's `dot` (Debian: apt-get install -y graphviz)"
#: Seconds one ``dot`` run may take.  Graphs within the default budget lay out in
#: a few seconds here (bench/viz_speed.py --sweep); past this, the view is too big.
DEFAULT_TIMEOUT = 20.0
_limit: float | None = DEFAULT_TIMEOUT  # what timeout="default" means now (see time_limit)

Timeout = float | None | Literal["default"]


@contextlib.contextmanager
def time_limit(seconds: float | None) -> Iterator[None]:
    """Within the block, ``dot`` runs that do not pass a timeout (the pages'
    ``svg_text`` calls among them, from their worker threads too) get ``seconds``."""
    global _limit
    before, _limit = _limit, seconds
    try:
        yield
    finally:
        _limit = before


class LayoutTimeout(VisualizeError):
    """``dot`` ran past its time limit and was killed."""

    def __init__(self, seconds: float):
        super().__init__(f"Graphviz's dot did not finish within {seconds:g} s and was stopped; "
                         "narrow the view (--around NAME --radius K, --collapse-fusions, smaller --max-nodes/--max-edges)")
        self.seconds = seconds


def dot_binary() -> str | None:
    """Path of the ``dot`` executable, or None."""
    return shutil.which("dot")


def render(dot_source: str, fmt: str = "svg", *, timeout: Timeout = "default") -> bytes:
    """Lays out and renders DOT source with ``dot -T<fmt>``; raises VisualizeError
    when ``dot`` is missing or rejects the source (its message is included), and
    LayoutTimeout after ``timeout`` seconds (None: no limit; "default": DEFAULT_TIMEOUT
    or what ``time_limit`` set)."""
    if timeout == "default":
        timeout = _limit
    if fmt not in RENDERED:
        raise VisualizeError(f"cannot render format {fmt!r}; expected one of {', '.join(RENDERED)}")
    binary = dot_binary()
    if binary is None:
        raise VisualizeError(f"Graphviz's `dot` was not found on PATH: {INSTALL_HINT}")
    proc = subprocess.Popen([binary, f"-T{fmt}"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        out, err = proc.communicate(dot_source.encode(), timeout=timeout)
    except subprocess.TimeoutExpired:
        _stop(proc)
        raise LayoutTimeout(timeout) from None
    except BaseException:  # Ctrl-C (KeyboardInterrupt) or anything else: dot must not outlive us
        _stop(proc)
        raise
    if proc.returncode != 0:
        raise VisualizeError(f"dot rejected the graph: {err.decode(errors='replace').strip()}")
    return out


def _stop(proc: subprocess.Popen) -> None:
    """Kills ``dot`` and reaps it (no zombie, no orphan still laying out)."""
    proc.kill()
    try:
        proc.communicate(timeout=5)
    except (subprocess.TimeoutExpired, ValueError, OSError):  # pipes already closed or stuck: the kill stands
        proc.wait()


def svg_text(dot_source: str, *, timeout: Timeout = "default") -> str:
    """Rendered SVG as text, without the XML prolog (ready to inline in HTML)."""
    svg = render(dot_source, "svg", timeout=timeout).decode()
    return svg[svg.index("<svg"):]


def write_graph(dot_source: str, path: str | os.PathLike, *, timeout: Timeout = "default") -> Path:
    """Writes DOT source or its rendering, by the path's suffix (.dot .gv .svg .png .pdf)."""
    path = Path(path)
    fmt = path.suffix.lstrip(".").lower()
    if fmt in ("dot", "gv"):
        data = dot_source.encode()
    elif fmt in RENDERED:
        data = render(dot_source, fmt, timeout=timeout)
    else:
        raise VisualizeError(f"{path}: unknown output suffix {path.suffix!r}; use .dot, .svg, .png, .pdf or .html")
    write_output(path, data)
    return path
