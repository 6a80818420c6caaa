"""The before/after page in headless Chromium: both graphs and the search box are
there, and searching an instruction highlights it (and its fused counterpart)."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile

import pytest

from hlo_tools.opcode import HloOpcode
from visualize.page import before_after_html
from hlo_lab.samples import jax_pair

CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
FLAGS = ("--headless --no-sandbox --disable-gpu --disable-quic --no-first-run --disable-background-networking "
         "--disable-component-update --disable-sync --window-size=1600,1000").split()


def _ensure_browser() -> str | None:
    """Installs Debian's chromium and chromium-driver when missing (as root, with
    apt-get); returns why not when they cannot be had."""
    if os.path.exists(CHROMIUM) and os.path.exists(CHROMEDRIVER):
        return None
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        return "chromium/chromium-driver missing and not root with apt-get to install them"
    cmd = ["apt-get", "install", "-y", "-q", "chromium", "chromium-driver"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=dict(os.environ, DEBIAN_FRONTEND="noninteractive"))
    if done.returncode != 0 or not os.path.exists(CHROMEDRIVER):
        return f"`{' '.join(cmd)}` failed: {done.stderr.strip()[-300:]}"
    return None


@pytest.fixture(scope="module")
def browser():
    if shutil.which("dot") is None:
        pytest.skip("Graphviz's `dot` is missing (apt-get install -y graphviz)")
    yield from chromium("viz-chromium-")


def chromium(prefix: str):
    """A headless Chromium driver for a module-scoped fixture (``yield from``), or a
    skip saying what is missing; its profile folder is removed afterwards."""
    why = _ensure_browser()
    if why:
        pytest.skip(f"headless Chromium unavailable: {why}")
    webdriver = pytest.importorskip("selenium.webdriver", reason="the selenium package is not installed (pip install selenium)")
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for flag in FLAGS:
        opts.add_argument(flag)
    profile = tempfile.mkdtemp(prefix=prefix)
    opts.add_argument(f"--user-data-dir={profile}")
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)  # no Selenium Manager: no network
    yield driver
    driver.quit()
    shutil.rmtree(profile, ignore_errors=True)


def test_before_after_page_search_highlights(browser, tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    before, after = jax_pair(layers=2)
    page = tmp_path / "fusion.html"
    page.write_text(before_after_html(before, after, summary=[{"pass": "xla-cpu fusion", "changed": True}]))
    browser.get(page.as_uri())

    counts = browser.execute_script(
        "return ['before', 'after'].map(s => document.querySelectorAll('#pane-' + s + ' svg g.node').length)")
    fusions = [i for i in after.entry if i.opcode is HloOpcode.FUSION]  # drawn expanded, as clusters
    assert counts == [len(before.entry), len(after.entry) - len(fusions) + sum(len(f.fused_computation) for f in fusions)]
    box = browser.find_element(By.ID, "search")
    assert box.is_displayed()

    tanh = next(i for i in before.entry if i.opcode is HloOpcode.TANH)
    box.send_keys(tanh.name, Keys.ENTER)
    hits = browser.execute_script("return Array.from(document.querySelectorAll('.hit')).map(e => e.id)")
    assert f"b-{tanh.name}" in hits
    # it was fused: the after graph highlights the tanh inside the fusion that holds it
    after_hits = [h[2:] for h in hits if h.startswith("a-")]
    assert after_hits
    assert any(i.opcode is HloOpcode.TANH for c in after.computations for i in c if i.name in after_hits)
    assert browser.find_element(By.ID, "search-result").text == f"1 in before, {len(after_hits)} in after"

    # the highlight shows: the hit's outline is drawn with the highlight stroke
    stroke = browser.execute_script(
        "return getComputedStyle(document.getElementById(arguments[0]).querySelector('path, polygon, ellipse')).stroke",
        f"b-{tanh.name}")
    assert stroke == "rgb(0, 119, 255)"  # the highlight blue, not the "removed" red
    shot = tmp_path / "fusion.png"
    assert browser.save_screenshot(str(shot))
    assert shot.read_bytes()[:4] == b"\x89PNG" and shot.stat().st_size > 20_000
