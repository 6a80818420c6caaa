"""The `hlo` command line: exit codes, FILE:LINE:COL messages, atomic writes."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from hlo_lab.cli import main
from tests.test_parser_errors import GOOD


def test_check_ok_and_error(tmp_path, capsys):
    good = tmp_path / "good.hlo"
    good.write_text(GOOD)
    bad = tmp_path / "bad.hlo"
    bad.write_text(GOOD.replace("reduce(p, z)", "reduce(q, z)"))
    assert main(["check", str(good)]) == 0
    assert "ok (6 instructions, 2 computations)" in capsys.readouterr().out
    assert main(["check", str(good), str(bad)]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"{bad}:12:25: operand %q of %r is not defined")
    lines = err.splitlines()
    assert lines[1].strip().startswith("ROOT r = f32[] reduce(q, z)")
    assert lines[2] == " " * 24 + "^"


def test_check_reports_verifier_errors(tmp_path, capsys):
    f = tmp_path / "v.hlo"
    f.write_text(GOOD.replace("ROOT s = f32[] add(x, y)", "ROOT s = s32[] add(x, y)"))
    assert main(["check", str(f)]) == 1
    assert "%s (add): result shape is s32[], operands give f32[]" in capsys.readouterr().err


def test_fmt_writes_canonical_text_atomically(tmp_path, capsys):
    src = tmp_path / "in.hlo"
    src.write_text(GOOD)
    out = tmp_path / "out.hlo"
    assert main(["fmt", str(src), "-o", str(out)]) == 0
    text = out.read_text()
    assert text.startswith("HloModule m\n\n%add (x: f32[], y: f32[]) -> f32[] {")
    umask = os.umask(0)
    os.umask(umask)
    assert out.stat().st_mode & 0o777 == 0o666 & ~umask  # a normal file's mode, not mkstemp's 0600
    assert main(["fmt", str(out)]) == 0
    assert capsys.readouterr().out == text  # canonical text is a fixed point
    # a failing fmt leaves the existing output untouched and no temp files
    src.write_text("HloModule broken {")
    assert main(["fmt", str(src), "-o", str(out)]) == 1
    assert out.read_text() == text
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.hlo", "out.hlo"]


def test_stats_json(tmp_path, capsys):
    src = tmp_path / "in.hlo"
    src.write_text(GOOD)
    assert main(["stats", str(src), "--json"]) == 0
    stats = json.loads(capsys.readouterr().out)
    assert stats["instructions"] == 6 and stats["computations"] == 2
    assert stats["opcodes"]["parameter"] == 3
    assert stats["parameter_bytes"] == 16 and stats["output_bytes"] == 4


def test_console_script_runs(tmp_path):
    src = tmp_path / "in.hlo"
    src.write_text(GOOD)
    r = subprocess.run([sys.executable, "-m", "hlo_lab.cli", "stats", str(src)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "6 instructions in 2 computations" in r.stdout


def test_opt_load_errors_keep_their_exit_status(tmp_path, capsys):
    """A --load file that cannot be imported is bad input (1), an unknown pass name a
    usage error (2), on opt as on bisect/reduce/upstream; neither reads the module."""
    bad = tmp_path / "bad_pass.py"
    bad.write_text("import no_such_module_anywhere\n")
    missing = str(tmp_path / "never_read.hlo")
    assert main(["opt", missing, "--load", str(bad), "--passes", "dce", "-o", str(tmp_path / "o.hlo")]) == 1
    assert "No module named 'no_such_module_anywhere'" in capsys.readouterr().err
    assert main(["opt", missing, "--passes", "no-such-pass", "-o", str(tmp_path / "o.hlo")]) == 2
    assert "unknown pass 'no-such-pass'" in capsys.readouterr().err
