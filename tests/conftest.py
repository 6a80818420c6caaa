"""Shared fixtures: XLA's conformance modules (../shared/conformance) and the corpus."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

# With the CUDA plugin installed (for deviceless GPU compiles) and no GPU, jax
# would print a cuDNN traceback at start-up; on GPU machines leave it alone.
if not os.path.exists("/dev/nvidiactl"):
    os.environ.setdefault("JAX_PLATFORMS", "cpu")

# pytest-xdist's workers run with COLUMNS=80, which our commands honour (rich folds
# lines at 80); the tests read command output as a file or pipe gets it.
os.environ.pop("COLUMNS", None)

import pytest

import corpus

ROOT = Path(__file__).resolve().parent.parent
# ../shared beside the checkout (what developers and CI have); HLO_SHARED_DIR overrides
SHARED = Path(os.environ.get("HLO_SHARED_DIR") or Path(__file__).resolve().parents[2] / "shared")
CONFORMANCE = SHARED / "conformance"


def pytest_report_header(config) -> str:
    from hlo_tools.scanner import PARSER_PATH

    return f"hlo_tools parser: {PARSER_PATH} path" + ("" if PARSER_PATH == "compiled" else
                                                      " (no compiled core: built without a C compiler, or HLO_PARSER=python)")


def run_hlo(*args, timeout: int = 600) -> subprocess.CompletedProcess:
    """The ``hlo`` command as a user runs it: a fresh process (text output), from
    the checkout, with this process's environment (JAX_PLATFORMS as set above)."""
    return subprocess.run([sys.executable, "-m", "hlo_lab.cli", *map(str, args)], capture_output=True, text=True,
                          env=dict(os.environ), timeout=timeout, cwd=ROOT)


def conformance_labels() -> list[dict]:
    path = CONFORMANCE / "labels.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def accepted_modules() -> list[Path]:
    return [CONFORMANCE / r["file"] for r in conformance_labels() if r["status"] == "accepted" and (CONFORMANCE / r["file"]).exists()]


def rejected_modules() -> list[tuple[Path, dict]]:
    return [(CONFORMANCE / r["file"], r) for r in conformance_labels() if r["status"] != "accepted" and (CONFORMANCE / r["file"]).exists()]


def corpus_stage_texts() -> list[tuple[str, str]]:
    """(label, text) for every stage of every bundled corpus module."""
    out = []
    for entry in corpus.load():
        for stage in entry.files:
            out.append((f"{entry.name}:{stage}", entry.text(stage)))
    return out


@pytest.fixture(scope="session")
def conformance_dir() -> Path:
    if not CONFORMANCE.exists():
        pytest.skip(f"XLA conformance modules not found at {CONFORMANCE} (../shared beside the checkout, or set HLO_SHARED_DIR)")
    return CONFORMANCE


@pytest.fixture(scope="module")
def xla_cpu():
    """The XLA bridge, for tests that run Python passes inside XLA:CPU's pipeline."""
    from xla_bridge import jax_internals  # here, not at the top: the bridge is slow to import; only these tests need it

    if not jax_internals.hook_supported():  # the environment: a jaxlib built without them
        pytest.skip("this jaxlib has no jax.extend.xla pipeline hooks")
    return jax_internals
