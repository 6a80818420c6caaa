"""Other XLA versions beside this one: each jax/jaxlib release in its own virtual
environment, made on demand and cached, where an XLA worker runs our bridge.

    add("0.11.2")          # one venv under versions_dir(): jax, jaxlib, our deps, the CUDA plugin
    python_for("0.11.2")   # its interpreter, for ``worker.using``
    with activated("0.11.2"):
        compile(text, contained=True)   # compiled by XLA 0.11.2, in that version's worker

Why a venv per version and not one process importing several jaxlibs: a process can
load one jaxlib (its C++ extension registers global state), and comparing what two
XLA releases decide on the same module needs both at once.  Our code is not
installed there: the worker reaches it through ``PYTHONPATH`` (``worker``), so
every version runs the same bridge, whose jaxlib fallbacks cover 0.10 to 0.12.

The environment of this process (``.venv``) is a version too: ``current()``; it
needs no set-up.  ``HLO_XLA_VERSIONS_DIR`` moves the folder (tests use a temporary one).
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

from hlo_tools.errors import HloError

from . import worker

#: Where the environments live unless ``HLO_XLA_VERSIONS_DIR`` says otherwise.
REPO_ROOT = Path(__file__).resolve().parent.parent
DIR_ENV = "HLO_XLA_VERSIONS_DIR"
#: Written last by ``add``: an environment without it is half-made and is made again.
MARKER = "hlo-xla-version.json"

_VERSION_RE = re.compile(r"^\d+\.\d+(\.\d+){0,2}$")
#: The CUDA plugin beside jaxlib (deviceless XLA:GPU compiles) and ptxas, as the Makefile installs them.
_PLUGIN = ("jax-cuda12-pjrt=={v}", "jax-cuda12-plugin=={v}", "nvidia-cuda-nvcc-cu12>=12.4,<13")


class VersionError(HloError):
    """A version that cannot be set up or used (not on PyPI, not set up, pip failed);
    the message is one line that says what to do."""


def versions_dir() -> Path:
    return Path(os.environ.get(DIR_ENV) or REPO_ROOT / ".xla-versions")


def current() -> str:
    """The jaxlib version of this process's environment (without importing jax)."""
    return importlib.metadata.version("jaxlib")


@dataclass(frozen=True)
class XlaVersion:
    """One set-up version: ``python`` None for this process's own environment;
    ``gpu``: its CUDA plugin is installed (deviceless XLA:GPU compiles work)."""

    version: str
    python: str | None
    gpu: bool
    path: str

    def as_dict(self) -> dict:
        return {"version": self.version, "python": self.python, "gpu": self.gpu, "path": self.path}


def _own() -> XlaVersion:
    gpu = any(d.metadata["Name"] == "jax-cuda12-plugin" for d in importlib.metadata.distributions())
    return XlaVersion(current(), None, gpu, sys.prefix)


