"""Devices, roofline, opportunities, the corpus scan and its report, the CLI.

The scan tests use a sample of the real corpus (tiny modules; the whole corpus is
bench/scan_speed.py's job) plus deliberately broken files."""

from __future__ import annotations

import gzip
import importlib.util
import json
import math
import shutil
from pathlib import Path

import pytest

import corpus
import hlo_tools
from hlo_analysis import devices, opportunities, roofline
from hlo_lab import scan
from hlo_analysis.compare import compare_decisions
from hlo_lab.cli import main as hlo_main

SOFTMAX = """HloModule softmax

%max (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %m = f32[] maximum(%a, %b)
}

%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}

ENTRY %e {
  %x = f32[64,1024]{1,0} parameter(0)
  %ninf = f32[] constant(-inf)
  %mx = f32[64]{0} reduce(%x, %ninf), dimensions={1}, to_apply=%max
  %bmx = f32[64,1024]{1,0} broadcast(%mx), dimensions={0}
  %sub = f32[64,1024]{1,0} subtract(%x, %bmx)
  %exp = f32[64,1024]{1,0} exponential(%sub)
  %zero = f32[] constant(0)
  %sum = f32[64]{0} reduce(%exp, %zero), dimensions={1}, to_apply=%add
  %bsum = f32[64,1024]{1,0} broadcast(%sum), dimensions={0}
  ROOT %out = f32[64,1024]{1,0} divide(%exp, %bsum)
}
"""


# -- devices -------------------------------------------------------------------
def test_gpu_specs_are_cited_and_consistent():
    h100, h200 = devices.load("h100"), devices.load("H200_SXM")
    assert h100.sms == h200.sms == 132 and h100.memory_bandwidth == 3.35e12 and h200.memory_bandwidth == 4.8e12
    assert h100.matmul_peak("bf16") == 989.4e12 and h100.matmul_peak("f8e4m3fn") == 1978.9e12
    assert h100.matmul_peak("f32") == 494.7e12  # TF32: XLA's default precision for f32 dots
    assert devices.load("a100").matmul_peak("f8e5m2") == 312e12  # no FP8 on A100: the BF16 rate
    for d in devices.GPUS.values():
        assert d.source and d.launch_overhead_s == 1e-6


def test_host_is_measured_once_and_cached():
    h = devices.host()
    assert h.kind == "cpu" and math.isfinite(h.memory_bandwidth) and h.memory_bandwidth > 0
    assert math.isfinite(h.peak_flops["f32"]) and h.peak_flops["f32"] > 0
    assert devices.host_cache_path().is_file()
    assert devices.host() == h  # the second call reads the cache


def test_user_spec_from_json(tmp_path):
    spec = json.loads(devices.load("h100").to_json())
    spec.update(name="my-gpu", memory_bandwidth=1e12)
    path = tmp_path / "gpu.json"
    path.write_text(json.dumps(spec))
    assert devices.load(str(path)).memory_bandwidth == 1e12
    path.write_text(json.dumps({**spec, "hbm": 1}))
    with pytest.raises(ValueError, match="unknown device spec fields: hbm"):
        devices.load(str(path))
    with pytest.raises(ValueError, match="unknown device 'tpu9'"):
        devices.load("tpu9")


# -- roofline ------------------------------------------------------------------
def test_roofline_bounds_and_categories():
    m = hlo_tools.parse(
        "HloModule m\n\nENTRY %e {\n  %a = bf16[4096,4096]{1,0} parameter(0)\n  %b = bf16[4096,4096]{1,0} parameter(1)\n"
        "  %d = bf16[4096,4096]{1,0} dot(%a, %b), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
        "  %c = bf16[4096,4096]{0,1} copy(%d)\n  %s = bf16[2]{0} slice(%a), slice={[0:1], [0:2]}\n"
        "  ROOT %t = (bf16[4096,4096]{0,1}, bf16[2]{0}) tuple(%c, %s)\n}\n")
    r = roofline.roofline(m, devices.load("h100"))
    k = {x.name: x for x in r.kernels}
    assert set(k) == {"d", "c", "s"}  # parameters and the tuple emit no kernel
    assert (k["d"].category, k["d"].bound) == ("matmul", "compute")
    assert k["d"].compute_s == pytest.approx(2 * 4096**3 / 989.4e12)
    assert (k["c"].category, k["c"].bound) == ("copy", "memory")
    assert k["s"].bound == "launch"
    assert r.time_s == pytest.approx(sum(x.time_s for x in r.kernels))
    assert r.by_category()["matmul"].headroom_s == pytest.approx(k["d"].launch_s)


