"""Horizontal and priority fusion: exactly what each writes (HLO in, FileCheck
lines out) and refuses (the log's reasons) on small hand-written modules, and
equal outputs with XLA keeping our fusions on a small corpus module through the
pre-scheduler hook."""

from __future__ import annotations

import pytest

import corpus
import hlo_tools
from hlo_analysis.legality import Decision
from hlo_lab.study import ours
from hlo_tools import HloOpcode
from hlo_tools.testing import assert_rewrite
from passes import PassManager
from passes.fusion.horizontal import HorizontalFusion, HorizontalLog
from passes.registry import parse_pipeline
from passes.fusion.priority import Candidate, PriorityFusion, PriorityLog, default_cost
from passes.fusion.profitability import never_duplicate
from passes.registry import parse_pipeline
from tests.passes_util import SOFTMAX_CHAIN
from xla_bridge import STOCK, Measurement, compare


def test_both_passes_are_registered():
    names = [p.name for p in parse_pipeline("priority-fusion,horizontal-fusion,dce")]
    assert names == ["priority-fusion", "horizontal-fusion", "dce"]


# -- priority fusion ---------------------------------------------------------------

#: a softmax-like chain: the exp feeds a reduce and a subtract, the multiply feeds
#: the exp and a negate, a dot and the root read results.
CHAIN = SOFTMAX_CHAIN


def test_priority_fuses_by_benefit_and_refuses_with_reasons():
    log = PriorityLog()
    # only the broadcast joins the subtract; the dot and the reduce stay (a reduce
    # plus a constant is no fusion)
    assert_rewrite(CHAIN, PriorityFusion(log=log), """
    CHECK:      %[[BODY:fused_computation[.0-9]*]] (param_0: f32[4], param_1: f32[4,8]) -> f32[4,8] {
    CHECK-NEXT:   %param_0 = f32[4]{0} parameter(0)
    CHECK-NEXT:   %param_1 = f32[4,8]{1,0} parameter(1)
    CHECK-NEXT:   %b = f32[4,8]{1,0} broadcast(%param_0), dimensions={0}
    CHECK-NEXT:   ROOT %k = f32[4,8]{1,0} subtract(%param_1, %b)
    CHECK-NEXT: }
    CHECK:      ENTRY
    CHECK-NOT:    fusion(
    CHECK:        %r = f32[4]{0} reduce(%n, %z)
    CHECK-NEXT:   %priority_fusion = f32[4,8]{1,0} fusion(%r, %n), kind=kLoop, calls=%[[BODY]]
    CHECK-NOT:    fusion(
    CHECK:        %d = f32[4,4]{1,0} dot(%priority_fusion, %c)
    CHECK-NOT:    fusion(
    """)
    # the queue took the biggest saving first: the broadcast's 128 B result is no
    # longer written and read back (256 B); the scalar constant (8 B) came last
    assert log.steps == [("b", ("k",), 256, "merge"), ("z", ("r",), 8, "merge")]
    assert log.fused() == [("b", "k"), ("z", "r")]
    refused = log.refused()
    assert refused[("r", "b")] == "expensive producer would be recomputed per reused element"
    # n feeds r and k (two clusters): it would be duplicated, and it is expensive
    assert refused[("n", "r")] == refused[("n", "k")] == "cost: expensive producer would be duplicated"
    # m feeds n and c: duplicating arithmetic is refused (FMA contraction may differ per copy)
    assert refused[("m", "n")] == refused[("m", "c")] == "cost: duplicated arithmetic may not recompute bit-identically"
    assert refused[("k", "d")] == refused[("c", "d")] == "consumer is a dot"
    assert refused[("d", "t")] == "producer is a dot"


