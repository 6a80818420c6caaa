"""The before/after page of a real dump (tests/dump_model.py's train step, before
and after XLA:CPU) in headless Chromium: the totals table at the top says
kernels, flops, bytes and predicted time before vs after; the search highlight
is not the "removed" red; a big single-module page opens at a readable zoom."""

from __future__ import annotations

import pytest

from tests.conftest import run_hlo
from tests.dump_model import make_dump
from tests.test_visualize_browser import browser  # noqa: F401 - the shared Chromium fixture (skips when missing)


@pytest.fixture(scope="module")
def train_step(tmp_path_factory):
    out = make_dump(tmp_path_factory.mktemp("dump"))
    (before,) = out.glob("*jit_train_step.before_optimizations.txt")
    (after,) = out.glob("*jit_train_step.cpu_after_optimizations.txt")
    return before, after


def _cell(browser, row: str, col: int) -> str:
    return browser.execute_script(
        "const r = document.querySelector('#totals tr[data-row=\"' + arguments[0] + '\"]');"
        "return r ? r.children[arguments[1]].textContent : null", row, col)


def test_before_after_page_totals_and_highlight(browser, train_step, tmp_path):  # noqa: F811
    before, after = train_step
    page = tmp_path / "page.html"
    done = run_hlo("viz", str(before), "--after", str(after), "-o", str(page))
    assert done.returncode == 0, done.stderr
    browser.get(page.as_uri())

    rows = browser.execute_script("return Array.from(document.querySelectorAll('#totals tr[data-row]'))"
                                  ".map(r => r.dataset.row)")
    assert rows == ["kernels", "flops", "bytes", "time"]
    # at the top: above both graphs
    top = browser.execute_script("return [document.getElementById('totals').getBoundingClientRect().bottom,"
                                 " document.querySelector('.panes').getBoundingClientRect().top]")
    assert top[0] <= top[1]
    kernels_before, kernels_after = int(_cell(browser, "kernels", 1).replace(",", "")), \
        int(_cell(browser, "kernels", 2).replace(",", ""))
    assert kernels_before > kernels_after > 0  # XLA:CPU fused the train step
    assert _cell(browser, "time", 1).endswith(("us", "ms", " s")) and "roofline" in _cell(browser, "time", 0)
    assert _cell(browser, "bytes", 1).endswith("B") and _cell(browser, "kernels", 3).endswith("x")

    # the search highlight is not the colour of a removed node
    name = browser.execute_script("const g = document.querySelector('#pane-before g.node.removed, #pane-before g.node');"
                                  "return g.id.slice(2)")
    browser.execute_script("window.hloViz.search(arguments[0])", name)
    hit = browser.execute_script(
        "return getComputedStyle(document.querySelector('.hit').querySelector('path, polygon, ellipse')).stroke")
    removed = browser.execute_script(
        "const g = document.querySelector('g.node.removed');"
        "return g ? getComputedStyle(g.querySelector('path, polygon, ellipse')).stroke : 'rgb(214, 39, 40)'")
    assert hit == "rgb(0, 119, 255)" and hit != removed


def test_single_module_page_opens_readable(browser, train_step, tmp_path):  # noqa: F811
    """The train step (196 instructions) fitted to the pane would shrink its labels
    below readable: it opens at one SVG unit per pixel, not fitted (a double-click
    shows it whole)."""
    before, _ = train_step
    page = tmp_path / "one.html"
    done = run_hlo("viz", str(before), "-o", str(page))
    assert done.returncode == 0, done.stderr
    browser.get(page.as_uri())
    view, home, box = browser.execute_script(
        "const p = window.hloViz.panes.before;"
        "return [p.view, p.home, p.vp.getBoundingClientRect()]")
    width = box["width"]
    assert min(width / home["w"], box["height"] / home["h"]) < 0.5  # fitted, 14pt labels would be under 7px
    assert view["w"] == pytest.approx(width, rel=0.01) and view["h"] == pytest.approx(box["height"], rel=0.01)
    root = browser.execute_script("return document.querySelector('#pane-before .viewport svg').getAttribute('viewBox')")
    assert [float(v) for v in root.split()][2] == pytest.approx(width, rel=0.01)
