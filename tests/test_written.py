"""Names as the user wrote them (``hlo_tools.written``): a pass's copies, our
fusions and XLA's optimized instructions of a real corpus module are traced back
to the instruction and computation of the file; copies are renamed back.  Real
XLA on the CPU for the stamped route (jaxlib renames what it compiles)."""

from __future__ import annotations

import pytest

import corpus
from hlo_tools import HloOpcode, parse
from hlo_tools.written import WrittenNames, stamp_names, stamped_name, twins
from passes import PassManager, get_pass
from xla_bridge.compiler import compile as xla_compile

MODULE = "llama3-tiny-decode-f32"
_TRIVIAL = {HloOpcode.PARAMETER, HloOpcode.GET_TUPLE_ELEMENT, HloOpcode.TUPLE, HloOpcode.CONSTANT, HloOpcode.BITCAST}


@pytest.fixture(scope="module")
def user():
    return parse(next(e for e in corpus.load() if e.name == MODULE).text("before_optimizations"))


def _in_file(user, w) -> bool:
    comp = user.get_computation(w.computation)
    return comp is not None and comp.get_instruction(w.name) is not None


def test_copies_and_fusions_of_our_passes_name_the_users_instruction(user):
    written = WrittenNames(user)
    m = user.clone()
    PassManager([get_pass(n) for n in ("call-inliner", "simplify", "cse", "dce", "producer-consumer-fusion")]).run(m)
    found = {}
    for ins in m.entry:
        if ins.opcode is HloOpcode.PARAMETER:
            continue
        w = written.find(ins)
        if w is not None:
            assert _in_file(user, w), (ins.name, w)
        found.setdefault(w.via if w else None, []).append((ins.name, w))
    # the call inliner's copies (name.N of the callee's instruction) and our fusions both appear, and resolve
    assert len(found.get("copy", [])) >= 2 and len(found.get("fusion", [])) >= 20, {k: len(v) for k, v in found.items()}
    assert len(found.get(None, [])) <= 2, found.get(None)
    name, w = found["copy"][0]
    assert name != w.name and name.startswith(w.name + ".") and w.computation != user.entry.name
    assert written.describe(m.entry.get_instruction(name)) == f"{w} (copied as %{name})"


def test_xla_renames_and_the_stamps_name_it_back(user):
    """jaxlib compiles through StableHLO and names instructions after their op_name:
    few of XLA's names are the file's; with the names stamped, nearly every kernel
    of XLA's optimized module names the file's instruction, in its computation."""
    plain = parse(xla_compile(user, "cpu", contained=True).optimized_text)
    stamped = parse(xla_compile(stamp_names(user.clone()), "cpu", contained=True).optimized_text)
    pairs = twins(plain, stamped)
    assert pairs is not None
    written = WrittenNames(user)
    kernels = [(c.name, i) for c in plain.computations for i in c if i.opcode not in _TRIVIAL]
    by_name = [written.find(i) for _, i in kernels]
    by_stamp = [written.find(pairs[(c, i.name)], stamped=True) for c, i in kernels]
    assert sum(w is not None for w in by_stamp) >= 0.9 * len(kernels) > 0
    assert sum(w is not None for w in by_stamp) > 2 * sum(w is not None for w in by_name)
    for w in by_stamp:
        assert w is None or _in_file(user, w), w
    # a fusion names what its root computes
    fusion = next(i for _, i in kernels if i.opcode is HloOpcode.FUSION)
    twin = pairs[(fusion.parent.name, fusion.name)]
    assert written.find(twin, stamped=True).name == stamped_name(twin.fused_computation.root)


def test_twins_refuse_modules_that_differ_beyond_names(user):
    other = user.clone()
    other.entry.root.shape = other.entry.parameters[0].shape  # any difference but a name
    assert twins(user, other) is None
    assert twins(user, user.clone()) is not None


def test_restore_names_copies_back_where_the_name_is_free():
    user = parse("""HloModule m

f {
  a = f32[4] parameter(0)
  ROOT sub.10 = f32[4] subtract(a, a)
}

ENTRY main {
  p = f32[4] parameter(0)
  ROOT c = f32[4] call(p), to_apply=f
}
""")
    m = user.clone()
    PassManager([get_pass("call-inliner"), get_pass("dce")]).run(m)
    copy = next(i for i in m.entry if i.opcode is HloOpcode.SUBTRACT)
    # the inliner keeps the call's name for the callee's root, so rename to a copy's name first
    m.entry.rename_instruction(copy, "sub.10.clone.1")
    written = WrittenNames(user)
    assert written.describe(copy) == "%sub.10 in %f (copied as %sub.10.clone.1)"
    assert written.restore(m) == 1 and copy.name == "sub.10"
