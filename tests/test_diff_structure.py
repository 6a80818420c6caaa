"""``hlo diff`` matches by structure: the same program compiled twice by stock
XLA:CPU, once with every instruction renamed (and no metadata: nothing to match
by name), diffs as kept, not as removed plus added."""

from __future__ import annotations

import pytest

import corpus
from hlo_tools import parse
from visualize.diff import ADDED, REMOVED, diff_modules


def _renamed(module):
    """Every instruction renamed ``v<k>`` (no stem in common with XLA's names), metadata dropped."""
    out = module.clone()
    k = 0
    for comp in out.computations:
        for instr in list(comp):
            instr.set_attribute("metadata", None)
            comp.rename_instruction(instr, f"v{k}")
            k += 1
    return out


@pytest.fixture(scope="module")
def pair():
    from xla_bridge import compile as xla_compile  # the bridge: the one place XLA is reached

    source = parse(next(corpus.load("llama3-tiny-decode-f32")).text("before_optimizations"))
    a = xla_compile(source, "cpu", "stock", contained=True).optimized_text
    b = xla_compile(_renamed(source), "cpu", "stock", contained=True).optimized_text
    return parse(a), parse(b)


def test_renamed_instructions_are_kept_not_removed(pair):
    before, after = pair
    old = diff_modules(before, after, structure=False)
    new = diff_modules(before, after)
    assert len(old.names(REMOVED)) > 20  # names and metadata alone: "removed"
    c = new.counts()
    assert c[REMOVED] == 0 and c[ADDED] == 0, c
    assert c["kept"] + c["changed"] >= 0.95 * len(new.before_status), c
    # every matched pair agrees on opcode and shape (layout aside)
    by_name = {i.name: i for i in after.instructions()}
    for b in before.instructions():
        a = by_name.get(new.counterpart.get(b.name, ""))
        if a is not None:
            assert a.opcode_text == b.opcode_text and \
                a.shape.to_text(print_layout=False) == b.shape.to_text(print_layout=False), (b.name, a.name)


def test_a_real_change_still_shows(pair):
    """Structure does not hide an edit: one multiply turned into an add shows as changed."""
    before, after = pair
    text = after.to_text()
    assert " multiply(" in text
    d = diff_modules(before, parse(text.replace(" multiply(", " add(", 1)))
    assert d.counts()["changed"] >= 1 and d.changes


def test_a_diff_shows_itself_in_a_notebook():
    entry = next(e for e in corpus.load() if e.name == "llama3-tiny-decode-f32")
    d = diff_modules(parse(entry.text("before_optimizations")), parse(entry.text("cpu_after_optimizations")))
    page = d._repr_html_()
    assert page.startswith("<div><b>diff jit_decode -&gt; jit_decode</b><table>")
    fusions = next(a for o, b, a in d.opcode_counts if o == "fusion")
    assert f"<td>fusion</td><td>0</td><td>{fusions}</td><td>+{fusions}</td>" in page
    assert f"fused {d.counts()['fused']}" in page
