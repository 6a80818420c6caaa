"""Corpus of real LLM modules, and loaders for any XLA dump folder.

* :func:`load` iterates the bundled modules (see ``manifest.json``),
* :func:`from_dump_dir` reads a ``--xla_dump_to`` folder,
* :func:`list_table` renders either as a table (``hlo corpus list [DIR]``),
* :func:`main_generate` regenerates the corpus (``hlo corpus generate``).

Importing this package never imports jax or keras; only ``corpus.generate`` does.
"""

from __future__ import annotations

import errno
import importlib.util
import io
import os
import subprocess
import sys
from pathlib import Path

from .bundled import CORPUS_DIR, Entry, load, manifest
from .dump import DumpFolder, DumpModule, PassDump, from_dump_dir, read_dump_folder

__all__ = ["CORPUS_DIR", "DumpFolder", "DumpModule", "Entry", "PassDump", "from_dump_dir", "list_table", "load",
           "list_json", "list_rows", "main_generate", "manifest", "generator_python", "read_dump_folder"]

REPO_ROOT = CORPUS_DIR.parent


def _kb(n: int | None) -> str:
    return "-" if n is None else f"{n / 1024:,.0f}K"


def _render(title: str, columns: list[str], rows: list[list[str]]) -> str:
    """Render rows with rich if available, else as aligned plain text."""
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:  # plain fallback
        widths = [max(len(c), *(len(r[i]) for r in rows)) if rows else len(c) for i, c in enumerate(columns)]
        lines = [title, "  ".join(c.ljust(w) for c, w in zip(columns, widths))]
        lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths)) for r in rows]
        return "\n".join(lines) + "\n"
    table = Table(title=title)
    for c in columns:
        table.add_column(c, overflow="fold")
    for r in rows:
        table.add_row(*r)
    buf = io.StringIO()
    Console(file=buf, width=200, force_terminal=False, color_system=None).print(table)
    return buf.getvalue()


def list_rows(dir: str | Path | None = None) -> tuple[str, list[str], list[list[str]]]:  # noqa: A002
    """(title, columns, rows) of the bundled corpus (``dir`` None or a corpus root)
    or of a dump folder: what ``hlo corpus list`` prints, as a table or ``--json``."""
    if dir is None or (Path(dir) / "manifest.json").is_file():
        root = CORPUS_DIR if dir is None else Path(dir)
        rows = []
        for e in load(root=root):
            ins = e.meta.get("instructions", {})
            gz = sum(e.meta.get("gz_bytes", {}).values())
            fus = e.meta.get("gpu_fusions", {}).get("gpu_h100_after_optimizations", {})
            rows.append([
                e.name, e.workload, e.size, "yes" if e.sharded else "", e.dtype,
                str(ins.get("before_optimizations", "-")), str(ins.get("cpu_after_optimizations", "-")),
                str(ins.get("gpu_h100_after_optimizations", "-")),
                str(sum(fus.get("fusion_kinds", {}).values())) if fus else "-",
                "yes" if e.runnable else "", _kb(gz)])
        cols = ["name", "workload", "size", "sharded", "dtype", "instr before", "instr cpu",
                "instr h100", "h100 fusions", "runnable", "gz"]
        return f"corpus: {len(rows)} modules ({root})", cols, rows
    if not Path(dir).is_dir():
        what = "not a folder" if Path(dir).exists() else "no such folder"
        raise NotADirectoryError(errno.ENOTDIR, f"{what} (give an --xla_dump_to folder or a corpus root)", str(dir))
    mods = from_dump_dir(dir)
    rows = []
    for m in mods:
        per_pass = {x.key for x in m.passes}
        # the whole-module stages, as the scan reads them (not a per-pass dump of a
        # pipeline that happens to be called ...-optimizations)
        stages = sorted(k for k in m.stages if k.endswith(("before_optimizations", "after_optimizations")) and k not in per_pass)
        rows.append([f"{m.module_id:04d}", m.name, ", ".join(stages) or "-", str(len(m.passes)), str(len(m.aux))])
    return f"dump: {len(rows)} modules ({dir})", ["id", "name", "stages", "pass dumps", "other files"], rows


def list_table(dir: str | Path | None = None) -> str:  # noqa: A002 - CLI-facing name
    """A table of the bundled corpus (``dir`` None or a corpus root) or of a dump folder."""
    return _render(*list_rows(dir))


def list_json(dir: str | Path | None = None) -> list[dict[str, str]]:  # noqa: A002
    """``hlo corpus list --json``: one object per module, keyed by column name."""
    _, cols, rows = list_rows(dir)
    return [dict(zip(cols, r)) for r in rows]


def generator_python() -> str | None:
    """A Python with the generator's dependencies: this one, else ``.venv-corpus``."""
    if all(importlib.util.find_spec(m) is not None for m in ("jax", "keras", "keras_hub", "optax")):
        return sys.executable
    for cand in (os.environ.get("HLO_CORPUS_PYTHON"), str(REPO_ROOT / ".venv-corpus" / "bin" / "python")):
        if cand and Path(cand).is_file():
            return cand
    return None


def main_generate(only: str | None = None, out: str | None = None) -> int:
    """Regenerate the corpus in a fresh process (it must set XLA_FLAGS before jax starts).

    Returns the generator's exit code. Raises RuntimeError if no Python has its deps.
    """
    py = generator_python()
    if py is None:
        raise RuntimeError(
            "corpus generator dependencies are missing: install the `corpus` extra "
            "(pip install -e .[corpus], see corpus/requirements-generate.txt) or create "
            ".venv-corpus, or point HLO_CORPUS_PYTHON at a Python that has them")
    cmd = [py, "-m", "corpus.generate"]
    if only:
        cmd += ["--only", only]
    if out:
        cmd += ["--out", str(out)]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return subprocess.call(cmd, cwd=str(REPO_ROOT), env=env)
