"""Tests for the bundled corpus and the dump-folder loaders.

Uses only the stored modules and jax/jaxlib (no generator dependencies), except
``test_generator_reproduces_a_tiny_module``, which runs when a Python with the
generator's deps exists (the ``corpus`` extra, or ``.venv-corpus``) and skips otherwise.

Cost on 2 cores: parsing every stage with XLA's parser, running every tiny module on
XLA:CPU, and compiling the real-shape modules on XLA:CPU. Real-shape *prefill* and
*decode* modules are all compiled; of the real-shape *train* steps (10-60 s each to
compile) one is compiled by default (``llama3-full-train-bf16``); set
``HLO_CORPUS_FULL=1`` to compile every one. (Each real-shape module's
``cpu_after_optimizations`` stage is itself XLA:CPU's compile output, checked to parse.)
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import corpus
import hlo_tools
from corpus import generate as g
from corpus.dump import is_dump_file_name, is_module_file
from xla_bridge import read_text

REPO = Path(__file__).resolve().parent.parent
ENTRIES = list(corpus.load())
BY_NAME = {e.name: e for e in ENTRIES}
REQUIRED_STAGES = ("before_optimizations", "cpu_after_optimizations", "gpu_h100_after_optimizations")
REQUIRED_FIELDS = ("name", "model", "source_package", "config", "workload", "size", "sharded", "dtype",
                   "files", "sha256", "runnable")
FULL_TRAIN_SAMPLE = {"llama3-full-train-bf16"}
N_SHARDED_DEVICES = 8


# --------------------------------------------------------------------------- helpers


def _xla():
    from jax._src.lib import _jax, xla_client as xc

    return xc, _jax


def _compile_text(text: str, ndev: int = 1) -> tuple[Any, Any, list[Any]]:
    """Compile HLO text on XLA:CPU through XLA's parser and the StableHLO bridge."""
    from jax._src import xla_bridge

    xc, _jax = _xla()
    m = xc.hlo.hlo_module_from_text(text)
    proto = m.as_serialized_hlo_module_proto()
    mlir = _jax.mlir.hlo_to_stablehlo(proto)
    client = xla_bridge.get_backend("cpu")
    devs = client.local_devices()[:ndev]
    assert len(devs) == ndev, f"need {ndev} CPU devices, have {len(client.local_devices())}"
    opts = xc.CompileOptions()
    if ndev > 1:
        opts.num_partitions = ndev
        opts.executable_build_options.use_spmd_partitioning = True
        opts.device_assignment = xc.DeviceAssignment.create(np.arange(ndev).reshape(1, ndev))
    exe = client.compile_and_load(mlir, xc.DeviceList(tuple(devs)), opts)
    shapes = xc.XlaComputation(proto).program_shape().parameter_shapes()
    return exe, devs, shapes


def _inputs(shapes: list[Any], vocab: int) -> list[np.ndarray]:
    """Deterministic inputs: floats in [0, 0.02), token arrays in [0, vocab), int scalars 16."""
    rng = np.random.default_rng(0)
    out = []
    for s in shapes:
        dt, dims = s.numpy_dtype(), tuple(s.dimensions())
        if np.issubdtype(dt, np.integer):
            out.append(np.asarray(16, dt) if dims == () else rng.integers(0, vocab, size=dims).astype(dt))
        else:
            out.append(rng.uniform(0.0, 0.02, size=dims).astype(dt))
    return out


def run_text(text: str, vocab: int, ndev: int = 1) -> bool:
    """Compile and execute HLO text on XLA:CPU; True when every float output is finite."""
    import jax

    exe, devs, shapes = _compile_text(text, ndev)
    host = _inputs(shapes, vocab)
    if ndev == 1:
        outs = exe.execute([jax.device_put(x, devs[0]) for x in host])
    else:
        from jax._src.sharding_impls import GSPMDSharding

        arrs = [jax.device_put(x, GSPMDSharding(tuple(devs), s))
                for x, s in zip(host, exe.get_parameter_shardings())]
        outs = [o[0] for o in exe.execute_sharded(arrs).disassemble_into_single_device_arrays()]
    return all(np.isfinite(np.asarray(o, np.float32)).all() for o in outs
               if np.issubdtype(np.asarray(o).dtype, np.floating) or "bfloat16" in str(o.dtype))


def _params(pred) -> list[Any]:
    return [pytest.param(e, id=e.name) for e in ENTRIES if pred(e)]


# --------------------------------------------------------------------------- manifest