def test_priority_multi_output_merges_instead_of_duplicating_and_refuses_cycles_and_shapes():
    log = PriorityLog()
    # m stays an output for c (a tuple-shaped fusion): nothing is recomputed
    assert_rewrite(CHAIN, PriorityFusion(log=log, multi_output=True), """
    CHECK:      %[[MN:fused_computation[.0-9]*]] (param_0: f32[4,8], param_1: f32[4,8]) -> (f32[4,8], f32[4,8]) {
    CHECK-NEXT:   %param_0 = f32[4,8]{1,0} parameter(0)
    CHECK-NEXT:   %param_1 = f32[4,8]{1,0} parameter(1)
    CHECK-NEXT:   %m = f32[4,8]{1,0} multiply(%param_0, %param_1)
    CHECK-NEXT:   %n = f32[4,8]{1,0} exponential(%m)
    CHECK-NEXT:   ROOT %tuple = (f32[4,8]{1,0}, f32[4,8]{1,0}) tuple(%m, %n)
    CHECK-NEXT: }
    CHECK:      %[[BK:fused_computation[.0-9]*]] (param_0: f32[4], param_1: f32[4,8]) -> f32[4,8] {
    CHECK-NEXT:   %param_0 = f32[4]{0} parameter(0)
    CHECK-NEXT:   %param_1 = f32[4,8]{1,0} parameter(1)
    CHECK-NEXT:   %b = f32[4,8]{1,0} broadcast(%param_0), dimensions={0}
    CHECK-NEXT:   ROOT %k = f32[4,8]{1,0} subtract(%param_1, %b)
    CHECK-NEXT: }
    CHECK:      ENTRY
    CHECK:        %[[MO:[^ ]+]] = (f32[4,8]{1,0}, f32[4,8]{1,0}) fusion(%x, %y), kind=kLoop, calls=%[[MN]]
    CHECK-NEXT:   %[[M:[^ ]+]] = f32[4,8]{1,0} get-tuple-element(%[[MO]]), index=0
    CHECK-NEXT:   %[[N:[^ ]+]] = f32[4,8]{1,0} get-tuple-element(%[[MO]]), index=1
    CHECK-NEXT:   %z = f32[] constant(0)
    CHECK-NEXT:   %r = f32[4]{0} reduce(%[[N]], %z)
    CHECK-NEXT:   fusion(%r, %[[N]]), kind=kLoop, calls=%[[BK]]
    CHECK-NEXT:   %c = f32[4,8]{1,0} negate(%[[M]])
    CHECK-NOT:    fusion(
    """)
    assert ("m", ("n",), 128, "multi-output") in log.steps
    refused = log.refused()
    # n into {b, k}: the path n -> r -> b -> k leaves the fusion and comes back
    assert refused[("n", "k")] == "would create a cycle"
    # n into r: a multi-output loop fusion needs all outputs with equal dimensions on XLA:CPU
    assert refused[("n", "r")] == "shape mismatch: multi-output with %r needs equal dimensions"
    assert refused[("m", "c")] == "cost: duplicated arithmetic may not recompute bit-identically"


DUP = """HloModule m

ENTRY e {
  x = f32[4]{0} parameter(0)
  y = f32[4,8]{1,0} parameter(1)
  w = f32[8,4]{1,0} parameter(2)
  b = f32[4,8]{1,0} broadcast(x), dimensions={0}
  m = f32[4,8]{1,0} multiply(b, y)
  a = f32[4,8]{1,0} add(b, y)
  tr = f32[4,8]{1,0} transpose(w), dimensions={1,0}
  s = f32[4,8]{1,0} sine(tr)
  d = f32[4,4]{1,0} dot(tr, y), lhs_contracting_dims={1}, rhs_contracting_dims={1}
  ROOT t = (f32[4,8]{1,0}, f32[4,8]{1,0}, f32[4,8]{1,0}, f32[4,4]{1,0}) tuple(m, a, s, d)
}
"""


