"""A real XLA dump folder, made during the suite by the jaxlib under test, read
as a user's dump is: every module file loads and prints back byte-for-byte,
`hlo check` passes on the folder, and `hlo scan` and `hlo corpus list` see the
same modules.  The bundled corpus was written with ``as_hlo_text()``; dumps are
printed differently (``%x#N`` operands, per-pass files, protos, reports)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import hlo_tools
import xla_bridge
from hlo_tools.formats import is_module_file
from tests.conftest import run_hlo
from tests.dump_model import gpu_flags, make_dump


@pytest.fixture(scope="module")
def text_dump(tmp_path_factory) -> Path:
    """Text, proto and per-pass dumps of XLA:CPU (and a deviceless XLA:GPU when the plugin is here)."""
    return make_dump(tmp_path_factory.mktemp("dump_text"), "--per-pass", "--proto", *gpu_flags())


@pytest.fixture(scope="module")
def proto_dump(tmp_path_factory) -> Path:
    return make_dump(tmp_path_factory.mktemp("dump_proto"), "--proto", "--no-text", *gpu_flags())


def _module_files(folder: Path, suffix: str) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.name.endswith(suffix) and is_module_file(p))


def test_the_dump_has_what_real_dumps_are_made_of(text_dump):
    texts = [p.read_text() for p in _module_files(text_dump, ".txt")]
    joined = "\n".join(texts)
    assert len(texts) > 100  # per-pass dumps included
    for feature in (" while(", " reduce(", " fusion(", "kind=kLoop", " call(", "argmax", "threefry"):
        assert feature in joined, feature
    assert any("%" in t and "#0" in t for t in texts)  # the `%x#N` operand sugar
    if "--gpu" in gpu_flags():
        assert any("sm_9.0a_gpu_after_optimizations" in p.name for p in text_dump.iterdir())


def test_every_text_module_loads_verifies_and_round_trips_exactly(text_dump):
    files = _module_files(text_dump, ".txt")
    problems = []
    for path in files:
        text = path.read_text()
        try:
            module = hlo_tools.parse(text, source=str(path))
            hlo_tools.verify(module)
        except hlo_tools.HloError as e:
            problems.append(f"{path.name}: {str(e).splitlines()[0]}")
            continue
        if module.to_text() != text:
            problems.append(f"{path.name}: does not print back byte-for-byte")
    assert not problems, f"{len(problems)} of {len(files)} module files:\n" + "\n".join(problems[:20])


def test_every_proto_module_loads(text_dump):
    files = _module_files(text_dump, ".pb")
    assert files
    for path in files:
        module = xla_bridge.load(path)  # XLA converts the proto
        hlo_tools.verify(module)
        twin = path.with_name(path.name.removesuffix(".hlo.pb") + ".txt")
        if twin.exists():  # the same module, written twice by XLA
            # (the text's `%x#N` operands share one GTE per tuple index, the proto
            # may hold several: compare everything else)
            def names(m):
                return sorted(i.name for i in m.instructions() if i.opcode is not hlo_tools.HloOpcode.GET_TUPLE_ELEMENT)

            assert names(module) == names(hlo_tools.load(twin)), path.name


def test_hlo_check_on_the_dump_folder(text_dump):
    r = run_hlo("check", "-q", str(text_dump))
    assert r.returncode == 0, r.stderr[-2000:]
    assert "Traceback" not in r.stderr


@pytest.mark.parametrize("which", ["text", "proto"])
def test_scan_and_corpus_list_agree(which, text_dump, proto_dump, tmp_path):
    folder = text_dump if which == "text" else proto_dump
    listed = run_hlo("corpus", "list", str(folder), "--json")
    assert listed.returncode == 0, listed.stderr[-2000:]
    modules = json.loads(listed.stdout)
    stage_files = sum(len(m["stages"].split(", ")) for m in modules)
    scan = run_hlo("scan", str(folder), "-o", str(tmp_path / "scan"), "--json")
    assert scan.returncode == 0, scan.stderr[-2000:]
    report = json.loads((tmp_path / "scan" / "report.json").read_text())
    assert report["status"] == "complete"
    assert report["errors"] == []
    assert len(modules) >= 10
    assert report["modules_found"] == report["modules_analysed"] == len(modules)
    assert report["files"] == stage_files