def test_import_does_not_import_jax_or_keras() -> None:
    code = "import sys, corpus, corpus.generate; list(corpus.load()); corpus.list_table(); " \
           "assert not {'jax', 'keras', 'keras_hub'} & set(sys.modules), sorted(sys.modules)"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO)


def test_manifest_complete() -> None:
    man = corpus.manifest()
    assert man["jax"] and man["jaxlib"] and man["packages"]["keras-hub"]
    mods = man["modules"]
    assert len(mods) >= 30
    assert len({m["name"] for m in mods}) == len(mods)
    for m in mods:
        for f in REQUIRED_FIELDS:
            assert f in m, (m["name"], f)
        assert m["workload"] in ("train", "prefill", "decode")
        assert m["size"] in ("tiny", "full")
        assert isinstance(m["sharded"], bool) and isinstance(m["runnable"], bool)
        assert set(REQUIRED_STAGES) <= set(m["files"]), m["name"]
        assert set(m["files"]) == set(m["sha256"]) == set(m["instructions"]) == set(m["text_bytes"]) \
            == set(m["xla_parses"])
        assert m["dtype"] == ("float32" if m["size"] == "tiny" else "bfloat16")
        assert m["jax"] == man["jax"] and m["shapes"]["num_params"] > 0
        for stage, n in m["instructions"].items():
            assert n > 0, (m["name"], stage)
    # 4+ architectures, each with every workload at both sizes
    archs: dict[str, set[tuple[str, str]]] = {}
    for m in mods:
        if not m["sharded"]:
            archs.setdefault(m["architecture"], set()).add((m["workload"], m["size"]))
    full_grid = {(w, s) for w in ("train", "prefill", "decode") for s in ("tiny", "full")}
    assert sum(1 for v in archs.values() if v == full_grid) >= 4, archs
    assert sum(1 for m in mods if m["sharded"] and m["workload"] == "train") >= 2
    assert any("MoE" in m["notes"] or "expert" in m["notes"] for m in mods)


def test_sharded_modules_have_collectives() -> None:
    sharded = [e for e in ENTRIES if e.sharded]
    assert len(sharded) >= 2
    for e in sharded:
        cpu = e.text("cpu_after_optimizations")
        gpu = e.text("gpu_h100_after_optimizations")
        assert re.search(r"\s(all-reduce|all-gather|reduce-scatter)(-start)?\(", cpu), e.name
        assert re.search(r"\s(all-reduce|all-gather|reduce-scatter)-start\(", gpu), e.name
        assert "sharding={devices=[" in e.text("before_optimizations")
        assert e.meta["mesh"]["devices"] == N_SHARDED_DEVICES


@pytest.mark.parametrize("entry", _params(lambda e: True))
def test_sha256_matches(entry: corpus.Entry) -> None:
    for stage in entry.files:
        data = entry.path(stage).read_bytes()
        assert hashlib.sha256(data).hexdigest() == entry.sha256[stage], (entry.name, stage)
        assert entry.verify(stage)
        text = gzip.decompress(data)
        assert hashlib.sha256(text).hexdigest() == entry.meta["text_sha256"][stage]
        assert len(text) == entry.meta["text_bytes"][stage]


def test_corpus_size_under_60mb() -> None:
    total = sum(p.stat().st_size for p in (corpus.CORPUS_DIR / "modules").rglob("*") if p.is_file())
    assert total < 60 * 2**20, total


# --------------------------------------------------------------------------- XLA


# XLA:GPU prints output_to_operand_aliasing on async collective -start ops (sharded
# modules), which the same jaxlib's text parser rejects; the manifest records it.
_ALIASING_ON_START = re.compile(r"(-start\([^\n]*?), output_to_operand_aliasing=\{\{[^}]*\}: \([^)]*\)\}")


@pytest.mark.parametrize("entry", _params(lambda e: True))
def test_every_stage_parses_with_xla(entry: corpus.Entry) -> None:
    """Every stage parses with XLA's parser, except where the manifest records XLA's own
    printer/parser mismatch; those must parse once only that attribute is dropped."""
    xc, _ = _xla()
    for stage in entry.files:
        text = entry.text(stage)
        assert "/work/" not in text and "site-packages" not in text, (entry.name, stage)
        recorded = entry.meta["xla_parses"][stage]
        if recorded is True:
            assert xc.hlo.hlo_module_from_text(text).name, (entry.name, stage)
            continue
        assert 'unexpected attribute "output_to_operand_aliasing"' in recorded, recorded
        assert stage.startswith("gpu_") and entry.sharded and "xla_parse_note" in entry.meta
        with pytest.raises(Exception, match="output_to_operand_aliasing"):
            xc.hlo.hlo_module_from_text(text)
        fixed, n = _ALIASING_ON_START.subn(r"\1", text)
        assert n > 0 and xc.hlo.hlo_module_from_text(fixed).name, (entry.name, stage)