def test_priority_duplicates_data_movement_when_it_saves_bytes():
    log = PriorityLog()
    # the broadcast is copied into both users (the original is gone): 128 B result
    # written once and read twice saved, its 16 B input is cheap (cached).  The
    # transpose must stay for the dot, so a copy in the sine would read its input
    # again for the one read it saves: no benefit
    assert_rewrite(DUP, PriorityFusion(log=log), """
    CHECK:      %[[MUL:fused_computation[.0-9]*]] (param_0: f32[4], param_1: f32[4,8]) -> f32[4,8] {
    CHECK-NEXT:   %param_0 = f32[4]{0} parameter(0)
    CHECK-NEXT:   %param_1 = f32[4,8]{1,0} parameter(1)
    CHECK-NEXT:   %b.dup = f32[4,8]{1,0} broadcast(%param_0), dimensions={0}
    CHECK-NEXT:   ROOT %m = f32[4,8]{1,0} multiply(%b.dup, %param_1)
    CHECK-NEXT: }
    CHECK:      %[[ADD:fused_computation[.0-9]*]] (param_0: f32[4], param_1: f32[4,8]) -> f32[4,8] {
    CHECK-NEXT:   %param_0 = f32[4]{0} parameter(0)
    CHECK-NEXT:   %param_1 = f32[4,8]{1,0} parameter(1)
    CHECK-NEXT:   %b.dup.1 = f32[4,8]{1,0} broadcast(%param_0), dimensions={0}
    CHECK-NEXT:   ROOT %a = f32[4,8]{1,0} add(%b.dup.1, %param_1)
    CHECK-NEXT: }
    CHECK:      ENTRY
    CHECK:        %w = f32[8,4]{1,0} parameter(2)
    CHECK-NEXT:   fusion(%x, %y), kind=kLoop, calls=%[[MUL]]
    CHECK-NEXT:   fusion(%x, %y), kind=kLoop, calls=%[[ADD]]
    CHECK-NEXT:   %tr = f32[4,8]{1,0} transpose(%w), dimensions={1,0}
    CHECK-NEXT:   %s = f32[4,8]{1,0} sine(%tr)
    CHECK-NEXT:   %d = f32[4,4]{1,0} dot(%tr, %y)
    """)
    assert log.steps == [("b", ("m", "a"), 384, "duplicate")]
    assert log.refused()[("tr", "s")] == "cost: benefit 0 <= 0"
    assert log.refused()[("tr", "d")] == "consumer is a dot"

    log = PriorityLog()
    assert_rewrite(DUP, PriorityFusion(profitable=never_duplicate, log=log), None)
    assert log.refused()[("b", "m")] == log.refused()[("b", "a")] == "cost: duplication disabled"


def test_priority_cost_is_pluggable_and_side_effects_are_refused():
    module = hlo_tools.parse("""HloModule m

ENTRY e {
  lo = f32[] parameter(0)
  hi = f32[] parameter(1)
  x = f32[16]{0} parameter(2)
  r = f32[16]{0} rng(lo, hi), distribution=rng_uniform
  a = f32[16]{0} add(r, x)
  n = f32[16]{0} negate(x)
  ROOT e = f32[16]{0} exponential(n)
}
""")
    seen: list[Candidate] = []

    def roofline(c: Candidate) -> float:  # any model of time: here, microseconds at 1 byte/ns
        seen.append(c)
        return default_cost(c) / 1e3

    log = PriorityLog()
    assert_rewrite(module, PriorityFusion(cost=roofline, log=log), """
    CHECK:      %[[BODY:fused_computation[.0-9]*]] (param_0: f32[16]) -> f32[16] {
    CHECK-NEXT:   %param_0 = f32[16]{0} parameter(0)
    CHECK-NEXT:   %n = f32[16]{0} negate(%param_0)
    CHECK-NEXT:   ROOT %e = f32[16]{0} exponential(%n)
    CHECK-NEXT: }
    CHECK:      ENTRY
    CHECK:        %r = f32[16]{0} rng(%lo, %hi)
    CHECK-NEXT:   %a = f32[16]{0} add(%r, %x)
    CHECK-NEXT:   ROOT %priority_fusion = f32[16]{0} fusion(%x), kind=kLoop, calls=%[[BODY]]
    """)
    assert log.refused()[("r", "a")] == "producer has a side effect"
    assert [c.producer.name for c in seen] == ["n", "n"]  # queued, then re-checked when popped
    assert log.steps == [("n", ("e",), 0.128, "merge")]

    log = PriorityLog()
    assert_rewrite(module.to_text(), PriorityFusion(cost=lambda c: -1.0, log=log), None)


