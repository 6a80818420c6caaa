"""The Model Explorer adapter (visualize.model_explorer) in a real Model Explorer
server and headless Chromium: a corpus module profiled by ``hlo profile
--model-explorer`` loads through our adapter, its four overlays (measured time,
predicted time, roofline percent, bytes) are listed, and the totals Model Explorer
computes from them are ours. A screenshot is left in the test's folder."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time

import pytest

import corpus
from tests.conftest import ROOT, run_hlo
from tests.test_visualize_browser import chromium

pytest.importorskip("model_explorer", reason="Model Explorer is not installed (pip install ai-edge-model-explorer)")

OVERLAYS = ("measured time per run (us)", "predicted time per run (us)", "percent of roofline", "bytes accessed per run")


@pytest.fixture(scope="module")
def browser():
    yield from chromium("model-explorer-chromium-")


@pytest.fixture(scope="module")
def profiled(tmp_path_factory):
    d = tmp_path_factory.mktemp("me")
    src = next(corpus.load("llama3-tiny-decode-f32")).path("cpu_after_optimizations")
    r = run_hlo("profile", src, "--reps", "3", "--model-explorer", d / "out", "--json")
    assert r.returncode == 0, r.stderr
    return d, json.loads(r.stdout)


@pytest.fixture(scope="module")
def server(profiled):
    import portpicker

    _, out = profiled
    argv = out["model_explorer"].split()
    port = portpicker.pick_unused_port()
    proc = subprocess.Popen([sys.executable, "-m", "model_explorer", *argv[1:], "--no_open_in_browser",
                             f"--port={port}"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=dict(os.environ, PYTHONPATH=str(ROOT)), cwd=ROOT)
    url, seen, deadline = None, [], time.monotonic() + 120
    while url is None and time.monotonic() < deadline and proc.poll() is None:
        line = proc.stdout.readline()
        seen.append(line)
        m = re.search(rf"http://localhost:{port}/\?data=\S+", line)
        url = m.group() if m else None
    if url is None:
        proc.kill()
        pytest.fail("Model Explorer did not start: " + "".join(seen)[-2000:])
    assert "HLO module (hlo-pass-lab)" in "".join(seen)  # our adapter was loaded
    yield url
    proc.terminate()
    proc.wait(10)


def _text(browser) -> str:
    """The page's text; "" while the page is too busy to answer a script (Model
    Explorer laying out the graph on a loaded machine): the caller's deadline decides."""
    from selenium.common.exceptions import TimeoutException

    try:
        return browser.execute_script("return document.body.innerText")
    except TimeoutException:
        return ""


def test_model_explorer_shows_a_profiled_module_with_its_overlays(browser, server, profiled, tmp_path):
    d, out = profiled
    browser.get(server)
    deadline, text = time.monotonic() + 180, _text(browser)
    while time.monotonic() < deadline and not all(o in text for o in OVERLAYS):
        time.sleep(0.5)
        text = _text(browser)
    assert all(o in text for o in OVERLAYS), text[:2000]
    # the graph was drawn (a canvas), of the entry computation with all its instructions
    entry = json.loads((d / "out" / "measured_time.json").read_text())
    assert browser.execute_script("return document.querySelectorAll('canvas').length") > 0
    assert re.search(r"\d+ nodes", text)
    # Model Explorer's own sum of the first overlay (measured time) is the profile's
    sums = [float(x) for x in re.findall(r"\nSum\t([\d.e+-]+)", text)]
    measured_us = sum(v["value"] for g in entry.values() for v in g["results"].values())
    assert sums and sums[0] == pytest.approx(measured_us, rel=1e-6)
    assert measured_us == pytest.approx(out["joined_s"] * 1e6, rel=0.05)  # the entry's kernels: nearly all the time
    shot = tmp_path / "model_explorer.png"
    browser.save_screenshot(str(shot))
    assert shot.stat().st_size > 10_000