def test_most_stages_parse_unmodified() -> None:
    bad = [(e.name, s) for e in ENTRIES for s, ok in e.meta["xla_parses"].items() if ok is not True]
    assert len(bad) <= 3, bad
    assert all(e.meta["xla_parses"]["before_optimizations"] is True and
               e.meta["xla_parses"]["cpu_after_optimizations"] is True for e in ENTRIES)


@pytest.mark.parametrize("entry", _params(lambda e: True))
def test_gpu_stage_and_fusion_kinds(entry: corpus.Entry) -> None:
    text = entry.text("gpu_h100_after_optimizations")
    fus = entry.meta["gpu_fusions"]["gpu_h100_after_optimizations"]
    # independent recount of fusion kinds from the stored text
    kinds: dict[str, int] = {}
    for line in text.splitlines():
        if " fusion(" in line:
            k = re.search(r"kind=(k\w+)", line)
            if k:
                kinds[k.group(1)] = kinds.get(k.group(1), 0) + 1
    assert kinds == fus["fusion_kinds"]
    assert kinds.get("kLoop", 0) + kinds.get("kInput", 0) > 0
    assert fus["triton_fusions"] + fus["cublas_custom_calls"] > 0, "no GEMM backend recorded"
    assert fus["triton_fusions"] == len(re.findall(r' fusion\([^\n]*"kind":"__triton', text))
    assert "is_scheduled=true" in text.splitlines()[0]


@pytest.mark.parametrize("entry", _params(lambda e: e.size == "tiny" and not e.sharded))
def test_tiny_module_runs_on_cpu(entry: corpus.Entry) -> None:
    assert entry.runnable, entry.meta["run_note"]
    assert run_text(entry.text("before_optimizations"), entry.config["vocabulary_size"])