# -- horizontal fusion -------------------------------------------------------------

#: optimizer-like updates over small parameters, plus what must not be batched
UPDATES = """HloModule m

ENTRY e {
  p0 = f32[8]{0} parameter(0)
  p1 = f32[8]{0} parameter(1)
  p2 = f32[8]{0} parameter(2)
  g = f32[8]{0} parameter(3)
  big = f32[64,1024]{1,0} parameter(4)
  q = f32[4,2]{1,0} parameter(5)
  lo = f32[] parameter(6)
  a = f32[8]{0} multiply(p0, g)
  b = f32[8]{0} multiply(p1, g)
  c = f32[8]{0} add(a, p2)
  d = f32[4,2]{1,0} negate(q)
  e = f32[64,1024]{1,0} negate(big)
  r = f32[8]{0} rng(lo, lo), distribution=rng_uniform
  s = f32[8]{0} sqrt(p2)
  ROOT t = (f32[8]{0}, f32[8]{0}, f32[8]{0}, f32[4,2]{1,0}, f32[64,1024]{1,0}, f32[8]{0}, f32[8]{0}) tuple(a, b, c, d, e, r, s)
}
"""


def test_horizontal_batches_independent_small_same_shape_kernels():
    log = HorizontalLog()
    # a, b and s become one 3-output loop fusion; c opened its own group and found
    # no partner, so it stays a kernel of its own, as do d, e and r (refused below)
    assert_rewrite(UPDATES, HorizontalFusion(log=log), """
    CHECK:      %[[BODY:fused_computation[.0-9]*]] ({{.*}}) -> (f32[8], f32[8], f32[8]) {
    CHECK-NEXT:   %param_0 = f32[8]{0} parameter(0)
    CHECK-NEXT:   %param_1 = f32[8]{0} parameter(1)
    CHECK-NEXT:   %param_2 = f32[8]{0} parameter(2)
    CHECK-NEXT:   %param_3 = f32[8]{0} parameter(3)
    CHECK-NEXT:   %a = f32[8]{0} multiply(%param_0, %param_1)
    CHECK-NEXT:   %b = f32[8]{0} multiply(%param_2, %param_1)
    CHECK-NEXT:   %s = f32[8]{0} sqrt(%param_3)
    CHECK-NEXT:   ROOT %tuple = (f32[8]{0}, f32[8]{0}, f32[8]{0}) tuple(%a, %b, %s)
    CHECK-NEXT: }
    CHECK:      ENTRY
    CHECK:        %lo = f32[] parameter(6)
    CHECK-NEXT:   %d = f32[4,2]{1,0} negate(%q)
    CHECK-NEXT:   %e = f32[64,1024]{1,0} negate(%big)
    CHECK-NEXT:   %r = f32[8]{0} rng(%lo, %lo)
    CHECK-NEXT:   %horizontal_fusion = (f32[8]{0}, f32[8]{0}, f32[8]{0}) fusion(%p0, %g, %p1, %p2), kind=kLoop, calls=%[[BODY]]
    CHECK-NEXT:   %[[A:[^ ]+]] = f32[8]{0} get-tuple-element(%horizontal_fusion), index=0
    CHECK-NEXT:   %c = f32[8]{0} add(%[[A]], %p2)
    CHECK-NOT:    fusion(
    """)
    assert log.batches == [["a", "b", "s"]]
    refused = log.refused()
    assert refused[("c", "a")] == "dependent: uses or feeds a member"  # c reads a
    assert refused[("d", "c")] == "shape mismatch: [4, 2]{1,0} vs [8]{0}"
    assert refused[("e", "")] == "too large: 262144 bytes > 65536"
    assert refused[("r", "")] == "has a side effect"


