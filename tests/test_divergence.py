"""``hlo divergence``: a rewrite that swaps the operands of one subtract in a real
corpus module is found at exactly that instruction (API and CLI); identical
modules and a module that differs only in names agree; the pure-IR pieces
(``hlo_tools.expose``, matching, the path) on small modules.  Real XLA on the CPU."""

from __future__ import annotations

import json

import pytest

import corpus
from hlo_lab.cli import main
from hlo_lab.debug.divergence import first_divergence, match, path_from_inputs, prepare
from hlo_tools import HloOpcode, Rewriter, parse
from hlo_tools.errors import IrError
from hlo_tools.expose import expose
from tests.conftest import run_hlo

MODULE = "llama3-tiny-decode-f32"


@pytest.fixture(scope="module")
def original():
    entry = next(e for e in corpus.load() if e.name == MODULE)
    return parse(entry.text("before_optimizations"))


def _first_real_subtract(module) -> str:
    """The first entry subtract (A's post order) of two different operands: swapping
    them negates its value, which the softmax after it does not undo."""
    return next(i.name for i in module.entry.post_order()
                if i.opcode is HloOpcode.SUBTRACT and i.operand(0) is not i.operand(1))


def _swapped(module, name: str):
    m = module.clone()
    sub = m.entry.get_instruction(name)
    Rewriter().replace_operands(sub, [sub.operand(1), sub.operand(0)])
    return m


def _renamed(module):
    """Every instruction and parameter renamed; nothing else changed."""
    m = module.clone()
    rw = Rewriter()
    for comp in m.computations:
        for instr in list(comp):
            rw.rename(instr, "r_" + instr.name.replace(".", "_"))
    return m


@pytest.fixture(scope="module")
def swapped_case(original, tmp_path_factory):
    name = _first_real_subtract(original)
    d = tmp_path_factory.mktemp("div")
    a, b = d / "a.hlo", d / "b.hlo"
    a.write_text(original.to_text())
    b.write_text(_swapped(original, name).to_text())
    return name, a, b


def test_swapped_subtract_is_found_there_api(original, swapped_case):
    name, _, _ = swapped_case
    d = first_divergence(original, _swapped(original, name))
    assert d.found and d.name == name and d.name_b == name and d.opcode == "subtract"
    assert d.matched_by == "name"
    assert d.stats.mismatches > 0 and not d.stats.ok and d.stats.max_abs > 0
    assert d.stats.expected == pytest.approx(-d.stats.actual)  # a swapped subtract negates
    assert d.operands and all(s.stats is not None and s.stats.exact for s in d.operands)  # its operands agree
    assert d.path[0].opcode == "parameter" and d.path[-1].name == name
    assert all(s.status in ("agrees", "not read (a tuple: read through its elements)")
               for s in d.path[1:-1]), [s.line() for s in d.path]
    assert 1 <= d.position <= d.compared <= d.readable
    assert not d.matching.unmatched_a and not d.matching.unmatched_b
    assert d.outputs.verdict == "mismatch" and d.exit_code == 1


def test_swapped_subtract_is_found_there_cli(swapped_case):
    name, a, b = swapped_case
    r = run_hlo("divergence", a, b, "--batch", "100")  # several batches, stopping at the one that holds it
    assert r.returncode == 1, r.stderr
    assert r.stdout.splitlines()[-1].startswith(f"first_divergence=%{name} computation=%")
    assert "MISMATCH" in r.stdout and "path from the inputs" in r.stdout
    r = run_hlo("divergence", a, b, "--json", "-q")
    d = json.loads(r.stdout)
    assert r.returncode == 1
    assert d["first_divergence"] == name and d["opcode"] == "subtract"
    assert d["stats"]["mismatches"] > 0 and d["stats"]["size"] >= d["stats"]["mismatches"]
    assert d["path"][-1]["name"] == name and d["path"][0]["opcode"] == "parameter"
    assert d["compared"] >= d["position"] and d["unmatched_a"] == [] and d["unmatched_b"] == []


def test_identical_modules_agree(swapped_case, capsys):
    _, a, _ = swapped_case
    assert main(["divergence", str(a), str(a), "-q"]) == 0
    assert capsys.readouterr().out.strip() == "no divergence"


def test_a_module_renamed_still_matches(original):
    renamed = _renamed(original)
    d = first_divergence(original, renamed)
    assert not d.found and d.exit_code == 0 and d.outputs.verdict == "exact"
    assert not d.matching.unmatched_a and not d.matching.unmatched_b
    assert d.compared == d.readable > 100
    kinds = {how for _, how in d.matching.pairs.values()}
    assert kinds == {"parameter", "structure"}  # no names in common, no metadata in the corpus
    # and the swap is still found in the renamed copy, under its new name
    name = _first_real_subtract(original)
    d = first_divergence(original, _swapped(renamed, "r_" + name.replace(".", "_")))
    assert d.name == name and d.name_b == "r_" + name.replace(".", "_")


