"""Module files as users bring them: gzip (corrupt, truncated, bombs), XLA dump
folders with binary ``*.hlo.pb`` and StableHLO ``module.mlir`` files, and the
side files a dump holds, which are skipped by name."""

from __future__ import annotations

import gzip
import os
import subprocess
import sys
from pathlib import Path

import pytest

import hlo_tools
import xla_bridge
from hlo_tools import HloParseError
from hlo_lab.cli import main
from hlo_tools.formats import find_module_proto, gunzip, is_module_file, walk_module_files
from hlo_tools.parser import read_hlo_text
from tests.dump_model import gpu_flags
from tests.test_parser_errors import GOOD

ROOT = Path(__file__).resolve().parent.parent
HOSTILE = ROOT / "tests" / "data" / "hostile"


def _error(path: Path, **kw) -> HloParseError:
    with pytest.raises(HloParseError) as info:
        xla_bridge.read_text(path, **kw)  # every form; the same errors as hlo_tools' for text
    e = info.value
    assert e.source == str(path) and (e.line, e.column) == (1, 1)
    return e


# -- gzip ------------------------------------------------------------------------


def test_corrupt_and_truncated_gzip_are_located_errors(tmp_path):
    assert "corrupt gzip data" in _error(HOSTILE / "corrupt.hlo.gz").message
    assert "truncated gzip" in _error(HOSTILE / "truncgz.hlo.gz").message
    cut = tmp_path / "cut.hlo.gz"
    cut.write_bytes(gzip.compress(GOOD.encode())[:-4])  # the size trailer is missing
    assert "truncated gzip" in _error(cut).message
    junk = tmp_path / "junk.hlo.gz"
    junk.write_bytes(gzip.compress(GOOD.encode()) + b"not gzip")
    assert "trailing data" in _error(junk).message


def test_gzip_members_and_padding_are_read(tmp_path):
    half = len(GOOD) // 2
    two = tmp_path / "two.hlo.gz"
    two.write_bytes(gzip.compress(GOOD[:half].encode()) + gzip.compress(GOOD[half:].encode()) + b"\0" * 8)
    assert read_hlo_text(two) == GOOD


def test_gzip_bomb_stops_at_the_limit(tmp_path, monkeypatch):
    bomb = tmp_path / "bomb.hlo.gz"
    bomb.write_bytes(gzip.compress(b"\0" * (8 << 20)))  # 8 MiB of zeros in about 8 KiB
    e = _error(bomb, max_bytes=1 << 20)
    assert "more than 1,048,576 bytes" in e.message and "HLO_MAX_DECOMPRESSED_BYTES" in e.message
    monkeypatch.setenv("HLO_MAX_DECOMPRESSED_BYTES", str(1 << 16))
    assert "more than 65,536 bytes" in _error(bomb).message
    assert len(gunzip(bomb.read_bytes(), max_bytes=8 << 20)) == 8 << 20  # at the limit is fine


# -- names -----------------------------------------------------------------------

MODULES = [
    "m.hlo", "m.hlo.gz", "m.txt", "m.hlo.txt.gz", "m.hlo.pb", "m.pb", "module.mlir", "m.mlirbc",
    "module_0001.jit_step.before_optimizations.txt", "module_0001.jit_step.before_optimizations.hlo.pb",
    "module_0001.jit_step.cpu_after_optimizations.txt", "module_0001.jit_step.sm_9.0a_gpu_after_optimizations.hlo.pb",
    "module_0001.jit_step.after_spmd_partitioner.txt", "module_0001.jit_step.before_config_assignment.hlo.pb",
    "module_0000.jit_stage.0014.copy-insertion.after_adding_copies_to_resolve_interference.txt",
    "module_0000.jit_stage.0005.simplification.after_pipeline-start.before_algsimp.hlo.pb",
]
SIDE_FILES = [
    "module_0001.jit_step.cpu_after_optimizations-buffer-assignment.txt",
    "module_0001.jit_step.cpu_after_optimizations-buffer-assignment-values.txt",
    "module_0001.jit_step.cpu_after_optimizations-live-range.txt",
    "module_0001.jit_step.cpu_after_optimizations-memory-usage-report.txt",
    "module_0001.jit_step.sm_9.0a_gpu_after_optimizations-memory-usage-report.pb",
    "module_0001.jit_step.debug_options", "module_0001.jit_step.thunk_sequence.txt",
    "module_0001.jit_step.thunk_sequence_after_thunk_passes.txt", "module_0001.jit_step.thunk_metadata.txt",
    "module_0001.jit_step.autotune_results.pbtxt", "module_0001.jit_step.gpu_target_config.pbtxt",
    "module_0001.jit_step.config.pbtxt", "module_0001.jit_step.obj-file.fusion_kernel_module.o",
    "module_0001.jit_step.ir-no-opt.ll", "module_0001.jit_step.ptx", "topology.pb", "compile_options.pb",
    "module_0001.jit_step.sm_9.0_gpu_after_optimizations.priority_fusion_dump.txt",
    "report.html", "g.dot", ".hidden.hlo", "notes.md", "hlo", ".gz",
]


@pytest.mark.parametrize("name", MODULES)
def test_module_names(name):
    assert is_module_file(name)


@pytest.mark.parametrize("name", SIDE_FILES)
def test_side_file_names(name):
    assert not is_module_file(name)