def test_horizontal_refuses_paths_through_other_kernels_and_caps_groups():
    log = HorizontalLog()
    # a and c fill the first group; b could not join it (a -> d -> b), so it leads
    # the second, which f joins; h found both full
    assert_rewrite("""HloModule m

ENTRY e {
  x = f32[4,4]{1,0} parameter(0)
  y = f32[4,4]{1,0} parameter(1)
  a = f32[4,4]{1,0} negate(x)
  d = f32[4,4]{1,0} dot(a, y), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  b = f32[4,4]{1,0} exponential(d)
  c = f32[4,4]{1,0} abs(y)
  f = f32[4,4]{1,0} sine(y)
  h = f32[4,4]{1,0} cosine(x)
  ROOT t = (f32[4,4]{1,0}, f32[4,4]{1,0}, f32[4,4]{1,0}, f32[4,4]{1,0}, f32[4,4]{1,0}) tuple(b, c, f, h, a)
}
""", HorizontalFusion(max_members=2, log=log), """
    CHECK:      %[[AC:fused_computation[.0-9]*]] (param_0: f32[4,4], param_1: f32[4,4]) -> (f32[4,4], f32[4,4]) {
    CHECK-NEXT:   %param_0 = f32[4,4]{1,0} parameter(0)
    CHECK-NEXT:   %param_1 = f32[4,4]{1,0} parameter(1)
    CHECK-NEXT:   %a = f32[4,4]{1,0} negate(%param_0)
    CHECK-NEXT:   %c = f32[4,4]{1,0} abs(%param_1)
    CHECK-NEXT:   ROOT %tuple = {{.*}} tuple(%a, %c)
    CHECK-NEXT: }
    CHECK:      %[[BF:fused_computation[.0-9]*]] (param_0: f32[4,4], param_1: f32[4,4]) -> (f32[4,4], f32[4,4]) {
    CHECK-NEXT:   %param_0 = f32[4,4]{1,0} parameter(0)
    CHECK-NEXT:   %param_1 = f32[4,4]{1,0} parameter(1)
    CHECK-NEXT:   %b = f32[4,4]{1,0} exponential(%param_0)
    CHECK-NEXT:   %f = f32[4,4]{1,0} sine(%param_1)
    CHECK-NEXT:   ROOT %tuple = {{.*}} tuple(%b, %f)
    CHECK-NEXT: }
    CHECK:      ENTRY
    CHECK:        %[[F1:[^ ]+]] = {{.*}} fusion(%x, %y), kind=kLoop, calls=%[[AC]]
    CHECK-NEXT:   %[[A:[^ ]+]] = f32[4,4]{1,0} get-tuple-element(%[[F1]]), index=0
    CHECK-NEXT:   %d = f32[4,4]{1,0} dot(%[[A]], %y)
    CHECK-NEXT:   get-tuple-element(%[[F1]]), index=1
    CHECK-NEXT:   fusion(%d, %y), kind=kLoop, calls=%[[BF]]
    CHECK-NOT:    fusion(
    CHECK:        %h = f32[4,4]{1,0} cosine(%x)
    CHECK-NOT:    fusion(
    """)
    refused = log.refused()
    assert refused[("b", "a")] == "would create a cycle: a path leads from one member to another"  # a -> d -> b
    assert refused[("h", "b")] == "cap: group has 2 members"  # f joined b's group, h found both full
    assert refused[("d", "")] == "is a dot"

    log = HorizontalLog()
    assert_rewrite(UPDATES, HorizontalFusion(profitable=lambda members, operands: Decision.forbid("cost: no"), log=log), None)
    assert log.refused()[("b", "a")] == "cost: no"