def test_different_parameters_cannot_run(tmp_path, capsys):
    (tmp_path / "a.hlo").write_text("HloModule a\nENTRY e {\n  ROOT p = f32[4] parameter(0)\n}\n")
    (tmp_path / "b.hlo").write_text("HloModule b\nENTRY e {\n  ROOT p = f32[5] parameter(0)\n}\n")
    assert main(["divergence", str(tmp_path / "a.hlo"), str(tmp_path / "b.hlo")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "different parameters" in err[0]


# -- the pure-IR pieces ---------------------------------------------------------------------

SMALL = """HloModule small

add_one {
  p = f32[4] parameter(0)
  one = f32[] constant(1)
  b = f32[4] broadcast(one), dimensions={}
  ROOT s = f32[4] add(p, b)
}

ENTRY main {
  x = f32[4] parameter(0)
  y = f32[4] parameter(1)
  c = f32[4] call(x), to_apply=add_one
  d = f32[4] subtract(c, y)
  e = f32[4] exponential(d)
  ROOT t = (f32[4], f32[4]) tuple(e, d)
}
"""


def test_expose_makes_intermediates_outputs():
    m = parse(SMALL)
    ex = expose(m, ["c", "d"])
    root = ex.module.entry.root
    assert ex.original_outputs == 2 and ex.probes == ("c", "d")
    assert [o.name for o in root.operands] == ["e", "d", "c.expose_copy", "d.expose_copy"]  # each probe its own buffer
    assert [o.operands[0].name for o in root.operands[2:]] == ["c", "d"]
    assert len(root.shape.tuple_shapes) == 4
    assert m.entry.root.name == "t"  # the original is untouched
    with pytest.raises(IrError, match="only arrays"):
        expose(m, ["t"])
    with pytest.raises(IrError, match="no instruction"):
        expose(m, ["nosuch"])


def test_prepare_inlines_calls_keeping_the_call_name():
    p = prepare(parse(SMALL))
    entry = p.module.entry
    assert p.calls_inlined == 1
    assert not any(i.opcode is HloOpcode.CALL for i in entry)
    assert entry.get_instruction("c").opcode is HloOpcode.ADD  # the call's value keeps its name
    assert {call for call, _, _ in p.origin.values()} == {"c"}  # the other inlined ones know where from
    assert {inner for _, inner, _ in p.origin.values()} == {"one", "b"}
    assert {comp for _, _, comp in p.origin.values()} == {"add_one"}  # the computation they sit in


def test_match_by_name_then_structure_and_the_path():
    a = prepare(parse(SMALL)).module.entry
    swapped = parse(SMALL.replace("subtract(c, y)", "subtract(y, c)").replace(" e = ", " e2 = ")
                    .replace("tuple(e, d)", "tuple(e2, d)"))
    b = prepare(swapped).module.entry
    m = match(a, b)
    assert m.pairs["d"] == ("d", "name")          # operands swapped: still the same instruction
    assert m.pairs["e"] == ("e2", "structure")    # renamed, found through its operand
    assert m.pairs["x"] == ("x", "parameter")
    assert not m.unmatched_a and not m.unmatched_b
    path = path_from_inputs(a.get_instruction("e"))
    assert [i.name for i in path] == ["y", "d", "e"]


#: An after-optimizations module (scheduled): the output %b is a bitcast of %n
#: (one buffer), and a parameter is returned as is.
_SCHEDULED = """HloModule m, is_scheduled=true, entry_computation_layout={(f32[4]{0})->(f32[2,2]{1,0}, f32[4]{0})}

ENTRY %e (p: f32[4]) -> (f32[2,2], f32[4]) {
  %p = f32[4]{0} parameter(0)
  %n = f32[4]{0} negate(%p)
  %b = f32[2,2]{1,0} bitcast(%n)
  ROOT %t = (f32[2,2]{1,0}, f32[4]{0}) tuple(%b, %p)
}
"""


def test_divergence_on_a_scheduled_module_whose_outputs_share_buffers(tmp_path, capsys):
    """Reading %n beside its bitcast %b made two outputs of one buffer, which
    XLA:CPU's client aborts on for a module it does not copy-insert again (a
    scheduled one: a third-party train step's after_optimizations dump). Each
    probe is exposed through a copy, so the module compiles and every value agrees."""
    path = tmp_path / "s.hlo"
    path.write_text(_SCHEDULED)
    exposed = expose(parse(_SCHEDULED), ["n"]).module
    assert [o.opcode for o in exposed.entry.root.operands] == [HloOpcode.BITCAST, HloOpcode.COPY, HloOpcode.COPY]
    assert main(["divergence", str(path), str(path)]) == 0
    out = capsys.readouterr().out
    assert "no divergence" in out and "outputs: exact" in out


_CALLED = """HloModule m

f {
  x = f32[4] parameter(0)
  y = f32[4] parameter(1)
  sub.10 = f32[4] subtract(x, y)
  ROOT e = f32[4] exponential(sub.10)
}

ENTRY main {
  p = f32[4] parameter(0)
  q = f32[4] parameter(1)
  sub.10 = f32[4] multiply(p, q)
  c = f32[4] call(p, sub.10), to_apply=f
  ROOT n = f32[4] negate(c)
}
"""


def test_a_divergence_inside_a_call_is_named_as_the_file_has_it(tmp_path):
    """The subtract inside %f is read as the clone %sub.10.1 (the entry has its
    own %sub.10); the report names it %sub.10 in computation %f, as written."""
    a, b = tmp_path / "a.hlo", tmp_path / "b.hlo"
    a.write_text(_CALLED)
    b.write_text(_CALLED.replace("subtract(x, y)", "subtract(y, x)"))
    r = run_hlo("divergence", a, b, "-q")
    assert r.returncode == 1 and r.stdout.strip() == "first_divergence=%sub.10 computation=%f", r.stdout + r.stderr
    d = json.loads(run_hlo("divergence", a, b, "--json", "-q").stdout)
    assert (d["first_divergence"], d["computation"], d["inlined_as"]) == ("sub.10", "f", "sub.10.1")
    assert d["path"][-1]["name"] == "sub.10" and d["path"][-1]["computation"] == "f"
    report = run_hlo("divergence", a, b).stdout
    assert "first divergence: %sub.10 = f32[4] subtract in computation %f (called by %c" in report
