"""Hostile input, round two (issue 40): a folder given to a command is read
through the one folder walk, so nothing outside it is read (a corpus manifest
naming ``../`` or an absolute path, a symlink in a dump folder) and every gzip
read goes through the one bounded decompressor (a bomb is one located line)."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import corpus
from hlo_lab.cli import main
from hlo_lab.regress import sources
from hlo_tools.errors import HloParseError

SMALL = """HloModule small

ENTRY main {
  x = f32[4] parameter(0)
  ROOT n = f32[4] negate(x)
}
"""


def _corpus(root: Path, stage_file: str) -> Path:
    """A one-module corpus folder whose manifest names ``stage_file``."""
    root.mkdir(parents=True, exist_ok=True)
    rec = {"name": "m", "model": "m", "source_package": "x", "config": {}, "workload": "decode", "size": "tiny",
           "sharded": False, "dtype": "f32", "files": {"before_optimizations": stage_file},
           "sha256": {"before_optimizations": ""}, "runnable": True}
    (root / "manifest.json").write_text(json.dumps({"modules": [rec]}))
    return root


@pytest.fixture
def secret(tmp_path) -> Path:
    """A module file outside the corpus folder that must never be read."""
    p = tmp_path / "secret.hlo.txt.gz"
    p.write_bytes(gzip.compress(SMALL.encode()))
    return p


@pytest.mark.parametrize("how", ["dotdot", "absolute", "symlink"])
def test_a_manifest_path_outside_the_corpus_is_refused(how, tmp_path, secret, capsys):
    root = tmp_path / "c"
    if how == "dotdot":
        name = "../secret.hlo.txt.gz"
    elif how == "absolute":
        name = str(secret)
    else:
        (root / "modules").mkdir(parents=True)
        (root / "modules" / "link.hlo.txt.gz").symlink_to(secret)
        name = "modules/link.hlo.txt.gz"
    _corpus(root, name)
    with pytest.raises(HloParseError) as e:
        sources(str(root))
    assert "outside the corpus folder" in e.value.message and e.value.source.endswith("manifest.json")
    assert main(["regress", str(root), "--versions", "current,current", "--backend", "cpu", "--no-measure"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "manifest.json:1:1:" in err[0] and "outside the corpus folder" in err[0], err


def test_a_manifest_path_inside_the_corpus_is_read(tmp_path):
    root = tmp_path / "c"
    (root / "modules").mkdir(parents=True)
    (root / "modules" / "m.hlo.txt.gz").write_bytes(gzip.compress(SMALL.encode()))
    _corpus(root, "modules/m.hlo.txt.gz")
    [src] = sources(str(root))
    assert src.text == SMALL


def test_a_corpus_gzip_bomb_stops_at_the_limit(tmp_path, monkeypatch, capsys):
    root = tmp_path / "c"
    (root / "modules").mkdir(parents=True)
    (root / "modules" / "m.hlo.txt.gz").write_bytes(gzip.compress(b" " * (4 << 20)))  # 4 MiB in ~4 KiB
    _corpus(root, "modules/m.hlo.txt.gz")
    monkeypatch.setenv("HLO_MAX_DECOMPRESSED_BYTES", str(1 << 20))
    assert main(["regress", str(root), "--versions", "current,current", "--backend", "cpu", "--no-measure"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "m.hlo.txt.gz:1:1:" in err[0] and "more than 1,048,576 bytes" in err[0], err


def test_a_bomb_that_does_not_fit_in_memory_is_one_located_line(tmp_path):
    """Under the decompression limit but over the memory the process may use
    (RLIMIT_AS): the MemoryError becomes the located error, not a traceback."""
    bomb = tmp_path / "bomb.hlo.gz"
    bomb.write_bytes(gzip.compress(b" " * (768 << 20), compresslevel=1))
    code = ("import resource, sys; resource.setrlimit(resource.RLIMIT_AS, (600 << 20, 600 << 20))\n"
            "from hlo_tools.errors import HloParseError\nfrom hlo_tools.parser import read_hlo_text\n"
            "try:\n    read_hlo_text(sys.argv[1])\nexcept HloParseError as e:\n    print(e.format())\n")
    env = dict(os.environ, HLO_MAX_DECOMPRESSED_BYTES=str(1 << 30))
    r = subprocess.run([sys.executable, "-c", code, str(bomb)], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.startswith(f"{bomb}:1:1: gzip data does not fit in memory"), r.stdout


def _dump_with_outside_link(tmp_path: Path, secret: Path) -> Path:
    d = tmp_path / "dump"
    d.mkdir()
    (d / "module_0001.jit_f.before_optimizations.txt").write_text(SMALL)
    (d / "module_0002.jit_g.before_optimizations.txt").symlink_to(secret)
    (d / "module_0002.jit_g.0000.cpu.after_pipeline-start.before_x.txt").symlink_to(secret)
    return d


def test_a_dump_folder_symlink_out_of_it_is_not_read_and_is_listed(tmp_path, secret, capsys):
    d = _dump_with_outside_link(tmp_path, secret)
    folder = corpus.read_dump_folder(d)
    assert [m.name for m in folder.modules] == ["jit_f"]
    assert {p.name for p, _ in folder.skipped} == {"module_0002.jit_g.before_optimizations.txt",
                                                    "module_0002.jit_g.0000.cpu.after_pipeline-start.before_x.txt"}
    assert [s.name for s in sources(str(d))] == ["module_0001.jit_f"]
    assert main(["regress", str(d), "--versions", "current,current", "--backend", "cpu", "--no-measure",
                 "--no-record", "--json"]) == 0
    cap = capsys.readouterr()
    assert [m["module"] for m in json.loads(cap.out)["modules"]] == ["module_0001.jit_f"]
    assert cap.err.count("symlink to a file outside the folder") == 2, cap.err


@pytest.mark.parametrize("command", ["passes-dump", "fusion-log"])
def test_passes_dump_and_fusion_log_list_what_they_do_not_read(command, tmp_path, secret, capsys):
    d = _dump_with_outside_link(tmp_path, secret)
    assert main([command, str(d)]) == 2  # jit_f has no pass dumps nor fusion log; jit_g's is not read
    err = capsys.readouterr().err
    skipped = [ln for ln in err.splitlines() if "skipped" in ln]
    assert len(skipped) == 2 and all("symlink to a file outside the folder" in ln for ln in skipped), err
    assert "jit_g" not in err.replace("module_0002.jit_g", "")