def test_horizontal_batches_loop_fusions_after_producer_consumer():
    # two SGD updates, each one loop fusion after producer-consumer (the broadcast
    # duplicated into both), then one kernel: a 2-output loop fusion
    assert_rewrite("""HloModule m

ENTRY e {
  w0 = f32[16]{0} parameter(0)
  g0 = f32[16]{0} parameter(1)
  w1 = f32[16]{0} parameter(2)
  g1 = f32[16]{0} parameter(3)
  lr = f32[] constant(0.1)
  l = f32[16]{0} broadcast(lr), dimensions={}
  sc0 = f32[16]{0} multiply(g0, l)
  up0 = f32[16]{0} subtract(w0, sc0)
  sc1 = f32[16]{0} multiply(g1, l)
  up1 = f32[16]{0} subtract(w1, sc1)
  ROOT t = (f32[16]{0}, f32[16]{0}) tuple(up0, up1)
}
""", PassManager(parse_pipeline("producer-consumer-fusion,horizontal-fusion,dce")), """
    CHECK:      %[[BODY:fused_computation[.0-9]*]] ({{.*}}) -> (f32[16], f32[16]) {
    CHECK-NEXT:   %param_0 = f32[16]{0} parameter(0)
    CHECK-NEXT:   %param_1 = f32[16]{0} parameter(1)
    CHECK-NEXT:   %param_2 = f32[16]{0} parameter(2)
    CHECK-NEXT:   %param_3 = f32[16]{0} parameter(3)
    CHECK-NEXT:   %lr = f32[] constant(0.1)
    CHECK-NEXT:   %l = f32[16]{0} broadcast(%lr), dimensions={}
    CHECK-NEXT:   %sc0 = f32[16]{0} multiply(%param_0, %l)
    CHECK-NEXT:   %up0 = f32[16]{0} subtract(%param_1, %sc0)
    CHECK-NEXT:   %lr.dup = f32[] constant(0.1)
    CHECK-NEXT:   %l.dup = f32[16]{0} broadcast(%lr.dup), dimensions={}
    CHECK-NEXT:   %sc1 = f32[16]{0} multiply(%param_2, %l.dup)
    CHECK-NEXT:   %up1 = f32[16]{0} subtract(%param_3, %sc1)
    CHECK-NEXT:   ROOT %tuple = (f32[16]{0}, f32[16]{0}) tuple(%up0, %up1)
    CHECK-NEXT: }
    CHECK:      ENTRY
    CHECK:        %g1 = f32[16]{0} parameter(3)
    CHECK-NEXT:   %[[F:[^ ]+]] = (f32[16]{0}, f32[16]{0}) fusion(%g0, %w0, %g1, %w1), kind=kLoop, calls=%[[BODY]]
    CHECK-NEXT:   get-tuple-element(%[[F]]), index=0
    CHECK-NEXT:   get-tuple-element(%[[F]]), index=1
    CHECK-NEXT:   ROOT {{.*}} tuple(
    """)


# -- through XLA -------------------------------------------------------------------


CPU = Measurement("cpu")


@pytest.mark.parametrize("pipeline", [
    "priority-fusion,library-dot-fusion,dce",
    "producer-consumer-fusion,horizontal-fusion,library-dot-fusion,dce",
])
def test_on_a_corpus_module_equal_outputs_and_fusions_kept(xla_cpu, pipeline):
    text = next(iter(corpus.load("llama3-tiny-decode-f32"))).text("before_optimizations")
    mine = CPU.compile(text, ours(pipeline, "cpu"))
    hlo_tools.verify(mine.hook.after)
    written = sum(1 for i in mine.hook.after.entry if i.opcode is HloOpcode.FUSION)
    entry = mine.optimized_module.entry
    fused = sum(1 for i in entry if i.opcode is HloOpcode.FUSION)
    assert fused == written > 0  # XLA kept the fusions as we wrote them
    if "horizontal" in pipeline:  # and it got at least one multi-output batch
        assert any(i.opcode is HloOpcode.FUSION and i.shape.is_tuple and i.attribute("kind") == "kLoop" for i in entry)
    assert compare(CPU.compile(text, STOCK), mine).verdict in ("exact", "close")


_PASS_THROUGH = """HloModule m

ENTRY e {
  x = f32[4]{0} parameter(0)
  y = f32[4,8]{1,0} parameter(1)
  r = f32[4]{0} rsqrt(x)
  n = f32[4]{0} negate(r)
  c = f32[4]{0} bitcast(n)
  b = f32[4,8]{1,0} broadcast(c), dimensions={0}
  ROOT m = f32[4,8]{1,0} multiply(b, y)
}
"""


