"""Pass tests written as ``.hlo`` files (tests/hlo/): the input module with its
FileCheck lines inline and a RUN line naming the passes, as XLA's and xDSL's file
tests are. Each runs through ``hlo_tools.testing.assert_rewrite`` (the pass's
``changed`` must agree with the text, the result must verify and XLA must parse it);
a file without CHECK lines says the passes must leave the module as it is. One file
also runs its RUN line as written, through the shell."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from hlo_tools.testing import assert_rewrite
from passes import PassManager, parse_pipeline
from xla_bridge import jax_internals

FILES = sorted((Path(__file__).parent / "hlo").glob("*.hlo"))
RUN = re.compile(r"^// RUN: hlo opt %s --passes (\S+) \| filecheck %s$", re.M)


def checks_in(text: str) -> str:
    return "".join(line.strip()[3:] + "\n" for line in text.splitlines() if line.strip().startswith("// CHECK"))


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_hlo_file(path):
    text = path.read_text()
    run = RUN.search(text)
    assert run, f"{path.name}: no '// RUN: hlo opt %s --passes P | filecheck %s' line"
    assert_rewrite(text, PassManager(parse_pipeline(run.group(1))), checks_in(text) or None,
                   accepted_by=jax_internals.xla_module_from_text)


def test_a_run_line_runs_as_written(tmp_path):
    path = next(p for p in FILES if p.stem.startswith("dce_dead"))
    line = RUN.search(path.read_text()).group(0).removeprefix("// RUN: ")
    hlo = f"{shlex.quote(sys.executable)} -m hlo_lab.cli"
    filecheck = shlex.quote(str(Path(sys.executable).with_name("filecheck")))
    cmd = line.replace("%s", shlex.quote(str(path))).replace("hlo opt", f"{hlo} opt", 1).replace("| filecheck", f"| {filecheck}")
    r = subprocess.run(["bash", "-o", "pipefail", "-c", cmd], cwd=Path(__file__).parent.parent, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    broken = tmp_path / "broken.hlo"  # the same checks against a module the pass cannot clean: FileCheck fails
    broken.write_text(path.read_text().replace("ROOT r = f32[4]{0} abs(p)", "ROOT r = f32[4]{0} abs(d2)"))
    r = subprocess.run(["bash", "-o", "pipefail", "-c", cmd.replace(shlex.quote(str(path)), shlex.quote(str(broken)))],
                       cwd=Path(__file__).parent.parent, capture_output=True, text=True)
    assert r.returncode != 0 and "broken.hlo:18: error: Couldn't match" in r.stderr, r.stderr