# -- opportunities -------------------------------------------------------------
def test_softmax_edges_signatures_and_legality():
    m = hlo_tools.parse(SOFTMAX)
    opps = opportunities.find(m, devices.load("h100"))
    pc = {(o.producer, o.consumer): o for o in opps if o.kind == "producer-consumer"}
    e = pc[("exp", "sum")]
    assert e.signature == "reduce<-exponential<-subtract<-broadcast"
    assert e.pattern == "softmax" and e.legal is True
    # %exp has two users: fusing it into the reduce saves the reduce's read only.
    assert e.bytes_saved == 4 * 64 * 1024
    sub = pc[("sub", "exp")]  # sole user: the write and the read are saved
    assert sub.bytes_saved == 2 * 4 * 64 * 1024 and sub.time_saved_s > 0
    sib = [o for o in opps if o.kind == "sibling" and o.producer == "exp"]
    assert sib and sib[0].bytes_saved == 4 * 64 * 1024
    groups = opportunities.group(opps)
    assert groups[0].bytes_saved >= groups[-1].bytes_saved
    assert sum(g.count for g in groups) == len(opps)


#: A while loop with an elementwise pair in its body and one after it (tests/data).
_LOOP = (Path(__file__).parent / "data" / "scanned_loop.hlo").read_text()


def test_examples_outside_the_entry_name_their_computation():
    """An opportunity in a loop body is shown with the computation the file has
    it in; one in the entry as is."""
    m = hlo_tools.parse(_LOOP)
    groups = opportunities.group(opportunities.find(m, devices.load("h100")), entry=m.entry.name)
    examples = [x for g in groups for x in g.examples]
    assert "e->n in %body" in examples and "a->b" in examples, examples