def test_priority_never_recomputes_an_expensive_cluster_through_pass_through_members():
    log = PriorityLog()
    # the broadcast reads each element of the {rsqrt, negate, bitcast} chain 8 times
    assert_rewrite(_PASS_THROUGH, PriorityFusion(log=log), """
    CHECK:      %[[CHAIN:fused_computation[.0-9]*]] (param_0: f32[4]) -> f32[4] {
    CHECK-NEXT:   %param_0 = f32[4]{0} parameter(0)
    CHECK-NEXT:   %r = f32[4]{0} rsqrt(%param_0)
    CHECK-NEXT:   %n = f32[4]{0} negate(%r)
    CHECK-NEXT:   ROOT %c = f32[4]{0} bitcast(%n)
    CHECK-NEXT: }
    CHECK:      %[[MUL:fused_computation[.0-9]*]] (param_0: f32[4], param_1: f32[4,8]) -> f32[4,8] {
    CHECK-NEXT:   %param_0 = f32[4]{0} parameter(0)
    CHECK-NEXT:   %param_1 = f32[4,8]{1,0} parameter(1)
    CHECK-NEXT:   %b = f32[4,8]{1,0} broadcast(%param_0), dimensions={0}
    CHECK-NEXT:   ROOT %m = f32[4,8]{1,0} multiply(%b, %param_1)
    CHECK-NEXT: }
    CHECK:      ENTRY
    CHECK:        %y = f32[4,8]{1,0} parameter(1)
    CHECK-NEXT:   %[[F:[^ ]+]] = f32[4]{0} fusion(%x), kind=kLoop, calls=%[[CHAIN]]
    CHECK-NEXT:   ROOT {{.*}} fusion(%[[F]], %y), kind=kLoop, calls=%[[MUL]]
    """)
    assert log.refused()[("c", "b")] == "expensive producer would be recomputed per reused element"
    # a cost that takes the bitcast first: {c, b, m} forms, and the rsqrt chain
    # may still not join it, the broadcast reusing what flows through the bitcast
    log = PriorityLog()
    assert_rewrite(_PASS_THROUGH, PriorityFusion(cost=lambda c: default_cost(c) + 1000 * (c.producer.name == "c"), log=log), """
    CHECK:      %[[CHAIN:fused_computation[.0-9]*]] (param_0: f32[4]) -> f32[4] {
    CHECK-NEXT:   %param_0 = f32[4]{0} parameter(0)
    CHECK-NEXT:   %r = f32[4]{0} rsqrt(%param_0)
    CHECK-NEXT:   ROOT %n = f32[4]{0} negate(%r)
    CHECK-NEXT: }
    CHECK:      %[[MUL:fused_computation[.0-9]*]] (param_0: f32[4], param_1: f32[4,8]) -> f32[4,8] {
    CHECK-NEXT:   %param_0 = f32[4]{0} parameter(0)
    CHECK-NEXT:   %param_1 = f32[4,8]{1,0} parameter(1)
    CHECK-NEXT:   %c = f32[4]{0} bitcast(%param_0)
    CHECK-NEXT:   %b = f32[4,8]{1,0} broadcast(%c), dimensions={0}
    CHECK-NEXT:   ROOT %m = f32[4,8]{1,0} multiply(%b, %param_1)
    CHECK-NEXT: }
    CHECK:      ENTRY
    CHECK:        %y = f32[4,8]{1,0} parameter(1)
    CHECK-NEXT:   %[[F:[^ ]+]] = f32[4]{0} fusion(%x), kind=kLoop, calls=%[[CHAIN]]
    CHECK-NEXT:   ROOT {{.*}} fusion(%[[F]], %y), kind=kLoop, calls=%[[MUL]]
    """)
    assert log.refused()[("n", "c")] == "expensive producer would be recomputed per reused element"


