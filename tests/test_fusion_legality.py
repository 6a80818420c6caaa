"""Fusion legality: what may be fused with what, and why not."""

from __future__ import annotations

import hlo_tools
from passes.fusion.clusters import Clusters
from hlo_analysis.legality import ALLOW, Decision, can_fuse, creates_cycle, fusible, is_expensive, is_fusible

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


LOOP = """HloModule loop

body {
  s = (s32[], f32[4]{0}) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  x = f32[4]{0} get-tuple-element(s), index=1
  one = s32[] constant(1)
  next = s32[] add(i, one)
  c = f32[] convert(next)
  bc = f32[4]{0} broadcast(c), dimensions={}
  y = f32[4]{0} add(x, bc)
  ROOT t = (s32[], f32[4]{0}) tuple(next, y)
}

cond {
  s.1 = (s32[], f32[4]{0}) parameter(0)
  i.1 = s32[] get-tuple-element(s.1), index=0
  n = s32[] constant(3)
  ROOT lt = pred[] compare(i.1, n), direction=LT
}

ENTRY e {
  x.1 = f32[4]{0} parameter(0)
  z = s32[] constant(0)
  init = (s32[], f32[4]{0}) tuple(z, x.1)
  ROOT w = (s32[], f32[4]{0}) while(init), condition=cond, body=body
}
"""


def test_a_loop_state_read_is_not_moved_past_its_in_place_update():
    """After copy insertion (the hooked route), ``next`` writes the counter's new
    value into the counter's buffer: copied into the fusion of ``c``, ``bc`` and
    ``y`` (which ``next`` does not depend on) it would read the counter after
    that write.  ``y`` reads ``x``, which only ``y`` itself updates: fine."""
    from hlo_analysis.legality import keeps_loop_state_order
    from passes.fusion.producer_consumer import FusionLog, ProducerConsumerFusion
    from passes.fusion.profitability import ForcedEdges

    m = hlo_tools.parse(LOOP)
    body = m.get_computation("body")
    get = {i.name: i for i in body}
    d = keeps_loop_state_order(get["next"], [get["c"], get["bc"], get["y"]], moved=False)
    assert not d and "loop state element 0" in d.reason
    # moved (had it no other user), the increment would itself be the fusion that writes the counter
    assert keeps_loop_state_order(get["next"], [get["c"]], moved=True)
    log = FusionLog()
    ProducerConsumerFusion(log=log, decided=ForcedEdges({("next", "c"): True})).run(m)
    assert ("next", "c") in log.refused() and "loop state" in log.refused()[("next", "c")]
    assert m.get_computation("body").root.operand(0).opcode.value == "add"  # the increment stays where it was


def test_without_the_reuse_rule_a_reduce_never_joins_another_reduce():
    """XLA:GPU's priority fusion has no reuse rule, but never fuses a region that
    reduces into another that reduces (a softmax's max into its sum: its cost model
    does not see the max recomputed per element). ``can_join(reuse=False)`` refuses
    that and allows the rsqrt under a broadcast that the reuse rule refuses."""
    from hlo_analysis.legality import can_join
    from hlo_tools import parse as parse_module

    m = parse_module("""HloModule sm
add { a = f32[] parameter(0)  b = f32[] parameter(1)  ROOT c = f32[] add(a, b) }
mx { a = f32[] parameter(0)  b = f32[] parameter(1)  ROOT c = f32[] maximum(a, b) }
ENTRY e {
  x = f32[64,128]{1,0} parameter(0)
  ninf = f32[] constant(-inf)
  zero = f32[] constant(0)
  m = f32[64]{0} reduce(x, ninf), dimensions={1}, to_apply=mx
  b = f32[64,128]{1,0} broadcast(m), dimensions={0}
  s = f32[64,128]{1,0} subtract(x, b)
  ex = f32[64,128]{1,0} exponential(s)
  sum = f32[64]{0} reduce(ex, zero), dimensions={1}, to_apply=add
  r = f32[64]{0} rsqrt(sum)
  rb = f32[64,128]{1,0} broadcast(r), dimensions={0}
  ROOT o = f32[64,128]{1,0} multiply(x, rb)
}""")
    ins = {i.name: i for i in m.entry}
    consumer = [ins[n] for n in ("b", "s", "ex", "sum")]
    d = can_join(ins["m"], consumer, reuse=False)
    assert not d and "both the producer and the consumer contain a reduce" in d.reason
    assert not can_join(ins["r"], [ins["rb"], ins["o"]])
    assert can_join(ins["r"], [ins["rb"], ins["o"]], reuse=False)


IN_PLACE = """HloModule in_place

ENTRY e {
  x = f32[8]{0} parameter(0)
  y = f32[8]{0} parameter(1)
  r = f32[8]{0} REUSE(x)
  w = f32[8]{0} add(r, y)
  ROOT t = (f32[8]{0}) tuple(w)
}
"""


def test_a_control_edge_joins_one_kernel_only_where_its_reads_stay_element_for_element():
    """``r`` reads ``x``, and a control edge (copy insertion's) orders it before
    ``w``, which may write over ``x``'s buffer.  In one loop kernel that holds only
    if element i of ``w`` reads element i of ``x``: a negate does, a reverse reads
    another thread's element.  A horizontal kernel never keeps it (each member's
    elements on other threads)."""
    from hlo_analysis.legality import keeps_in_place_order
    from passes.fusion.horizontal import HorizontalFusion

    for op, keeps in (("negate", True), ("reverse", False)):
        m = hlo_tools.parse(IN_PLACE.replace("REUSE(x)", "negate(x)" if op == "negate" else "reverse(x), dimensions={0}"))
        get = {i.name: i for i in m.entry}
        get["w"].add_control_predecessor(get["r"])
        assert keeps_in_place_order([get["r"]], [get["w"]]) is keeps, op
        clusters = Clusters(m.entry)
        assert clusters.would_cycle(clusters.of(get["r"]), clusters.of(get["w"])) is not keeps, op
        assert clusters.control_joined(clusters.of(get["w"]), clusters.of(get["r"]))
    # siblings with an edge between them: never one horizontal kernel
    m = hlo_tools.parse(IN_PLACE.replace("REUSE(x)", "negate(x)").replace(
        "w = f32[8]{0} add(r, y)", "w = f32[8]{0} exponential(y)").replace("tuple(w)", "tuple(w, r)").replace(
        "ROOT t = (f32[8]{0})", "ROOT t = (f32[8]{0}, f32[8]{0})"))
    get = {i.name: i for i in m.entry}
    get["w"].add_control_predecessor(get["r"])
    HorizontalFusion().run(m)
    assert not [i for i in m.entry if i.opcode.value == "fusion"]