# -- scan ----------------------------------------------------------------------
def _sample_folder(tmp_path):
    """Three real modules, one corrupt, one truncated, one not gzip at all."""
    folder = tmp_path / "mods"
    folder.mkdir()
    for e in corpus.load("llama3-tiny-*"):
        if e.workload in ("decode", "prefill"):
            shutil.copy(e.path("cpu_after_optimizations"), folder / f"{e.name}.hlo.gz")
    e = next(corpus.load("gemma2-tiny-train-f32"))
    (folder / "gemma2-train-before.hlo").write_text(e.text("before_optimizations"))
    text = e.text("cpu_after_optimizations")
    (folder / "truncated.hlo").write_text(text[: len(text) // 3])
    (folder / "corrupt.hlo").write_text(text.replace(" multiply(", " multiplyy(", 1))
    (folder / "broken.hlo.gz").write_bytes(gzip.compress(b"x")[:-4])
    return folder


def test_scan_reports_bad_files_and_scans_the_rest(tmp_path):
    folder = _sample_folder(tmp_path)
    out = tmp_path / "report"
    r = scan.scan(folder, out, device="h100", jobs=2, progress=False)
    assert r["modules_scanned"] == 3 and r["cached"] == 0
    errs = {e["label"]: e["error"] for e in r["errors"]}
    assert set(errs) == {"truncated.hlo", "corrupt.hlo", "broken.hlo.gz"}
    assert "unknown opcode 'multiplyy'" in errs["corrupt.hlo"] and "corrupt.hlo:" in errs["corrupt.hlo"]
    assert "truncated.hlo:" in errs["truncated.hlo"]
    saved = json.loads((out / "report.json").read_text())
    assert saved["errors"] == r["errors"] and len(saved["modules"]) == 3
    md = (out / "report.md").read_text()
    assert "## Errors" in md and "multiplyy" in md and "## Headroom per module" in md
    page = (out / "report.html").read_text()
    assert "<svg" in page and "<circle" in page and "<script" not in page and "http" not in page.replace(
        'xmlns="http://www.w3.org/2000/svg"', "")
    before = next(m for m in r["modules"] if m["label"] == "gemma2-train-before.hlo")
    assert {"softmax", "RMSNorm", "RoPE"} <= set(before["opportunities"]["patterns"])

    again = scan.scan(folder, out, device="h100", jobs=1, progress=False)  # resumable: all from cache
    assert again["cached"] == 3 and again["modules_scanned"] == 3
    assert [m["cost"] for m in again["modules"]] == [m["cost"] for m in r["modules"]]


def test_pre_optimization_modules_show_the_known_patterns(tmp_path):
    """The train step has all five: softmax, RMSNorm, SwiGLU, RoPE and the AdamW update."""
    r = scan.analyze_text(next(corpus.load("llama3-tiny-train-f32")).text("before_optimizations"),
                          label="llama3-tiny-train", device="h100")
    pats = r["opportunities"]["patterns"]
    assert {"softmax", "RMSNorm", "SwiGLU", "RoPE", "optimizer update"} <= set(pats)
    assert all(p["bytes_saved"] > 0 for p in pats.values())


def test_discover_bundled_corpus_and_stage_filter():
    tasks = scan.discover(None, stages=["before_optimizations"])
    assert len(tasks) == len(list(corpus.load())) and all(t.stage == "before_optimizations" for t in tasks)


@pytest.mark.skipif(importlib.util.find_spec("ray") is None,
                    reason="ray is an optional extra (pip install 'hlo-pass-lab[ray]')")
@pytest.mark.xdist_group("ray")  # one local Ray cluster at a time (`make test` runs in workers)
def test_scan_on_ray(tmp_path):
    """The Ray engine gives the process pool's report, errors included, on a local cluster it starts and stops."""
    import ray

    folder = tmp_path / "two"
    folder.mkdir()
    shutil.copy(next(corpus.load("llama3-tiny-decode-f32")).path("cpu_after_optimizations"), folder / "d.hlo.gz")
    (folder / "bad.hlo").write_text("HloModule x\nENTRY e {\n  ROOT r = f32[] frob()\n}\n")
    r = scan.scan(folder, tmp_path / "ray", use_ray=True, jobs=2, progress=False, cache=False)
    p = scan.scan(folder, tmp_path / "pool", jobs=2, progress=False, cache=False)
    assert r["engine"] == "ray" and p["engine"] == "process-pool" and not ray.is_initialized()
    assert r["modules_scanned"] == p["modules_scanned"] == 1
    assert [e["label"] for e in r["errors"]] == [e["label"] for e in p["errors"]] == ["bad.hlo"]
    assert r["top_opportunities"] == p["top_opportunities"] and r["top_opportunities"]
    assert r["patterns"] == p["patterns"]


# -- CLI -----------------------------------------------------------------------
def test_cli_analyze_and_scan(tmp_path, capsys):
    e = next(corpus.load("llama3-tiny-decode-f32"))
    path = tmp_path / "m.hlo"
    path.write_text(e.text("cpu_after_optimizations"))
    assert hlo_main(["analyze", str(path), "--device", "host", "--json", "--compare-xla"]) == 0
    r = json.loads(capsys.readouterr().out)
    for k in ("flops", "bytes accessed"):
        assert abs(r["cost"][k] - r["xla_cost"][k]) <= 0.01 * abs(r["xla_cost"][k])
    assert hlo_main(["analyze", str(path), "--device", "nope"]) == 1
    assert "unknown device 'nope'" in capsys.readouterr().err
    (tmp_path / "bad.hlo").write_text("HloModule x\nENTRY e {\n  ROOT r = f32[] frob()\n}\n")
    assert hlo_main(["scan", str(tmp_path), "-o", str(tmp_path / "rep"), "-q", "--jobs", "1"]) == 1
    captured = capsys.readouterr()
    assert "1 modules, 1 errors" in captured.out and "bad.hlo" in captured.err
    assert (tmp_path / "rep" / "report.html").is_file()


# -- compare_decisions ---------------------------------------------------------
def test_compare_decisions_xla_gpu_vs_xla_cpu_fusions():
    e = next(corpus.load("llama3-tiny-train-f32"))
    gpu, cpu = e.module("gpu_h100_after_optimizations"), e.module("cpu_after_optimizations")
    c = compare_decisions(gpu, cpu, devices.load("h100"), names=("gpu", "cpu"))
    assert c.a.kernels == len(roofline.roofline(gpu, devices.load("h100")).kernels)
    assert c.a.kernels < c.b.kernels  # XLA:GPU fuses more than XLA:CPU
    assert c.differing and all(a != b for _, a, b in c.differing)
    same = compare_decisions(gpu, gpu, devices.load("h100"))
    assert same.differing == () and same.speedup_b_over_a == 1.0
