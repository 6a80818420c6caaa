"""Fusion legality: what may be fused with what, and why not."""

from __future__ import annotations

import hlo_tools
from passes.fusion.clusters import Clusters
from fusion_analysis.legality import ALLOW, Decision, can_fuse, creates_cycle, fusible, is_expensive, is_fusible

SRC = """HloModule m

add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

ENTRY e {
  x = f32[4,8]{1,0} parameter(0)
  y = f32[4,8]{1,0} parameter(1)
  m = f32[4,8]{1,0} multiply(x, y)
  n = f32[4,8]{1,0} exponential(m)
  z = f32[] constant(0)
  r = f32[4]{0} reduce(n, z), dimensions={1}, to_apply=add
  b = f32[4,8]{1,0} broadcast(r), dimensions={0}
  k = f32[4,8]{1,0} negate(n)
  d = f32[4,4]{1,0} dot(m, k), lhs_contracting_dims={1}, rhs_contracting_dims={1}
  big = f32[4,8]{1,0} constant({...})
  g = f32[4,8]{1,0} add(b, big)
  ROOT t = (f32[4,4]{1,0}, f32[4,8]{1,0}) tuple(d, g)
}
""".replace("constant({...})", "constant({ {1,2,3,4,5,6,7,8}, {1,2,3,4,5,6,7,8}, {1,2,3,4,5,6,7,8}, {1,2,3,4,5,6,7,8} })")


def _m():
    module = hlo_tools.parse(SRC)
    return module, module.entry.get_instruction


def test_decision_is_a_truthy_frozen_verdict():
    assert ALLOW and ALLOW.reason == ""
    no = Decision.forbid("producer is a dot")
    assert not no and no.reason == "producer is a dot"


def test_fusible_opcodes_and_reasons():
    _, g = _m()
    assert is_fusible(g("m")) and is_fusible(g("r")) and is_fusible(g("z"))
    assert fusible(g("x")).reason == "is a parameter"
    assert fusible(g("d")).reason == "is a dot"
    assert fusible(g("big")).reason == "is a non-scalar constant"
    assert fusible(g("t")).reason == "is tuple-shaped"


def test_side_effects_are_never_fused():
    module = hlo_tools.parse("""HloModule m

ENTRY e {
  x = f32[4]{0} parameter(0)
  c = f32[4]{0} custom-call(x), custom_call_target="foo", custom_call_has_side_effect=true
  ROOT n = f32[4]{0} negate(c)
}
""")
    c, n = module.entry.get_instruction("c"), module.entry.get_instruction("n")
    assert can_fuse(c, n).reason == "producer has a side effect"


def test_can_fuse_rules():
    _, g = _m()
    assert can_fuse(g("m"), g("n"))                                  # elementwise into elementwise
    assert can_fuse(g("n"), g("r"))                                  # into a reduction (its root)
    assert can_fuse(g("m"), g("d")).reason == "consumer is a dot"
    assert can_fuse(g("r"), g("b")).reason == "expensive producer would be recomputed per reused element"
    assert can_fuse(g("x"), g("m")).reason == "producer is a parameter"
    assert not can_fuse(g("n"), g("m"))                              # not an operand
    assert is_expensive(g("n")) and not is_expensive(g("m"))


def test_cycles_by_reachability():
    _, g = _m()
    # m -> n -> k: fusing m with k alone would put n both before and after the fusion
    assert creates_cycle(g("m"), g("k"))
    assert not creates_cycle(g("m"), g("n"))
    assert not creates_cycle([g("m"), g("n")], [g("k")])
    assert can_fuse(g("m"), g("d")).reason == "consumer is a dot"


def test_clusters_check_cycles_on_the_contracted_graph():
    module, g = _m()
    cl = Clusters(module.entry)
    assert cl.would_cycle(cl.of(g("m")), cl.of(g("k")))
    nk = cl.merge(cl.of(g("n")), cl.of(g("k")))
    assert not cl.would_cycle(cl.of(g("m")), nk)   # m feeds {n, k} directly
    assert cl.would_cycle(cl.of(g("m")), cl.of(g("d")))  # m -> {n, k} -> d