def test_module_files_walks_and_stays_inside(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "a.hlo").write_text(GOOD)
    (tmp_path / ".hidden").mkdir()
    (tmp_path / ".hidden" / "b.hlo").write_text(GOOD)
    (tmp_path / "x.debug_options").write_text("junk")
    outside = tmp_path.parent / f"{tmp_path.name}-outside.hlo"
    outside.write_text(GOOD)
    (tmp_path / "leak.hlo").symlink_to(outside)
    (tmp_path / "inner.hlo").symlink_to(tmp_path / "sub" / "a.hlo")
    os.mkfifo(tmp_path / "pipe.hlo")  # reading it would block forever
    (tmp_path / "away").symlink_to(tmp_path.parent, target_is_directory=True)
    (tmp_path / "dangling.hlo").symlink_to(tmp_path / "gone.hlo")
    walk = walk_module_files(tmp_path)
    assert [p.relative_to(tmp_path).as_posix() for p in walk.files] == ["inner.hlo", "sub/a.hlo"]
    assert {p.name: why for p, why in walk.skipped} == {
        "away": "symlink to a folder outside the folder",
        "dangling.hlo": "cannot read: No such file or directory",
        "leak.hlo": "symlink to a file outside the folder",
        "pipe.hlo": "not a regular file (a FIFO)"}
    assert [p.name for p in walk_module_files(tmp_path, recursive=False).files] == ["inner.hlo"]
    outside.unlink()


# -- binary and StableHLO files from a real dump -----------------------------------


@pytest.fixture(scope="module")
def dump(tmp_path_factory) -> Path:
    """A real --xla_dump_to folder: text, per-pass and proto dumps, XLA:CPU and (with
    the CUDA plugin) a deviceless XLA:GPU compile, and PJRT's module.mlir (tests/dump_model.py)."""
    out = tmp_path_factory.mktemp("dump")
    r = subprocess.run([sys.executable, str(ROOT / "tests" / "dump_model.py"), str(out), "--per-pass", "--proto",
                        *gpu_flags()],  # the deviceless XLA:GPU compile where the CUDA plugin is installed
                       capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-2000:]
    return out


def test_every_module_file_of_a_dump_loads(dump):
    files = walk_module_files(dump).files
    kinds = {p.name.rsplit(".", 1)[-1] for p in files}
    assert {"txt", "pb", "mlir"} <= kinds
    pb = [p for p in files if p.name.endswith(".hlo.pb")]
    assert len(pb) > 50
    for p in pb[:: max(1, len(pb) // 25)]:
        twin = Path(str(p).removesuffix(".hlo.pb") + ".txt")
        m = xla_bridge.load(p)  # a proto: XLA converts it
        hlo_tools.verify(m)
        if twin.exists():  # the proto and the text dump are the same module (the text may print
            t = hlo_tools.load(twin)  # tuple reads as %x#N sugar, so instruction counts may differ)
            assert (m.name, len(m.computations), str(m.entry.root.shape)) == (t.name, len(t.computations), str(t.entry.root.shape))
    for p in [p for p in files if p.name == "module.mlir"]:
        hlo_tools.verify(xla_bridge.load(p))


def test_check_walks_a_dump_and_skips_side_files(dump, capsys):
    assert main(["check", str(dump)]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    checked = {line.split(": ok (")[0] for line in out.splitlines()}
    assert checked == {str(p) for p in walk_module_files(dump).files}
    assert not any("buffer-assignment" in c or "memory-usage-report" in c or c.endswith("topology.pb") for c in checked)


def test_side_file_protos_give_a_clear_error(dump, capsys):
    report = next(dump.glob("*-memory-usage-report.pb"))
    e = _error(report)
    assert "not a serialized HloModuleProto" in e.message
    assert find_module_proto(report.read_bytes()) is None
    assert main(["stats", str(report)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    topology = next(dump.glob("*/topology.pb"))
    assert "not a serialized HloModuleProto" in _error(topology).message


def test_truncated_proto_is_an_error(dump, tmp_path):
    good = next(dump.glob("*train_step.before_optimizations.hlo.pb"))
    cut = tmp_path / "cut.hlo.pb"
    cut.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    assert "not an HLO module" in _error(cut).message
    packed = tmp_path / "m.hlo.pb.gz"
    packed.write_bytes(gzip.compress(good.read_bytes()))
    assert xla_bridge.load(packed).instruction_count == xla_bridge.load(good).instruction_count


def test_the_ir_layer_points_protos_to_the_bridge(dump):
    """hlo_tools has no jax: it names the proto and says what reads it."""
    good = next(dump.glob("*train_step.before_optimizations.hlo.pb"))
    with pytest.raises(HloParseError) as info:
        hlo_tools.load(good)
    assert (info.value.source, info.value.line, info.value.column) == (str(good), 1, 1)
    assert "serialized HloModuleProto" in info.value.message and "xla_bridge.load" in info.value.message


def test_stablehlo_errors_are_located(tmp_path):
    bad = tmp_path / "bad.mlir"
    bad.write_text("module @m {\n  func.func @main( }\n")
    with pytest.raises(HloParseError) as info:
        xla_bridge.load(bad)
    assert (info.value.source, info.value.line) == (str(bad), 2) and info.value.message.startswith("StableHLO:")


def test_import_stays_jax_free_for_text(tmp_path):
    src = tmp_path / "m.hlo.gz"
    src.write_bytes(gzip.compress(GOOD.encode()))
    code = ("import sys, hlo_tools; hlo_tools.load(sys.argv[1]); import hlo_tools.formats; "
            "assert 'jax' not in sys.modules, 'jax was imported'")
    r = subprocess.run([sys.executable, "-c", code, str(src)], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr
