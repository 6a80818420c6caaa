"""visualize: DOT/SVG of real modules, focus options, the diff, the page, the CLI."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
import xml.etree.ElementTree as ET

import pytest

import hlo_tools
from hlo_lab.cli import main
from hlo_tools.opcode import HloOpcode
from hlo_analysis.fusion_kind import fusion_kind
from hlo_tools.outline import outline_fusion
from visualize import FocusOptions, VisualizeError, diff_modules, format_diff, select
from visualize.dot import to_dot
from visualize.page import before_after_html
from visualize.render import render
from hlo_lab.samples import corpus_module, jax_pair

# The environment: the graphviz Python package is a dependency, its `dot` binary a system package.
needs_dot = pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz's `dot` is missing (apt-get install -y graphviz)")
SVG = "{http://www.w3.org/2000/svg}"


def drawn_ids(dot_source: str) -> tuple[list[str], list[str]]:
    """(node ids, fusion cluster ids) of the SVG that `dot` renders: the DOT must parse."""
    root = ET.fromstring(render(dot_source, "svg"))
    nodes, clusters = [], []
    for g in root.iter(SVG + "g"):
        cls = (g.get("class") or "").split()
        if "node" in cls:
            nodes.append(g.get("id"))
        elif "cluster" in cls and "fusion-cluster" in cls:
            clusters.append(g.get("id"))
    return nodes, clusters


def assert_each_once(view, dot_source: str) -> None:
    nodes, clusters = drawn_ids(dot_source)
    assert len(nodes) == len(set(nodes)) and len(clusters) == len(set(clusters))
    expected_nodes = {i.name for i in view.drawn_instructions()} - set(view.expanded)
    assert set(nodes) == expected_nodes
    assert set(clusters) == set(view.expanded)


SMALL = [("llama3-tiny-prefill-f32", "before_optimizations"), ("llama3-tiny-prefill-f32", "cpu_after_optimizations"),
         ("mixtral-tiny-decode-f32", "cpu_after_optimizations")]


@needs_dot
@pytest.mark.parametrize("name,stage", SMALL, ids=[f"{n}:{s}" for n, s in SMALL])
def test_whole_small_corpus_module_every_instruction_once(name, stage):
    module = corpus_module(name, stage)
    assert module is not None, f"corpus module {name}:{stage} is not bundled"
    view = select(module, FocusOptions(whole_module=True, max_nodes=5000))
    assert view.notice is None
    # the whole module: every instruction, fused ones inside their fusion's cluster
    assert len(view.drawn_instructions()) == module.instruction_count
    assert_each_once(view, to_dot(view))


@needs_dot
def test_jax_before_and_after_every_instruction_once():
    for module in jax_pair(layers=2):
        view = select(module, FocusOptions(whole_module=True))
        assert len(view.drawn_instructions()) == module.instruction_count
        assert_each_once(view, to_dot(view))


def large_module() -> hlo_tools.Module:
    module = corpus_module("llama3-full-train-bf16", "before_optimizations")
    if module is None:
        module = jax_pair(layers=40)[0]
    return module


@needs_dot
def test_focused_view_of_a_large_module_is_the_neighbourhood():
    module = large_module()
    dots = [i for i in module.entry if i.opcode is HloOpcode.DOT]
    center = dots[len(dots) // 2]
    view = select(module, FocusOptions(around=center.name, radius=1))
    assert set(view.instructions) == {center, *center.operands, *center.users}
    assert view.center == center.name and f"within 1 of %{center.name}" in view.notice
    dot_source = to_dot(view)
    assert_each_once(view, dot_source)
    assert "not shown)" in dot_source  # boundary nodes say what is hidden around them


def test_node_budget_cuts_with_a_notice():
    module = large_module()
    view = select(module, FocusOptions(max_nodes=50))
    assert view.node_count == 50
    assert view.notice.startswith(f"showing 50 of {len(module.entry)} instructions in %{module.entry.name} (nearest to the root)")
    assert module.entry.root in view.instructions


def test_budget_collapses_fusions_first():
    module = corpus_module("llama3-tiny-prefill-f32", "cpu_after_optimizations") or jax_pair(2)[1]
    n_fusions = sum(1 for i in module.entry if i.opcode is HloOpcode.FUSION)
    view = select(module, FocusOptions(max_nodes=len(module.entry)))
    assert view.expanded == frozenset() and view.node_count == len(module.entry)
    assert view.notice == f"{n_fusions} fusions collapsed to one node each to fit the budget of {len(module.entry)} nodes"


def test_around_a_fused_instruction_focuses_its_fusion_expanded():
    _, after = jax_pair()
    fused = {id(c) for c in after.fusion_computations()}
    inner = next(i for c in after.computations if id(c) in fused for i in c if i.opcode is HloOpcode.TANH)
    view = select(after, FocusOptions(around=inner.name, radius=0, collapse_fusions=True))
    (fusion,) = view.instructions
    assert fusion.fused_computation is inner.parent and view.expanded == {fusion.name}


def test_unknown_names_are_clear_errors():
    module = jax_pair()[0]
    add = next(i for i in module.entry if i.opcode is HloOpcode.ADD)
    with pytest.raises(VisualizeError, match=rf"has no instruction %{add.name}x; did you mean %{add.name}"):
        select(module, FocusOptions(around=add.name + "x"))
    with pytest.raises(VisualizeError, match="has no computation %nope"):
        select(module, FocusOptions(computation="nope"))


HLO_BIG_CONSTANT = """HloModule m
ENTRY main {
  p = f32[64,64] parameter(0)
  w = f32[64,64] constant({...})
  c = f32[] constant(0.5)
  d = f32[64,64] dot(p, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  b = f32[64,64] broadcast(c), dimensions={}
  ROOT m = f32[64,64] multiply(d, b)
}
"""


def test_labels_colours_bytes_and_elided_constants():
    module = hlo_tools.parse(HLO_BIG_CONSTANT.replace("{...}", "{" + ", ".join(["{" + ", ".join(["1"] * 64) + "}"] * 64) + "}"))
    src = to_dot(module)
    assert 'w [label="constant (elided, 16.4 KB)\\nf32[64,64]\\n%w"' in src
    assert 'c [label="constant 0.5\\nf32[]\\n%c"' in src
    assert 'class="cat-matmul" fillcolor="#f4a582"' in src  # the dot
    assert 'd -> m [xlabel="16.4 KB"]' in src and 'c -> b [xlabel="4 B"]' in src


@needs_dot
def test_collapsed_fusions_are_one_node():
    _, after = jax_pair()
    view = select(after, FocusOptions(collapse_fusions=True))
    src = to_dot(view)
    nodes, clusters = drawn_ids(src)
    assert clusters == [] and set(nodes) == {i.name for i in after.entry}
    assert "ops: " in src


HLO_BEFORE = """HloModule m
ENTRY main {
  x = f32[8] parameter(0)
  y = f32[8] parameter(1)
  a = f32[8] add(x, y)
  e = f32[8] exponential(a)
  n = f32[8] negate(x)
  ROOT t = (f32[8], f32[8]) tuple(e, n)
}
"""

HLO_AFTER = """HloModule m
fused_computation {
  p0 = f32[8] parameter(0)
  p1 = f32[8] parameter(1)
  a = f32[8] add(p0, p1)
  ROOT e = f32[8] exponential(a)
}
ENTRY main {
  x = f32[8] parameter(0)
  y = f32[8] parameter(1)
  fusion = f32[8] fusion(x, y), kind=kLoop, calls=fused_computation
  c = f32[8] copy(x)
  ROOT t = (f32[8], f32[8]) tuple(fusion, c)
}
"""


def test_diff_as_text():
    d = diff_modules(hlo_tools.parse(HLO_BEFORE), hlo_tools.parse(HLO_AFTER))
    assert format_diff(d) == """\
--- before: m (6 instructions, 6 top-level)
+++ after:  m (9 instructions, 5 top-level)
top-level instructions: 2 kept, 1 changed, 2 fused into 1 fusions, 1 removed, 1 added

fused (1 fusions):
  %fusion (kLoop) <- %a, %e

removed (1): %n

added (1): %c

changed (1):
  %t: operands (%e, %n) -> (%fusion, %c)

opcode counts outside fusion bodies:
  opcode       before   after   delta
  add               1       0      -1
  copy              0       1      +1
  exponential       1       0      -1
  fusion            0       1      +1
  negate            1       0      -1
  parameter         2       2      +0
  tuple             1       1      +0
"""


def test_diff_of_xla_cpu_fusion_matches_renamed_instructions():
    before, after = jax_pair()
    d = diff_modules(before, after)
    fusions = [i for i in after.entry if i.opcode is HloOpcode.FUSION]
    assert set(d.fused_into) <= {f.name for f in fusions} and d.fused_into
    tanh = next(i for i in before.entry if i.opcode is HloOpcode.TANH)
    holder = next(f for f in fusions if any(i.opcode is HloOpcode.TANH for i in f.fused_computation))
    assert d.before_status[tanh.name] == "fused" and tanh.name in d.fused_into[holder.name]
    # XLA renamed it inside the fusion; the match still finds the fused tanh
    assert after.get_computation(holder.fused_computation.name).get_instruction(d.counterpart[tanh.name]).opcode is HloOpcode.TANH
    assert d.after_status[holder.name] == "fused"
    assert dict((o, (b, a)) for o, b, a in d.opcode_counts)["fusion"] == (0, len(fusions))


def test_diff_after_outline_fusion():
    before = jax_pair()[0]
    after = before.clone()
    entry = after.entry
    region = [i for i in entry if i.opcode in (HloOpcode.ADD, HloOpcode.TANH, HloOpcode.MULTIPLY)]
    fusion = outline_fusion(entry, region, kind=fusion_kind)
    d = diff_modules(before, after)
    assert sorted(d.fused_into[fusion.name]) == sorted(i.name for i in region)
    assert all(d.counterpart[i.name] == i.name for i in region)  # same names: matched by name


@needs_dot
def test_before_after_page_is_self_contained():
    before, after = jax_pair(layers=2)
    page = before_after_html(before, after, summary=[{"pass": "xla-cpu-fusion", "changed": True, "ms": 12}])
    assert page.count("<svg") == 2 and 'id="pane-before"' in page and 'id="pane-after"' in page
    assert '<input id="search"' in page and "<caption>passes</caption><tr><th>pass</th><th>changed</th><th>ms</th>" in page
    for remote in ("<script src", "<link", "url(", 'href="http', "src=\"http", "@import"):
        assert remote not in page
    tanh = next(i for i in before.entry if i.opcode is HloOpcode.TANH)
    assert f'id="b&#45;{tanh.name}" class="node cat&#45;elementwise fused"' in page
    data = json.loads(page.split('<script type="application/json" id="hlo-data">')[1].split("</script>")[0])
    # fusions are drawn expanded: the counterpart is the renamed tanh inside one
    fused_tanhs = {i.name for c in after.computations for i in c if i.opcode is HloOpcode.TANH and c is not after.entry}
    assert data["before_counterparts"][tanh.name][0] in fused_tanhs


@needs_dot
def test_cli_viz_every_format_and_diff(tmp_path, capsys):
    before_text, after_text = (m.to_text() for m in jax_pair())
    (tmp_path / "b.hlo").write_text(before_text)
    (tmp_path / "a.hlo").write_text(after_text)
    b, a = str(tmp_path / "b.hlo"), str(tmp_path / "a.hlo")
    for suffix, magic in ((".dot", b"digraph"), (".svg", b"<?xml"), (".png", b"\x89PNG"), (".html", b"<!DOCTYPE html>")):
        out = tmp_path / f"g{suffix}"
        assert main(["viz", b, "-o", str(out), "--max-nodes", "30"]) == 0
        assert out.read_bytes().startswith(magic)
    assert main(["viz", b, "--after", a, "-o", str(tmp_path / "ba.html"), "--collapse-fusions"]) == 0
    assert (tmp_path / "ba.html").read_text().count("<svg") == 2
    assert main(["viz", b, "--after", a, "-o", str(tmp_path / "ba.svg")]) == 1
    assert main(["viz", b, "-o", str(tmp_path / "g.jpg")]) == 1
    assert main(["viz", b, "--around", "nope", "-o", str(tmp_path / "n.svg")]) == 1
    err = capsys.readouterr().err
    assert "--after makes a before/after page: write it to a .html file" in err
    assert "unknown output suffix '.jpg'" in err and "has no instruction %nope" in err
    assert not (tmp_path / "n.svg").exists()
    assert main(["diff", b, a]) == 0
    assert "fused into" in capsys.readouterr().out
    assert main(["diff", b, a, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["counts"]["fused"] > 0


@needs_dot
def test_dot_rejection_is_a_clear_error():
    with pytest.raises(VisualizeError, match="dot rejected the graph: .*syntax error"):
        render("digraph { a -> }", "svg")
    with pytest.raises(VisualizeError, match="cannot render format 'gif'"):
        render("digraph {}", "gif")
    assert subprocess.run(["dot", "-V"], capture_output=True).returncode == 0


_SCANNED = (Path(__file__).parent / "data" / "scanned_loop.hlo").read_text()


@needs_dot
def test_viz_around_an_instruction_inside_a_loop_body(tmp_path, capsys):
    """The way into a scanned layer: --around finds the instruction in the loop's
    body and draws its neighbourhood there."""
    src = tmp_path / "s.hlo"
    src.write_text(_SCANNED)
    out = tmp_path / "e.svg"
    assert main(["viz", str(src), "--around", "e", "--radius", "1", "-o", str(out)]) == 0
    cap = capsys.readouterr()
    assert "within 1 of %e" in cap.err + cap.out and "in %body" in cap.err + cap.out, cap
    assert "exponential" in out.read_text()