@pytest.mark.parametrize("entry", _params(lambda e: e.size == "tiny" and e.sharded))
def test_sharded_tiny_module_runs_on_8_cpu_devices(entry: corpus.Entry) -> None:
    assert entry.runnable, entry.meta["run_note"]
    env = dict(os.environ, XLA_FLAGS=f"--xla_force_host_platform_device_count={N_SHARDED_DEVICES}",
               JAX_PLATFORMS="cpu")
    r = subprocess.run([sys.executable, __file__, "--run", str(entry.path("before_optimizations")),
                        str(entry.config["vocabulary_size"]), str(N_SHARDED_DEVICES)],
                       cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and r.stdout.strip().endswith("finite"), r.stdout + r.stderr


def _full_compiled(e: corpus.Entry) -> bool:
    return e.size == "full" and (e.workload != "train" or e.name in FULL_TRAIN_SAMPLE
                                 or os.environ.get("HLO_CORPUS_FULL") == "1")


@pytest.mark.parametrize("entry", _params(_full_compiled))
def test_full_module_compiles_on_cpu(entry: corpus.Entry) -> None:
    assert not entry.runnable
    exe, _, shapes = _compile_text(entry.text("before_optimizations"))
    assert len(shapes) > 0 and exe.hlo_modules()


def test_every_full_module_has_cpu_compile_output() -> None:
    for e in ENTRIES:
        if e.size == "full":
            text = e.text("cpu_after_optimizations")
            assert "is_scheduled=true" in text.splitlines()[0], e.name


# --------------------------------------------------------------------------- dumps

_DUMP_SCRIPT = textwrap.dedent("""
    import jax, jax.numpy as jnp
    def step(w, x):
        return jnp.tanh(x @ w).sum(axis=0)
    jax.jit(step)(jnp.ones((8, 8)), jnp.ones((4, 8))).block_until_ready()
""")


def _dump(tmp_path: Path, extra: str = "") -> Path:
    d = tmp_path / "dump"
    env = dict(os.environ, XLA_FLAGS=f"--xla_dump_to={d} {extra}".strip(), JAX_PLATFORMS="cpu")
    subprocess.run([sys.executable, "-c", _DUMP_SCRIPT], check=True, env=env, timeout=120)
    return d


def test_from_dump_dir_real_dump(tmp_path: Path) -> None:
    d = _dump(tmp_path)
    mods = [m for m in corpus.from_dump_dir(d) if m.name == "jit_step"]
    assert len(mods) == 1, [m.name for m in corpus.from_dump_dir(d)]
    m = mods[0]
    assert m.before_optimizations is not None and m.after_optimizations is not None
    assert "cpu_after_optimizations" in m.stages
    assert m.path("after_optimizations") == m.stages["cpu_after_optimizations"]
    xc, _ = _xla()
    for stage in ("before_optimizations", "after_optimizations"):
        text = m.text(stage)
        assert xc.hlo.hlo_module_from_text(text).name == "jit_step"
    assert not any("buffer-assignment" in k for k in m.stages)  # side files go to aux
    assert any("buffer-assignment" in k for k in m.aux)
    table = corpus.list_table(d)
    assert "jit_step" in table and "before_optimizations" in table


def test_from_dump_dir_pass_dumps_and_protos(tmp_path: Path) -> None:
    d = _dump(tmp_path, "--xla_dump_hlo_as_proto --xla_dump_hlo_as_text --xla_dump_hlo_pass_re=.*")
    m = next(m for m in corpus.from_dump_dir(d) if m.name == "jit_step")
    assert m.passes and [p.index for p in m.passes] == sorted(p.index for p in m.passes)
    assert m.stages["before_optimizations"].suffix == ".txt"  # text preferred over .pb
    pbs = sorted(d.glob("module_*.jit_step.before_optimizations.hlo.pb"))
    assert pbs, sorted(p.name for p in d.iterdir())
    assert read_text(pbs[0]) == read_text(m.stages["before_optimizations"]) or \
        "HloModule jit_step" in read_text(pbs[0])
    p = m.passes[-1]
    assert p.key in m.stages and m.text(p.key).startswith("HloModule")


def test_from_dump_dir_proto_only(tmp_path: Path) -> None:
    d = _dump(tmp_path, "--xla_dump_hlo_as_proto")
    m = next(m for m in corpus.from_dump_dir(d) if m.name == "jit_step")
    assert m.stages["before_optimizations"].name.endswith(".pb")
    assert m.text("before_optimizations").startswith("HloModule jit_step")
    assert m.text("after_optimizations").startswith("HloModule jit_step")


# File names an XLA:GPU dump (jax-cuda12-plugin 0.12, compile-only H100) writes for module 1.
_GPU_DUMP_NAMES = (
    "after_spmd_partitioner.txt", "autotune_results.pbtxt", "before_config_assignment.txt",
    "before_optimizations.txt", "config.pbtxt", "debug_options", "gpu_target_config.pbtxt",
    "sm_9.0a_gpu_after_optimizations-buffer-assignment.txt",
    "sm_9.0a_gpu_after_optimizations-memory-usage-report.txt",
    "sm_9.0a_gpu_after_optimizations.txt", "thunk_sequence.txt",
)


def test_from_dump_dir_gpu_file_names(tmp_path: Path) -> None:
    """Classification of XLA:GPU dump names (contents: a real CPU dump's HLO text)."""
    text = read_text(_dump(tmp_path).glob("module_*.jit_step.before_optimizations.txt").__next__())
    d = tmp_path / "gpu"
    d.mkdir()
    for n in _GPU_DUMP_NAMES:
        (d / f"module_0001.jit_step.{n}").write_text(text)
    (m,) = corpus.from_dump_dir(d)
    assert (m.module_id, m.name) == (1, "jit_step")
    assert set(m.stages) == {"before_optimizations", "sm_9.0a_gpu_after_optimizations",
                             "after_spmd_partitioner", "before_config_assignment"}
    assert m.after_optimizations.name.endswith("sm_9.0a_gpu_after_optimizations.txt")
    assert "thunk_sequence.txt" in m.aux and "debug_options" in m.aux


def test_dump_names_modules_side_files_and_pass_pipelines(tmp_path: Path) -> None:
    """Names only (real XLA:GPU names): a per-pass dump whose pipeline is called
    ``collective-optimizations`` is a pass, not an ``*_optimizations`` stage, and
    a dump's side files are not module files."""
    names = ["module_0001.jit_decode.0018.collective-optimizations.after_pipeline-start.before_all-gather-combiner.txt",
             "module_0001.jit_decode.before_optimizations.txt", "module_0001.jit_decode.sm_9.0a_gpu_after_optimizations.txt",
             "module_0001.jit_decode.priority_fusion_dump.txt", "module_0001.jit_decode.thunk_metadata.pb",
             "module_0001.jit_decode.sm_9.0a_gpu_after_optimizations-memory-usage-report.pb"]
    for n in names:
        (tmp_path / n).write_text("")
    (m,) = corpus.from_dump_dir(tmp_path)
    assert [p.key for p in m.passes] == ["0018.collective-optimizations.after_pipeline-start"]
    assert sorted(k for k in m.stages if k.endswith("optimizations") and k not in {p.key for p in m.passes}) == [
        "before_optimizations", "sm_9.0a_gpu_after_optimizations"]
    assert [n for n in names if is_module_file(n)] == names[:3]
    assert all(is_dump_file_name(n) for n in names) and not is_dump_file_name("jit_decode.txt")


def test_from_dump_dir_errors(tmp_path: Path) -> None:
    with pytest.raises(NotADirectoryError):
        corpus.from_dump_dir(tmp_path / "missing")
    assert corpus.from_dump_dir(tmp_path) == []


def test_list_table_bundled() -> None:
    table = corpus.list_table()
    assert f"{len(ENTRIES)} modules" in table
    assert ENTRIES[0].name in table


def test_entry_module_parses_into_ir() -> None:
    e = BY_NAME["llama3-tiny-decode-f32"]
    m = e.module("before_optimizations")
    assert isinstance(m, hlo_tools.Module) and m.instruction_count == e.meta["instructions"]["before_optimizations"]


def test_load_pattern_and_errors() -> None:
    tiny = list(corpus.load("*-tiny-*"))
    assert tiny and all(e.size == "tiny" for e in tiny)
    with pytest.raises(KeyError):
        ENTRIES[0].path("no_such_stage")


# --------------------------------------------------------------------------- generator


def test_generator_text_helpers() -> None:
    """The generator's regex measurements and path stripping, on small real-format text."""
    text = textwrap.dedent("""\
        HloModule m, is_scheduled=true

        FileNames
        1 "/abs/site-packages/keras/src/layers/layer.py"
        2 "%s/corpus/generate.py"

        FileLocations
        1 {file_name_id=1 function_name_id=1 line=10 end_line=10 column=1 end_column=2}
        2 {file_name_id=2 function_name_id=2 line=99 end_line=99 column=3 end_column=4}

        %%f (p: f32[4]) -> f32[4] {
          %%p = f32[4]{0} parameter(0)
          ROOT %%e = f32[4]{0} exponential(%%p)
        }

        ENTRY %%main (a: f32[4]) -> f32[4] {
          %%a = f32[4]{0} parameter(0)
          %%x = f32[4]{0} fusion(%%a), kind=kLoop, calls=%%f
          %%g = f32[4]{0} fusion(%%x), kind=kCustom, calls=%%f, backend_config={"fusion_backend_config":{"kind":"__triton_nested_gemm_fusion"}}
          ROOT %%c = f32[4]{0} custom-call(%%g), custom_call_target="__cublas$gemm"
        }
        """) % g.REPO_ROOT
    out = g.strip_paths(text)
    assert '"keras/src/layers/layer.py"' in out and '"corpus/generate.py"' in out and "/abs/" not in out
    assert "function_name_id=2 line=0 end_line=0 column=0 end_column=0}" in out
    assert "function_name_id=1 line=10 " in out
    assert g.instruction_count(out) == 6
    fk = g.fusion_kinds(out)
    assert fk["fusion_kinds"] == {"kCustom": 1, "kLoop": 1}
    assert fk["triton_fusions"] == 1 and fk["cublas_custom_calls"] == 1
    assert g.collective_counts("  %a = f32[2] all-reduce-start(%b), x\n  %c = f32[2] all-gather(%d)") == \
        {"all-reduce-start": 1, "all-gather": 1}
    assert len(g.all_jobs()) == len(ENTRIES)
    assert {j.name for j in g.all_jobs()} == set(BY_NAME)



def test_generator_reproduces_a_tiny_module(tmp_path: Path) -> None:
    """Regenerate one tiny module and check the stored text is reproduced byte for byte."""
    if corpus.generator_python() is None:  # the environment: keras-hub and friends live in their own venv
        pytest.skip("no Python with the corpus generator's dependencies (pip install -e .[corpus], or .venv-corpus)")
    name = "llama3-tiny-decode-f32"
    assert corpus.main_generate(only=name, out=str(tmp_path)) == 0
    man = json.loads((tmp_path / "manifest.json").read_text())
    (new,) = man["modules"]
    old = BY_NAME[name].meta
    for stage in REQUIRED_STAGES:
        assert new["text_sha256"][stage] == old["text_sha256"][stage], stage
    assert new["runnable"] and new["config"] == old["config"]


if __name__ == "__main__":  # helper for the 8-device subprocess test
    if len(sys.argv) == 5 and sys.argv[1] == "--run":
        text = gzip.decompress(Path(sys.argv[2]).read_bytes()).decode()
        ok = run_text(text, int(sys.argv[3]), int(sys.argv[4]))
        print("finite" if ok else "non-finite")
        sys.exit(0 if ok else 1)
    sys.exit(2)
