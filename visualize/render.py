"""Rendering DOT with Graphviz's ``dot`` binary (SVG, PNG), and writing files by suffix."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from hlo_tools.fileio import write_output

from .view import VisualizeError

#: Output formats ``dot`` renders; ``.dot``/``.gv`` are written as text, ``.html`` by ``page``.
RENDERED = ("svg", "png", "pdf")
INSTALL_HINT = "install Graphviz's `dot` (Debian: apt-get install -y graphviz)"


def dot_binary() -> str | None:
    """Path of the ``dot`` executable, or None."""
    return shutil.which("dot")


def render(dot_source: str, fmt: str = "svg", *, timeout: float | None = None) -> bytes:
    """Lays out and renders DOT source with ``dot -T<fmt>``; raises VisualizeError
    when ``dot`` is missing or rejects the source (its message is included)."""
    if fmt not in RENDERED:
        raise VisualizeError(f"cannot render format {fmt!r}; expected one of {', '.join(RENDERED)}")
    if dot_binary() is None:
        raise VisualizeError(f"Graphviz's `dot` was not found on PATH: {INSTALL_HINT}")
    try:
        done = subprocess.run([dot_binary(), f"-T{fmt}"], input=dot_source.encode(), capture_output=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        raise VisualizeError(f"dot took over {timeout} s; narrow the view (--around, --max-nodes, --collapse-fusions)") from e
    if done.returncode != 0:
        raise VisualizeError(f"dot rejected the graph: {done.stderr.decode(errors='replace').strip()}")
    return done.stdout


def svg_text(dot_source: str) -> str:
    """Rendered SVG as text, without the XML prolog (ready to inline in HTML)."""
    svg = render(dot_source, "svg").decode()
    return svg[svg.index("<svg"):]


def write_graph(dot_source: str, path: str | os.PathLike) -> Path:
    """Writes DOT source or its rendering, by the path's suffix (.dot .gv .svg .png .pdf)."""
    path = Path(path)
    fmt = path.suffix.lstrip(".").lower()
    if fmt in ("dot", "gv"):
        data = dot_source.encode()
    elif fmt in RENDERED:
        data = render(dot_source, fmt)
    else:
        raise VisualizeError(f"{path}: unknown output suffix {path.suffix!r}; use .dot, .svg, .png, .pdf or .html")
    write_output(path, data)
    return path
