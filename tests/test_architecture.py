"""The layers of docs/architecture.md hold: import-linter checks the contracts in
pyproject.toml, on the tree and on copies of it with one forbidden import added
(so that the check is known to fail when it should)."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("hlo_lab", "corpus", "xla_bridge", "visualize", "passes", "hlo_analysis", "hlo_tools")
LINT = Path(sys.executable).with_name("lint-imports")


def lint(root: Path) -> subprocess.CompletedProcess:
    """import-linter on the packages under ``root``, with the project's contracts."""
    return subprocess.run([str(LINT), "--no-cache", "--config", str(root / "pyproject.toml")], cwd=root,
                          env={**os.environ, "PYTHONPATH": str(root)}, capture_output=True, text=True, timeout=300)


def copy_tree(dest: Path) -> Path:
    """The library's Python files and pyproject.toml, without the corpus' modules."""
    for pkg in PACKAGES:
        shutil.copytree(ROOT / pkg, dest / pkg, ignore=shutil.ignore_patterns("modules", "__pycache__", "*.gz"))
    shutil.copy(ROOT / "pyproject.toml", dest / "pyproject.toml")
    return dest


def test_the_tree_keeps_every_contract():
    result = lint(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "3 kept, 0 broken" in result.stdout


@pytest.mark.parametrize("module, line, broken", [
    # the IR reaching up into the passes
    ("hlo_tools/ir.py", "import passes.dce", "hlo_tools is not allowed to import passes"),
    # an analysis reaching up into a transform, hidden inside a function
    ("hlo_analysis/cost.py", "def _late():\n    from passes.fusion import priority\n", "hlo_analysis is not allowed to import passes"),
    # a library module importing the application
    ("visualize/dot.py", "from hlo_lab import cli", "visualize is not allowed to import hlo_lab"),
    # jax outside the XLA bridge
    ("passes/dce.py", "import jax", "passes is not allowed to import jax"),
    # a pass reaching the XLA bridge (what registry.py once did for --load files)
    ("passes/registry.py", "def _late():\n    from xla_bridge import worker\n", "passes is not allowed to import xla_bridge"),
    # an analysis measuring with XLA (what devices.py once did for the host)
    ("hlo_analysis/devices.py", "from xla_bridge.measure import Measurement", "hlo_analysis is not allowed to import xla_bridge"),
    # a picture reading the corpus (what visualize/samples.py once did)
    ("visualize/view.py", "import corpus", "visualize is not allowed to import corpus"),
    # the bridge reaching up into the corpus
    ("xla_bridge/measure.py", "import corpus", "xla_bridge is not allowed to import corpus"),
])
def test_an_upward_import_breaks_the_check(tmp_path, module, line, broken):
    root = copy_tree(tmp_path)
    path = root / module
    path.write_text(path.read_text() + "\n" + line + "\n")
    result = lint(root)
    assert result.returncode != 0
    assert broken in result.stdout, result.stdout
    assert f"{module[:-3].replace('/', '.')} ->" in result.stdout


def test_the_copy_alone_passes(tmp_path):
    """The copy the tests above break is itself clean: their failures come from the added line."""
    result = lint(copy_tree(tmp_path))
    assert result.returncode == 0, result.stdout


@pytest.mark.parametrize("package", ["passes", "hlo_analysis", "visualize", "hlo_tools"])
def test_the_pure_packages_load_no_bridge_and_no_jax(package):
    """In a fresh process, importing a package under the bridge (and every module in
    it) loads no ``xla_bridge``, ``corpus`` or jax module: a pass author's code is pure
    Python over the IR."""
    probe = (f"import importlib, pkgutil, sys, {package}\n"
             f"for m in pkgutil.walk_packages({package}.__path__, '{package}.'):\n"
             "    importlib.import_module(m.name)\n"
             "print(' '.join(sorted(m for m in sys.modules if m.split('.')[0] in ('xla_bridge', 'corpus', 'jax', 'jaxlib'))))")
    result = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == [], f"import {package} loaded {result.stdout}"


def _metrics():
    """bench/architecture_metrics.py, the one scanner of in-repo imports."""
    spec = importlib.util.spec_from_file_location("architecture_metrics", ROOT / "bench" / "architecture_metrics.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_jax_internals_are_reached_from_two_bridge_modules_only():
    """Every ``jax._src`` import sits in ``xla_bridge.jax_internals`` or
    ``xla_bridge.stablehlo`` (import-linter cannot name a subpackage of jax), so a
    jax release that moves one is fixed in one place."""
    import ast

    found = []
    for path in sorted((ROOT / "xla_bridge").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            found += [(path.stem, n) for n in names if n.startswith("jax._src")]
    assert {stem for stem, _ in found} == {"jax_internals", "stablehlo"}, found


def test_no_import_cycles_between_modules():
    """Imports inside functions included: a lazy import no longer hides a cycle."""
    metrics = _metrics()
    graph, _ = metrics.scan(metrics.library_files())
    assert metrics.cycles(graph) == []


def test_a_function_local_import_of_our_own_modules_says_why():
    """Each in-repo import placed inside a function carries a comment on its line
    (the measured start-up cost it saves, for the `hlo` command's subcommands)."""
    metrics = _metrics()
    modules = metrics.library_files()
    _, local = metrics.scan(modules)
    silent = []
    for where, line, _ in local:
        path = ROOT / where.rsplit(":", 1)[0]
        if "#" not in path.read_text().splitlines()[line - 1]:
            silent.append(where)
    assert not silent, f"function-local imports without a reason on their line: {silent}"