def _read_marker(env: Path) -> XlaVersion | None:
    try:
        info = json.loads((env / MARKER).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(info, dict) or info.get("jaxlib") != env.name:
        return None  # a marker another tool or a crash left: not an environment we set up
    python = env / "bin" / "python"
    if not python.exists():
        return None
    return XlaVersion(info["jaxlib"], str(python), bool(info.get("gpu")), str(env))


def installed() -> list[XlaVersion]:
    """This environment's version first, then each one set up, oldest first."""
    found = [_own()]
    root = versions_dir()
    if root.is_dir():
        envs = [v for v in (_read_marker(p) for p in root.iterdir() if p.is_dir()) if v is not None]
        found += sorted((v for v in envs if v.version != found[0].version), key=lambda v: version_key(v.version))
    return found


def version_key(v: str) -> tuple:
    return tuple(int(x) if x.isdigit() else 0 for x in v.split("."))


def lookup(version: str) -> XlaVersion:
    """The set-up version ``version`` ("current" or "" is this environment's own)."""
    if version in ("", "current", current()):
        return _own()
    check_spelling(version)
    found = _read_marker(versions_dir() / version)
    if found is None:
        raise VersionError(f"jax {version} is not set up here: run `hlo xla add {version}` "
                           f"(set up: {', '.join(v.version for v in installed())})")
    return found


def python_for(version: str) -> str | None:
    """The interpreter of ``version``'s environment (None: this process's own)."""
    return lookup(version).python


@contextlib.contextmanager
def activated(version: str) -> Iterator[XlaVersion]:
    """Within the block, contained calls (``compile(..., contained=True)``...) go to
    ``version``'s worker."""
    v = lookup(version)
    with worker.using(v.python):
        yield v


def check_spelling(version: str) -> None:
    if not _VERSION_RE.match(version):
        raise VersionError(f"{version!r} is not a jax version (expected e.g. 0.11.2)")


# -- set-up -------------------------------------------------------------------------------------------


def project_dependencies() -> list[str]:
    """What our code needs besides jax and jaxlib: pyproject.toml's dependencies
    (the installed package's metadata when there is no checkout)."""
    pyproject = REPO_ROOT / "pyproject.toml"
    if pyproject.exists():
        deps = tomllib.loads(pyproject.read_text())["project"]["dependencies"]
    else:
        deps = [r for r in importlib.metadata.requires("hlo-pass-lab") or [] if "extra ==" not in r]
    return [d for d in deps if re.split(r"[<>=!~\[; ]", d, maxsplit=1)[0].strip().lower() not in ("jax", "jaxlib")]


def available(pip: list[str] | None = None) -> list[str]:
    """jax versions on the package index (``pip index versions jax``), newest first."""
    cmd = (pip or [sys.executable, "-m", "pip"]) + ["index", "versions", "jax", "--disable-pip-version-check"]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.SubprocessError) as e:
        raise VersionError(f"cannot list jax versions on the package index: {e}") from None
    m = re.search(r"Available versions:\s*(.*)", out.stdout)
    if out.returncode != 0 or not m:
        last = (out.stderr.strip().splitlines() or ["no answer"])[-1]
        raise VersionError(f"cannot list jax versions on the package index: {last}")
    return [v.strip() for v in m.group(1).split(",") if v.strip()]


def nearby(version: str, versions: list[str], n: int = 6) -> list[str]:
    """The ``n`` versions closest to ``version`` (same minor release first)."""
    want = version_key(version)

    def distance(v: str) -> tuple:
        k = version_key(v)
        return (k[:2] != want[:2], abs((k + (0, 0, 0))[1] - (want + (0, 0, 0))[1]), tuple(-x for x in k))

    return sorted(sorted(versions, key=distance)[:n], key=version_key, reverse=True)


def _run_step(cmd: list[str], what: str) -> None:
    out = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "PYTHONWARNINGS": "ignore"})
    if out.returncode != 0:
        lines = [ln for ln in (out.stderr + out.stdout).splitlines() if ln.strip() and "WARNING" not in ln]
        raise VersionError(f"{what} failed: {lines[-1].strip() if lines else f'exit status {out.returncode}'}")


def add(version: str, *, say: Callable[[str], None] = print, index: Callable[[], list[str]] = available) -> XlaVersion:
    """Sets up ``version`` (cached: a second call returns at once).  One line per
    step through ``say``.  Raises VersionError for a version that is not on the
    index (naming nearby ones) or a step that fails (the half-made environment goes)."""
    check_spelling(version)
    if version == current():
        say(f"jax {version} is this environment's own ({sys.prefix}): nothing to set up")
        return _own()
    env = versions_dir() / version
    done = _read_marker(env)
    if done is not None:
        say(f"jax {version}: cached ({env})")
        return done
    versions = index()
    if version not in versions:
        raise VersionError(f"jax {version} is not on the package index; nearby: {', '.join(nearby(version, versions))}")
    if env.exists():
        shutil.rmtree(env)  # a half-made one from an interrupted add
    env.parent.mkdir(parents=True, exist_ok=True)
    try:
        say(f"jax {version}: creating {env}")
        _run_step([sys.executable, "-m", "venv", str(env)], "creating the environment")
        pip = [str(env / "bin" / "python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
        say(f"jax {version}: installing jax=={version} jaxlib=={version} and the project's dependencies")
        _run_step(pip + [f"jax=={version}", f"jaxlib=={version}", *project_dependencies()], "pip install jax")
        say(f"jax {version}: installing the CUDA plugin (deviceless XLA:GPU compiles)")
        try:
            _run_step(pip + ["--no-deps", *(p.format(v=version) for p in _PLUGIN)], "pip install the CUDA plugin")
            gpu = True
        except VersionError as e:
            say(f"warning: {e}; deviceless GPU compiles are unavailable for jax {version}")
            gpu = False
    except BaseException:
        shutil.rmtree(env, ignore_errors=True)
        raise
    (env / MARKER).write_text(json.dumps({"jax": version, "jaxlib": version, "gpu": gpu}))
    say(f"jax {version}: ready")
    return _read_marker(env)
