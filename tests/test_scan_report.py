"""The scan report an engineer reads first: the device model follows the dump's
stage and says why, modules are listed slowest first (helper jits below a
threshold counted, not listed), opportunities by predicted time saved, errors
at the top, and the roofline draws the device's roofs and names each kernel's
module. On a real XLA:CPU dump (tests/dump_model.py) and real corpus modules."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import pytest

import corpus
from hlo_lab import scan
from hlo_lab.scan_report import html_page, markdown, split_modules
from hlo_analysis.units import fmt_seconds
from tests.conftest import run_hlo
from tests.dump_model import make_dump

BAD = "HloModule bad\nENTRY e {\n  ROOT r = f32[] frob()\n}\n"


@pytest.fixture(scope="module")
def dump(tmp_path_factory) -> Path:
    """A real XLA:CPU dump of a small jax train step (and its helper jits), plus one broken module file."""
    out = make_dump(tmp_path_factory.mktemp("dump"))
    (out / "module_9999.jit_broken.before_optimizations.txt").write_text(BAD)
    return out


@pytest.fixture(scope="module")
def report(dump, tmp_path_factory) -> dict:
    return scan.scan(dump, tmp_path_factory.mktemp("rep"), jobs=2, progress=False)


@pytest.mark.parametrize("stage, device", [
    ("cpu_after_optimizations", "host"), ("gpu_after_optimizations", "h100"),
    ("sm_9.0a_gpu_after_optimizations", "h100"), ("gpu_h200_after_optimizations", "h200"),
    ("before_optimizations", None), ("module_0001.jit_cpu_step.gpu_after_optimizations.txt", "h100"),
    ("m.cpu_after_optimizations.hlo.gz", "host"), ("module_0001.jit_cpu_step.before_optimizations.txt", None)])
def test_platform_of_stage(stage, device):
    assert scan.platform_of(stage) == device


def test_cpu_dump_defaults_to_the_host_model_and_says_why(report):
    assert report["device_requested"] == "auto" and report["device"] == "host"
    assert {m["device"] for m in report["modules"]} == {"host"}
    (dev,) = report["devices"]
    reasons = " ".join(w["reason"] for w in dev["why"])
    assert "cpu_after_optimizations names XLA:CPU" in reasons and "its module's optimized stage" in reasons
    assert dev["model"] == "host" and dev["bandwidth"]["memory"] > 0 and dev["peak_flops"]["vector"] > 0
    md = markdown(report)
    assert "from each file's stage; `--device` overrides" in md and "cpu\\_after\\_optimizations names XLA\\:CPU" in md


def test_modules_slowest_first_and_helper_jits_hidden(report):
    times = [m["time_s"] for m in report["modules"]]
    assert times == sorted(times, reverse=True)
    assert report["modules"][0]["module"] == "jit_train_step"  # not a seed or a convert
    ((dev, shown, hidden),) = split_modules(report)
    assert shown[0]["module"] == "jit_train_step" and hidden
    assert all(m["time_s"] < 0.01 * shown[0]["time_s"] <= s["time_s"] for m in hidden for s in shown)
    md = markdown(report)
    assert f"{len(hidden)} modules under 1% of the slowest one's predicted time" in md and "--min-share 0" in md
    rows = [line for line in md.splitlines() if line.startswith("| jit")]
    assert len(rows) == len(shown)
    # same-named helper jits (listed with min_share 0) are told apart by their dump module id and file
    cells = [[c.strip() for c in r.split("|")] for r in markdown({**report, "min_share": 0}).splitlines()
             if r.startswith("| jit\\_broadcast\\_in\\_dim ")]
    assert len(cells) == 8 and len({(c[2], c[4]) for c in cells}) == 8
    assert {"module\\_0006\\.jit\\_broadcast\\_in\\_dim", "module\\_0010\\.jit\\_broadcast\\_in\\_dim"} <= {c[2] for c in cells}


def test_opportunities_by_predicted_time_saved(report):
    saved = [g["time_saved_s"] for g in report["top_opportunities"]]
    assert saved == sorted(saved, reverse=True) and saved[0] > 0
    md = markdown(report)
    table = md[md.index("## Top opportunities"):md.index("## Known patterns")]
    shown = [r.split("|")[7].strip() for r in table.splitlines()[4:] if r.startswith("|")]
    assert shown[0] == fmt_seconds(saved[0]).replace(".", "\\.") and len(shown) == min(25, len(saved))


def test_errors_at_the_top_with_a_link(report):
    assert [e["label"] for e in report["errors"]] == ["module_9999.jit_broken/before_optimizations"]
    md, page = markdown(report), html_page(report)
    assert "[1 errors](#errors)" in md and md.index("## Errors") < md.index("## Headroom per module")
    assert '<a href="#errors">1 errors</a>' in page and page.index('id="errors"') < page.index("Headroom per module, slowest first")


def test_roofline_has_roofs_and_hovers_name_kernel_and_module(report):
    page = html_page(report)
    assert page.count('class="roof roof-memory"') >= 1 and page.count('class="roof roof-compute"') >= 2
    m = report["modules"][0]
    kernel = m["points"][0][4]
    titles = re.findall(r"<title>([^<]*)</title></circle>", page)
    assert any(t.startswith(f"{kernel} in {m['label']} [") for t in titles), titles[:3]
    assert all(" in module_" in t for t in titles)


def test_device_flag_wins(dump, tmp_path):
    r = scan.scan(dump, tmp_path / "r", device="h100", jobs=2, progress=False, min_share=0)
    assert {m["device"] for m in r["modules"]} == {"h100"} and r["devices"][0]["why"][0]["reason"] == "--device"
    assert "(`--device`)" in markdown(r) and "click to show" not in html_page(r)  # min_share 0: all listed


def test_mixed_stages_get_a_table_and_a_roofline_each(tmp_path):
    """Files named by their stage, as a corpus folder copied by hand: XLA:CPU on the
    host model, XLA:GPU on the GPU it names, the unoptimized one on h100."""
    e = next(corpus.load("llama3-tiny-decode-f32"))
    folder = tmp_path / "mods"
    folder.mkdir()
    for stage in ("cpu_after_optimizations", "gpu_h100_after_optimizations"):
        (folder / f"decode.{stage}.hlo.gz").write_bytes(gzip.compress(e.text(stage).encode()))
    (folder / "decode.before_optimizations.hlo").write_text(e.text("before_optimizations"))
    r = scan.scan(folder, tmp_path / "r", jobs=2, progress=False)
    assert {m["label"]: m["device"] for m in r["modules"]} == {
        "decode.cpu_after_optimizations.hlo.gz": "host", "decode.gpu_h100_after_optimizations.hlo.gz": "h100",
        "decode.before_optimizations.hlo": "h100"}
    assert [d["name"] for d in r["devices"]] == ["h100", "host"]
    page = html_page(r)
    assert page.count('aria-label="roofline ') == 2 and "<h3>On host</h3>" in page and "<h3>On h100</h3>" in page


def test_cli_scan_prints_the_device_and_why(dump, tmp_path):
    done = run_hlo("scan", dump, "-o", tmp_path / "o", "-q", "-j", "2", "--min-share", "5")
    assert done.returncode == 1, done.stderr  # the broken file
    assert "device model (from each file's stage; --device overrides):" in done.stdout
    assert "\n  host: " in done.stdout and "11 files: cpu_after_optimizations names XLA:CPU" in done.stdout
    saved = json.loads((tmp_path / "o" / "report.json").read_text())
    assert saved["min_share"] == 0.05 and "5% of the slowest" in (tmp_path / "o" / "report.md").read_text()
    done = run_hlo("scan", dump, "-o", tmp_path / "o", "-q", "-j", "2", "--device", "a100", "--json")
    assert json.loads(done.stdout)["device"] == "a100"


def test_a_sharded_module_is_scanned_end_to_end(tmp_path):
    """The bundled sharded train step through `hlo scan`: its communication section
    is written (a NameError there once left the report saying "This scan is running")."""
    e = next(corpus.load("llama3-tiny-train-f32-dp2tp4"))
    folder = tmp_path / "mods"
    folder.mkdir()
    (folder / "train.cpu_after_optimizations.hlo").write_text(e.text("cpu_after_optimizations"))
    done = run_hlo("scan", folder, "-o", tmp_path / "o", "-q", "-j", "1")
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    md = (tmp_path / "o" / "report.md").read_text()
    page = (tmp_path / "o" / "report.html").read_text()
    assert "This scan is running" not in page
    # the communication table's row: time on the target, markdown-escaped parentheses
    assert re.search(r"\| \d+(\.\d+)? [mun]?s \\?\(h100\\?\) \|", md), md
