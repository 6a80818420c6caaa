"""Architecture figures for the closing note of a structural change.

Prints, for the library packages (not tests, not bench): lines of code, the in-repo
imports placed inside a function (and how many of those carry a comment saying why),
the import cycles between modules, counting every import (function-local ones too,
since they are what hide a cycle), the imports that go up the layer order (the
contract in pyproject.toml, or ``--layers``), the largest file, the modules whose
name repeats their folder (``xla_bridge/runner.py``), and which ``xla_bridge`` and
jax modules ``import passes`` and ``import <analysis>`` load in a fresh process.

    python bench/architecture_metrics.py [--json] [--layers top,...,bottom]
"""

from __future__ import annotations

import argparse
import ast
import json
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def contract_layers() -> list[str]:
    """The layers contract of pyproject.toml, top first."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    return next(c["layers"] for c in config["contracts"] if c["type"] == "layers")


PACKAGES = tuple(contract_layers())


def library_files() -> dict[str, Path]:
    """Module name -> file, for every library module in the tree."""
    found: dict[str, Path] = {}
    for pkg in PACKAGES:
        base = ROOT / pkg
        if not base.is_dir():
            continue
        for path in sorted([*base.rglob("*.py"), *base.rglob("*.pyx")]):  # .pyx: a compiled module (Cython)
            if "modules" in path.relative_to(ROOT).parts:
                continue
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def _resolve(module: str, node: ast.ImportFrom | ast.Import, is_package: bool) -> list[str]:
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    base = node.module or ""
    if node.level:
        pkg = module.split(".") if is_package else module.split(".")[:-1]
        pkg = pkg[: len(pkg) - (node.level - 1)]
        base = ".".join(pkg + ([base] if base else []))
    return [base] + [f"{base}.{a.name}" for a in node.names]


def _imported(module: str, node: ast.ImportFrom | ast.Import, is_package: bool, modules: dict[str, Path]) -> list[str]:
    """What an import statement imports, as grimp counts it: ``from pkg import sub``
    imports the submodule ``pkg.sub`` (not ``pkg`` itself) when ``sub`` is a module."""
    names = _resolve(module, node, is_package)
    if isinstance(node, ast.Import):
        return names
    base, subs = names[0], names[1:]
    picked = [s for s in subs if s in modules]
    return picked + ([base] if len(picked) < len(subs) else [])


def _in_repo(target: str, modules: dict[str, Path]) -> str | None:
    while target:
        if target in modules:
            return target
        target = target.rpartition(".")[0]
    return None


def scan(modules: dict[str, Path]) -> tuple[dict[str, set[str]], list[tuple[str, int, bool]]]:
    """Import graph (every import) and the function-local in-repo imports."""
    graph: dict[str, set[str]] = {m: set() for m in modules}
    local: list[tuple[str, int, bool]] = []
    for module, path in modules.items():
        if path.suffix == ".pyx":
            continue  # Cython: it cimports C-level declarations, not our modules
        source = path.read_text()
        lines = source.splitlines()
        tree = ast.parse(source)
        is_package = path.name == "__init__.py"

        def visit(node: ast.AST, in_function: bool) -> None:
            for child in ast.iter_child_nodes(node):
                nested = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
                if isinstance(child, (ast.Import, ast.ImportFrom)):
                    targets = {t for name in _imported(module, child, is_package, modules) if (t := _in_repo(name, modules))}
                    targets.discard(module)
                    graph[module] |= targets
                    if targets and in_function:
                        near = lines[max(0, child.lineno - 3): child.lineno]
                        local.append((f"{path.relative_to(ROOT)}:{child.lineno}", child.lineno, any("#" in ln for ln in near)))
                visit(child, nested)

        visit(tree, False)
    return graph, local


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = [0]
    sys.setrecursionlimit(10000)

    def strong(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in graph:
        if v not in index:
            strong(v)
    return found


def upward_imports(graph: dict[str, set[str]], layers: list[str]) -> list[str]:
    """Imports from a module to one of a higher layer (top first in ``layers``)."""
    rank = {pkg: i for i, pkg in enumerate(layers)}
    return sorted(f"{a} -> {b}" for a, targets in graph.items() for b in targets
                  if a.split(".")[0] in rank and b.split(".")[0] in rank
                  and rank[b.split(".")[0]] < rank[a.split(".")[0]])


def stutters(modules: dict[str, Path]) -> list[str]:
    """Modules whose file name starts with the name (or stem) of their folder."""
    found = []
    for name, path in modules.items():
        if path.name == "__init__.py":
            continue
        folder = path.parent.name
        stems = {folder, folder.split("_")[0], folder.rsplit("_", 1)[-1]}
        if any(path.stem == s or path.stem.startswith(s + "_") for s in stems if len(s) > 2):
            found.append(name)
    return sorted(found)


def loaded_by(package: str) -> list[str]:
    """The ``xla_bridge``/``corpus``/jax modules a fresh ``import package`` loads."""
    probe = (f"import sys; import {package}; "
             "print('\\n'.join(sorted(m for m in sys.modules if m.split('.')[0] in ('xla_bridge', 'corpus', 'jax', 'jaxlib'))))")
    out = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    return out.split()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--layers", help="layer order to judge imports by, top first (default: pyproject's contract)")
    args = parser.parse_args()
    layers = args.layers.split(",") if args.layers else list(PACKAGES)
    modules = library_files()
    graph, local = scan(modules)
    loops = cycles(graph)
    up = upward_imports(graph, layers)
    sizes = {str(p.relative_to(ROOT)): len(p.read_text().splitlines()) for p in modules.values()}
    largest = max(sizes, key=sizes.get)
    stutter = stutters(modules)
    pure = [pkg for pkg in ("passes", "hlo_analysis", "hlo_analysis") if pkg in PACKAGES]
    loads = {pkg: loaded_by(pkg) for pkg in pure}
    loc = {pkg: sum(len(p.read_text().splitlines()) for m, p in modules.items() if m.split(".")[0] == pkg) for pkg in PACKAGES}
    figures = {
        "modules": len(modules),
        "lines": sum(loc.values()),
        "lines_by_package": {k: v for k, v in loc.items() if v},
        "function_local_imports": len(local),
        "function_local_imports_with_reason": sum(1 for *_, why in local if why),
        "cycles": len(loops),
        "modules_in_cycles": sum(len(c) for c in loops),
        "cycle_members": loops,
        "layers": layers,
        "upward_imports": len(up),
        "upward_import_edges": up,
        "largest_file": largest,
        "largest_file_lines": sizes[largest],
        "names_repeating_folder": len(stutter),
        "names_repeating_folder_modules": stutter,
        "bridge_modules_loaded": {pkg: len(v) for pkg, v in loads.items()},
    }
    if args.json:
        print(json.dumps(figures, indent=2))
        return 0
    print(f"library modules        {figures['modules']}")
    print(f"lines of code          {figures['lines']}  " + "  ".join(f"{k}={v}" for k, v in figures["lines_by_package"].items()))
    print(f"function-local imports {figures['function_local_imports']} in-repo ({figures['function_local_imports_with_reason']} with a comment nearby)")
    print(f"import cycles          {figures['cycles']} ({figures['modules_in_cycles']} modules)")
    for c in loops:
        print("  " + " <-> ".join(c))
    print(f"upward imports         {len(up)} against {' > '.join(layers)}")
    for edge in up[:12]:
        print("  " + edge)
    if len(up) > 12:
        print(f"  ... {len(up) - 12} more")
    print(f"largest file           {largest} ({sizes[largest]} lines)")
    print(f"names repeating folder {len(stutter)}: " + " ".join(s.rsplit('.', 1)[-1] for s in stutter))
    for pkg, mods in loads.items():
        print(f"import {pkg:<15} loads {len(mods)} xla_bridge/corpus/jax modules")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
