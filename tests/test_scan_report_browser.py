"""The scan report of a real XLA:CPU dump in headless Chromium: the roofline's
roof lines are drawn, hovering a point names its kernel and module, the module
rows are sorted slowest first (hidden helper jits one click away), and the
header's error count links to the errors near the top."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hlo_lab import scan
from tests.dump_model import make_dump
from tests.test_visualize_browser import chromium


@pytest.fixture(scope="module")
def browser():
    """As tests/test_visualize_browser.py's (same Chromium, flags and skips), without Graphviz: this page has none."""
    yield from chromium("scan-chromium-")


@pytest.fixture(scope="module")
def page(tmp_path_factory) -> tuple[Path, dict]:
    folder = make_dump(tmp_path_factory.mktemp("dump"))
    (folder / "module_9999.jit_broken.before_optimizations.txt").write_text("HloModule b\nENTRY e {\n  ROOT r = f32[] frob()\n}\n")
    out = tmp_path_factory.mktemp("report")
    scan.scan(folder, out, jobs=2, progress=False)
    return out / "report.html", json.loads((out / "report.json").read_text())


def test_roof_lines_are_drawn_inside_the_plot(browser, page):
    path, report = page
    browser.get(path.as_uri())
    roofs = browser.execute_script("""
        const svg = document.querySelector('svg[aria-label^="roofline"]');
        const frame = svg.querySelectorAll('rect')[1].getBoundingClientRect();
        return Array.from(svg.querySelectorAll('line.roof')).map(l => {
            const b = l.getBoundingClientRect();
            return {cls: l.getAttribute('class'), title: l.querySelector('title').textContent, w: b.width, h: b.height,
                    inside: b.left >= frame.left - 1 && b.right <= frame.right + 1 && b.top >= frame.top - 1
                            && b.bottom <= frame.bottom + 1, shown: getComputedStyle(l).visibility === 'visible'};
        });""")
    dev = report["devices"][0]
    memory = [r for r in roofs if r["cls"] == "roof roof-memory"]
    compute = [r for r in roofs if r["cls"] == "roof roof-compute"]
    assert len(memory) == len(dev["bandwidth"]) and len(compute) == len(dev["peak_flops"])
    assert all(r["inside"] and r["shown"] for r in roofs)
    assert all(r["w"] > 50 and r["h"] > 50 for r in memory)  # a diagonal, not a dot
    assert all(r["w"] > 20 and r["h"] < 3 for r in compute)  # flat
    assert any(r["title"].startswith("memory bandwidth") for r in memory)


def test_hover_names_kernel_and_module(browser, page):
    from selenium.webdriver.common.action_chains import ActionChains

    path, report = page
    browser.get(path.as_uri())
    dots = browser.find_elements("css selector", "svg circle.k")
    assert len(dots) >= 50
    dot = dots[len(dots) // 2]
    browser.execute_script("arguments[0].scrollIntoView({block: 'center'})", dot)
    ActionChains(browser).move_to_element(dot).perform()
    hovered = browser.execute_script("""
        const h = document.querySelector('circle.k:hover');
        return h && {title: h.querySelector('title').textContent, stroke: getComputedStyle(h).strokeWidth};""")
    assert hovered and hovered["stroke"] == "2px", hovered
    kernels = {(p[4], m["label"]) for m in report["modules"] for p in m["points"]}
    title = hovered["title"]
    assert any(title.startswith(f"{k} in {label} [") for k, label in kernels), title
    assert "module_" in title and "flop/B" in title


def test_module_rows_sorted_by_time_and_hidden_ones_one_click_away(browser, page):
    path, report = page
    browser.get(path.as_uri())
    rows = browser.execute_script("""
        return Array.from(document.querySelectorAll('table[id^="modules-"]')).map(t => ({id: t.id,
            shown: t.checkVisibility(),
            rows: Array.from(t.querySelectorAll('tbody tr')).map(r => [Number(r.dataset.timeS), r.cells[1].textContent])}));""")
    listed, hidden = rows
    assert listed["id"] == "modules-host" and hidden["id"] == "modules-host-hidden"
    times = [t for t, _ in listed["rows"]]
    assert times == sorted(times, reverse=True) and len(times) >= 2
    assert listed["rows"][0][1] == "module_0018.jit_train_step"  # the train step on top, not a helper jit
    assert listed["shown"] and not hidden["shown"]  # collapsed until asked
    assert max(t for t, _ in hidden["rows"]) < 0.01 * times[0] <= min(times)
    browser.find_element("css selector", "details.hidden-modules summary").click()
    assert browser.execute_script("return document.getElementById('modules-host-hidden').checkVisibility()")


def test_error_count_links_to_errors_near_the_top(browser, page):
    path, _ = page
    browser.get(path.as_uri())
    link = browser.find_element("css selector", 'a[href="#errors"]')
    assert link.text == "1 errors"
    y = browser.execute_script("""return [document.getElementById('errors'), document.querySelector('table[id^="modules-"]')]
                                  .map(e => e.getBoundingClientRect().top + window.scrollY)""")
    assert y[0] < y[1]  # before the module table
    link.click()
    assert browser.execute_script("return location.hash") == "#errors"
    assert "unknown opcode 'frob'" in browser.find_element("css selector", "#errors + table").text
