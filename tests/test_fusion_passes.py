"""Fusion passes: what each writes (HLO in, FileCheck lines out) and refuses (the
log's reasons) on small modules, and equal outputs with XLA keeping our fusions
on a small corpus module."""

from __future__ import annotations

import hlo_tools
from hlo_analysis.legality import Decision
from hlo_tools import HloOpcode
from hlo_tools.testing import assert_rewrite
from passes import PassManager
from passes.fusion.call_inliner import CallInliner
from passes.fusion.library_dot import LibraryDotFusion
from passes.fusion.multi_output import MultiOutputFusion
from passes.registry import parse_pipeline
from passes.fusion.producer_consumer import FusionLog, ProducerConsumerFusion
from passes.fusion.profitability import never_duplicate
from passes.fusion.reduction_epilogue import ReductionEpilogueFusion
from tests.passes_util import ADD_REDUCER, SOFTMAX_CHAIN
from xla_bridge import AS_WRITTEN, Measurement, compare

SRC = SOFTMAX_CHAIN


def test_producer_consumer_fuses_and_refuses_with_reasons():
    log = FusionLog()
    # the broadcast of the reduction joins the subtract; nothing else fuses, the
    # reduce stays a reduce and the dot a library call
    assert_rewrite(SRC, ProducerConsumerFusion(log=log), """
    CHECK:      %[[BODY:fused_computation[.0-9]*]] (param_0: f32[4], param_1: f32[4,8]) -> f32[4,8] {
    CHECK-NEXT:   %param_0 = f32[4]{0} parameter(0)
    CHECK-NEXT:   %param_1 = f32[4,8]{1,0} parameter(1)
    CHECK-NEXT:   %b = f32[4,8]{1,0} broadcast(%param_0), dimensions={0}
    CHECK-NEXT:   ROOT %k = f32[4,8]{1,0} subtract(%param_1, %b)
    CHECK-NEXT: }
    CHECK:      ENTRY
    CHECK-NOT:    fusion(
    CHECK:        %r = f32[4]{0} reduce(%n, %z)
    CHECK-NEXT:   %loop_fusion = f32[4,8]{1,0} fusion(%r, %n), kind=kLoop, calls=%[[BODY]]
    CHECK-NOT:    fusion(
    CHECK:        %d = f32[4,4]{1,0} dot(%loop_fusion, %c)
    CHECK-NOT:    fusion(
    """)
    refused = log.refused()
    assert refused[("r", "b")] == "expensive producer would be recomputed per reused element"
    assert refused[("n", "k")] == "cost: expensive producer would be duplicated"
    assert refused[("n", "r")] == "cost: expensive producer would be duplicated"
    assert refused[("x", "m")] == "producer is a parameter"
    # m feeds n and c: it would have to be duplicated, and duplicating arithmetic is
    # refused (FMA contraction may differ per copy); sibling fusion is the fix
    assert refused[("m", "c")] == refused[("m", "n")] == "cost: duplicated arithmetic may not recompute bit-identically"
    # the reduce only gained its init constant, and a lone op plus a constant is no fusion (as in XLA:CPU)
    assert ("z", "r") in log.fused()


DUP = """HloModule m

ENTRY e {
  x = f32[4]{0} parameter(0)
  y = f32[4,8]{1,0} parameter(1)
  b = f32[4,8]{1,0} broadcast(x), dimensions={0}
  m = f32[4,8]{1,0} multiply(b, y)
  a = f32[4,8]{1,0} add(b, y)
  ROOT t = (f32[4,8]{1,0}, f32[4,8]{1,0}) tuple(m, a)
}
"""


def test_producer_consumer_duplicates_data_movement_only_when_allowed():
    # the broadcast is recomputed in both users, and the original is gone
    assert_rewrite(DUP, ProducerConsumerFusion(), """
    CHECK:      %[[MUL:fused_computation[.0-9]*]] (param_0: f32[4], param_1: f32[4,8]) -> f32[4,8] {
    CHECK-NEXT:   %param_0 = f32[4]{0} parameter(0)
    CHECK-NEXT:   %param_1 = f32[4,8]{1,0} parameter(1)
    CHECK-NEXT:   %b = f32[4,8]{1,0} broadcast(%param_0), dimensions={0}
    CHECK-NEXT:   ROOT %m = f32[4,8]{1,0} multiply(%b, %param_1)
    CHECK-NEXT: }
    CHECK:      %[[ADD:fused_computation[.0-9]*]] (param_0: f32[4], param_1: f32[4,8]) -> f32[4,8] {
    CHECK-NEXT:   %param_0 = f32[4]{0} parameter(0)
    CHECK-NEXT:   %param_1 = f32[4,8]{1,0} parameter(1)
    CHECK-NEXT:   %b.dup = f32[4,8]{1,0} broadcast(%param_0), dimensions={0}
    CHECK-NEXT:   ROOT %a = f32[4,8]{1,0} add(%b.dup, %param_1)
    CHECK-NEXT: }
    CHECK:      ENTRY
    CHECK:        %y = f32[4,8]{1,0} parameter(1)
    CHECK-NEXT:   fusion(%x, %y), kind=kLoop, calls=%[[MUL]]
    CHECK-NEXT:   fusion(%x, %y), kind=kLoop, calls=%[[ADD]]
    CHECK-NEXT:   ROOT %t
    """)
    log = FusionLog()
    assert_rewrite(DUP, ProducerConsumerFusion(profitable=never_duplicate, log=log), None)
    assert log.refused()[("b", "a")] == "cost: duplication disabled"


def test_producer_consumer_reports_unchanged_when_nothing_fuses():
    assert_rewrite("""HloModule m

ENTRY e {
  x = f32[4,4]{1,0} parameter(0)
  ROOT d = f32[4,4]{1,0} dot(x, x), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}
""", ProducerConsumerFusion(), None)


def test_custom_profitability_is_a_callable():
    log = FusionLog()
    assert_rewrite(SRC, ProducerConsumerFusion(profitable=lambda p, users, dup: Decision.forbid("cost: no"), log=log), None)
    assert set(log.refused().values()) <= {"cost: no", "producer is a parameter", "consumer is a dot", "producer is a dot",
                                           "expensive producer would be recomputed per reused element",
                                           "consumer is tuple-shaped"}


def test_library_dot_fusion_wraps_the_dots_ynn_takes_only():
    # [M,K]x[K,N], [M,K]x[N,K] and leading batch dims are wrapped, each alone in a
    # kCustom fusion, in f32 and bf16; YNN fails at run time on a degenerate N=1
    # matrix (n) and stock XLA:CPU hands it no f16 dot (h): those stay dots.  A lhs
    # contracting its first dim (l) is transposed by a loop fusion first, then wrapped.
    assert_rewrite("""HloModule m

ENTRY e {
  x = f32[4,8]{1,0} parameter(0)
  y = f32[8,2]{1,0} parameter(1)
  q = f32[2,3,4,8]{3,2,1,0} parameter(2)
  k = f32[2,3,8,5]{3,2,1,0} parameter(3)
  v = f32[8,1]{1,0} parameter(4)
  a = bf16[4,8]{1,0} parameter(5)
  c = f16[4,8]{1,0} parameter(6)
  d = f32[4,2]{1,0} dot(x, y), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  t = f32[4,4]{1,0} dot(x, x), lhs_contracting_dims={1}, rhs_contracting_dims={1}
  b = f32[2,3,4,5]{3,2,1,0} dot(q, k), lhs_batch_dims={0,1}, lhs_contracting_dims={3}, rhs_batch_dims={0,1}, rhs_contracting_dims={2}
  n = f32[4,1]{1,0} dot(x, v), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  l = f32[2,4]{1,0} dot(y, x), lhs_contracting_dims={0}, rhs_contracting_dims={1}
  m = bf16[4,4]{1,0} dot(a, a), lhs_contracting_dims={1}, rhs_contracting_dims={1}
  h = f16[4,4]{1,0} dot(c, c), lhs_contracting_dims={1}, rhs_contracting_dims={1}
  ROOT r = (f32[4,2]{1,0}, f32[4,4]{1,0}, f32[2,3,4,5]{3,2,1,0}, f32[4,1]{1,0}, f32[2,4]{1,0}, bf16[4,4]{1,0}, f16[4,4]{1,0}) tuple(d, t, b, n, l, m, h)
}
""", LibraryDotFusion(), """
    CHECK:      %[[D:fused_computation[.0-9]*]] (param_0: f32[4,8], param_1: f32[8,2]) -> f32[4,2] {
    CHECK-NEXT:   %param_0 = f32[4,8]{1,0} parameter(0)
    CHECK-NEXT:   %param_1 = f32[8,2]{1,0} parameter(1)
    CHECK-NEXT:   ROOT %d = f32[4,2]{1,0} dot(%param_0, %param_1), lhs_contracting_dims={1}, rhs_contracting_dims={0}
    CHECK-NEXT: }
    CHECK:      %[[T:fused_computation[.0-9]*]] (param_0: f32[4,8]) -> f32[4,4] {
    CHECK-NEXT:   %param_0 = f32[4,8]{1,0} parameter(0)
    CHECK-NEXT:   ROOT %t = f32[4,4]{1,0} dot(%param_0, %param_0), lhs_contracting_dims={1}, rhs_contracting_dims={1}
    CHECK-NEXT: }
    CHECK:      %[[B:fused_computation[.0-9]*]] (param_0: f32[2,3,4,8], param_1: f32[2,3,8,5]) -> f32[2,3,4,5] {
    CHECK-NEXT:   %param_0 = f32[2,3,4,8]{3,2,1,0} parameter(0)
    CHECK-NEXT:   %param_1 = f32[2,3,8,5]{3,2,1,0} parameter(1)
    CHECK-NEXT:   ROOT %b = f32[2,3,4,5]{3,2,1,0} dot(%param_0, %param_1), lhs_batch_dims={0,1}
    CHECK-NEXT: }
    CHECK:      %[[LT:fused_computation[.0-9]*]] (param_0: f32[8,2]) -> f32[2,8] {
    CHECK-NEXT:   %param_0 = f32[8,2]{1,0} parameter(0)
    CHECK-NEXT:   ROOT %l.lhs_transposed = f32[2,8]{1,0} transpose(%param_0), dimensions={1,0}
    CHECK-NEXT: }
    CHECK:      %[[L:fused_computation[.0-9]*]] (param_0: f32[2,8], param_1: f32[4,8]) -> f32[2,4] {
    CHECK:        ROOT %l.canonical = f32[2,4]{1,0} dot(%param_0, %param_1), lhs_contracting_dims={1}, rhs_contracting_dims={1}
    CHECK-NEXT: }
    CHECK:      %[[M:fused_computation[.0-9]*]] (param_0: bf16[4,8]) -> bf16[4,4] {
    CHECK:        ROOT %m = bf16[4,4]{1,0} dot(%param_0, %param_0)
    CHECK:      ENTRY
    CHECK:        %c = f16[4,8]{1,0} parameter(6)
    CHECK-NEXT:   %ynn_fusion = f32[4,2]{1,0} fusion(%x, %y), kind=kCustom, calls=%[[D]], backend_config={"fusion_config":{"kind":"__ynn_fusion"}}
    CHECK-NEXT:   %ynn_fusion.1 = f32[4,4]{1,0} fusion(%x), kind=kCustom, calls=%[[T]], backend_config={{.*}}__ynn_fusion
    CHECK-NEXT:   %ynn_fusion.2 = f32[2,3,4,5]{3,2,1,0} fusion(%q, %k), kind=kCustom, calls=%[[B]], backend_config={{.*}}__ynn_fusion
    CHECK-NEXT:   %n = f32[4,1]{1,0} dot(%x, %v)
    CHECK-NEXT:   %transpose_fusion = f32[2,8]{1,0} fusion(%y), kind=kLoop, calls=%[[LT]]
    CHECK-NEXT:   %ynn_fusion.3 = f32[2,4]{1,0} fusion(%transpose_fusion, %x), kind=kCustom, calls=%[[L]], backend_config={{.*}}__ynn_fusion
    CHECK-NEXT:   %ynn_fusion.4 = bf16[4,4]{1,0} fusion(%a), kind=kCustom, calls=%[[M]], backend_config={{.*}}__ynn_fusion
    CHECK-NEXT:   %h = f16[4,4]{1,0} dot(%c, %c)
    CHECK-NEXT:   ROOT %r = {{.*}} tuple(%ynn_fusion, %ynn_fusion.1, %ynn_fusion.2, %n, %ynn_fusion.3, {{.*}}%ynn_fusion.4, %h)
    """)


def test_call_inliner():
    # the call's body moves into the entry and the callee, now unused, goes
    assert_rewrite("""HloModule m

neg {
  a = f32[4]{0} parameter(0)
  ROOT n = f32[4]{0} negate(a)
}

ENTRY e {
  x = f32[4]{0} parameter(0)
  c = f32[4]{0} call(x), to_apply=neg
  ROOT e = f32[4]{0} exponential(c)
}
""", CallInliner(), """
    CHECK-NOT:  %neg
    CHECK:      ENTRY %e (x: f32[4]) -> f32[4] {
    CHECK-NEXT:   %x = f32[4]{0} parameter(0)
    CHECK-NEXT:   %[[N:[^ ]+]] = f32[4]{0} negate(%x)
    CHECK-NEXT:   ROOT %e = f32[4]{0} exponential(%[[N]])
    CHECK-NEXT: }
    CHECK-NOT:  {
    """)


def test_text_route_small_module_equal_and_kept(xla_cpu):
    module = hlo_tools.parse(SRC)
    ProducerConsumerFusion().run(module)
    res = Measurement("cpu").compile(module, AS_WRITTEN)
    assert len(res.fusions()) >= sum(i.opcode is HloOpcode.FUSION for i in module.entry)
    assert compare(hlo_tools.parse(SRC), module, pipeline_b="as-written").verdict in ("exact", "close")


# every runnable corpus module through the hook: tests/test_fusion_corpus.py


def test_expensive_producer_not_recomputed_through_a_bitcast_into_a_broadcast():
    """rsqrt -> bitcast -> broadcast: the bitcast reads each element once, but the
    broadcast behind it reuses them, so fusing rsqrt would recompute it per element."""
    log = FusionLog()
    assert_rewrite("""HloModule m

ENTRY e {
  x = f32[4,1]{1,0} parameter(0)
  y = f32[4,16]{1,0} parameter(1)
  r = f32[4,1]{1,0} rsqrt(x)
  c = f32[4]{0} bitcast(r)
  b = f32[4,16]{1,0} broadcast(c), dimensions={0}
  ROOT m = f32[4,16]{1,0} multiply(b, y)
}
""", ProducerConsumerFusion(log=log), """
    CHECK:      %[[BODY:fused_computation[.0-9]*]] (param_0: f32[4,1], param_1: f32[4,16]) -> f32[4,16] {
    CHECK-NEXT:   %param_0 = f32[4,1]{1,0} parameter(0)
    CHECK-NEXT:   %param_1 = f32[4,16]{1,0} parameter(1)
    CHECK-NEXT:   %c = f32[4]{0} bitcast(%param_0)
    CHECK-NEXT:   %b = f32[4,16]{1,0} broadcast(%c), dimensions={0}
    CHECK-NEXT:   ROOT %m = f32[4,16]{1,0} multiply(%b, %param_1)
    CHECK-NEXT: }
    CHECK:      ENTRY
    CHECK:        %r = f32[4,1]{1,0} rsqrt(%x)
    CHECK-NEXT:   ROOT %loop_fusion = f32[4,16]{1,0} fusion(%r, %y), kind=kLoop, calls=%[[BODY]]
    """)
    assert log.refused()[("r", "c")] == "expensive producer would be recomputed per reused element"


SIBLINGS = "HloModule m\n\n" + ADD_REDUCER + """
ENTRY e {
  x = f32[4,8]{1,0} parameter(0)
  y = f32[4,8]{1,0} parameter(1)
  p = f32[4,8]{1,0} multiply(x, y)
  n = f32[4,8]{1,0} exponential(p)
  c = f32[4,8]{1,0} negate(p)
  z = f32[] constant(0)
  r = f32[4]{0} reduce(p, z), dimensions={1}, to_apply=add
  g = f32[4,8]{1,0} rng(x, y), distribution=rng_uniform
  w = f32[4,8]{1,0} add(p, g)
  u = f32[4,8]{1,0} sqrt(x)
  v = f32[4,8]{1,0} add(u, n)
  q = f32[4,8]{1,0} tanh(x)
  ROOT t = (f32[4,8]{1,0}, f32[4,8]{1,0}, f32[4]{0}, f32[4,8]{1,0}, f32[4,8]{1,0}, f32[4,8]{1,0}) tuple(n, c, r, w, v, q)
}
"""


def test_multi_output_fuses_siblings_and_refuses_with_reasons():
    log = FusionLog()
    # readers of x: p, u, q merge (no path between them); the rng g is refused.
    # readers of p: n, c and w merge; the reduce r has another output shape.
    assert_rewrite(SIBLINGS, MultiOutputFusion(log=log), """
    CHECK:      %[[OF_X:fused_computation[.0-9]*]] (param_0: f32[4,8], param_1: f32[4,8]) -> (f32[4,8], f32[4,8], f32[4,8]) {
    CHECK-NEXT:   %param_0 = f32[4,8]{1,0} parameter(0)
    CHECK-NEXT:   %param_1 = f32[4,8]{1,0} parameter(1)
    CHECK-NEXT:   %p = f32[4,8]{1,0} multiply(%param_0, %param_1)
    CHECK-NEXT:   %u = f32[4,8]{1,0} sqrt(%param_0)
    CHECK-NEXT:   %q = f32[4,8]{1,0} tanh(%param_0)
    CHECK-NEXT:   ROOT %tuple = {{.*}} tuple(%p, %u, %q)
    CHECK-NEXT: }
    CHECK:      %[[OF_P:fused_computation[.0-9]*]] (param_0: f32[4,8], param_1: f32[4,8]) -> (f32[4,8], f32[4,8], f32[4,8]) {
    CHECK-NEXT:   %param_0 = f32[4,8]{1,0} parameter(0)
    CHECK-NEXT:   %param_1 = f32[4,8]{1,0} parameter(1)
    CHECK-NEXT:   %n = f32[4,8]{1,0} exponential(%param_0)
    CHECK-NEXT:   %c = f32[4,8]{1,0} negate(%param_0)
    CHECK-NEXT:   %w = f32[4,8]{1,0} add(%param_0, %param_1)
    CHECK-NEXT:   ROOT %tuple = {{.*}} tuple(%n, %c, %w)
    CHECK-NEXT: }
    CHECK:      ENTRY
    CHECK-NOT:    fusion(
    CHECK:        %g = f32[4,8]{1,0} rng(%x, %y)
    CHECK-NEXT:   %multi_output_fusion = {{.*}} fusion(%x, %y), kind=kLoop, calls=%[[OF_X]]
    CHECK-NEXT:   %[[P:[^ ]+]] = f32[4,8]{1,0} get-tuple-element(%multi_output_fusion), index=0
    CHECK-NEXT:   %r = f32[4]{0} reduce(%[[P]], %z)
    CHECK-NEXT:   %multi_output_fusion.1 = {{.*}} fusion(%[[P]], %g), kind=kLoop, calls=%[[OF_P]]
    CHECK-NOT:    fusion(
    """)
    decisions = [(p, c, d.reason) for p, c, d in log.entries]
    assert ("p", "g", "second sibling: %g has a side effect") in decisions
    assert ("n", "r", "outputs have different shapes: [4,8]{1,0}, [4]{0}") in decisions
    assert ("n", "c", "") in decisions and ("n", "w", "") in decisions


def test_multi_output_refuses_a_cycle_and_a_user():
    module = hlo_tools.parse("""HloModule m

ENTRY e {
  x = f32[8]{0} parameter(0)
  a = f32[8]{0} exponential(x)
  b = f32[8]{0} log(a)
  c = f32[8]{0} sqrt(x)
  d = f32[8]{0} add(b, c)
  k = f32[8]{0} tanh(x)
  ROOT t = (f32[8]{0}, f32[8]{0}) tuple(d, k)
}
""")
    log = FusionLog()
    MultiOutputFusion(log=log).run(module)
    reasons = {(p, c): d.reason for p, c, d in log.entries}
    # a, c, k read x. a+c+k is legal (a -> b -> d <- c is no path between a and c)
    assert reasons[("a", "c")] == "" and reasons[("a", "k")] == ""
    module = hlo_tools.parse("""HloModule m

ENTRY e {
  x = f32[8]{0} parameter(0)
  a = f32[8]{0} exponential(x)
  b = f32[8]{0} dot(a, a), lhs_batch_dims={0}, rhs_batch_dims={0}
  c = f32[8]{0} add(x, b)
  u = f32[8]{0} multiply(x, a)
  ROOT t = (f32[8]{0}, f32[8]{0}) tuple(c, u)
}
""")
    hlo_tools.verify(module)
    log = FusionLog()
    MultiOutputFusion(log=log).run(module)
    hlo_tools.verify(module)
    reasons = {(p, c): d.reason for p, c, d in log.entries}
    # readers of x: a, c, u. a feeds u directly (a user), and a reaches c through the dot
    assert reasons[("a", "c")] == "would create a cycle"
    assert reasons[("a", "u")] == "one sibling uses the other (producer-consumer fusion decides that)"


def test_multi_output_then_producer_consumer_absorbs_the_shared_value():
    # m fed n and c and could not be duplicated (arithmetic); once its users share a
    # fusion it moves in, and is computed once and never written to memory
    assert_rewrite(SRC, PassManager(parse_pipeline("producer-consumer-fusion,multi-output-fusion,producer-consumer-fusion,dce")), """
    CHECK:      %[[MO:fused_computation[.0-9]*]] (param_0: f32[4,8], param_1: f32[4,8]) -> (f32[4,8], f32[4,8]) {
    CHECK-NEXT:   %param_0 = f32[4,8]{1,0} parameter(0)
    CHECK-NEXT:   %param_1 = f32[4,8]{1,0} parameter(1)
    CHECK-NEXT:   %m = f32[4,8]{1,0} multiply(%param_0, %param_1)
    CHECK-NEXT:   %n = f32[4,8]{1,0} exponential(%m)
    CHECK-NEXT:   %c = f32[4,8]{1,0} negate(%m)
    CHECK-NEXT:   ROOT %tuple = {{.*}} tuple(%n, %c)
    CHECK-NEXT: }
    CHECK:      ENTRY
    CHECK-NOT:    multiply
    CHECK:        fusion(%x, %y), kind=kLoop, calls=%[[MO]]
    CHECK-NOT:    multiply
    """)


SOFTMAX = "HloModule m\n\n" + ADD_REDUCER + """
max {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] maximum(a, b)
}

ENTRY e {
  x = f32[4,8]{1,0} parameter(0)
  ninf = f32[] constant(-inf)
  m = f32[4]{0} reduce(x, ninf), dimensions={1}, to_apply=max
  mb = f32[4,8]{1,0} broadcast(m), dimensions={0}
  s = f32[4,8]{1,0} subtract(x, mb)
  ex = f32[4,8]{1,0} exponential(s)
  z = f32[] constant(0)
  r = f32[4]{0} reduce(ex, z), dimensions={1}, to_apply=add
  rb = f32[4,8]{1,0} broadcast(r), dimensions={0}
  ROOT d = f32[4,8]{1,0} divide(ex, rb)
}
"""


def test_reduction_epilogue_recomputes_the_softmax_chain_in_the_sum():
    log = FusionLog()
    # the sum recomputes exp(x - max); exp is then only read by the divide, which
    # takes the chain too: exp is never written to memory. The max stays alone.
    assert_rewrite(SOFTMAX, PassManager([ReductionEpilogueFusion(log=log)] + parse_pipeline("producer-consumer-fusion,dce")), """
    CHECK:      %[[SUM:fused_computation[.0-9]*]] (param_0: f32[4], param_1: f32[4,8]) -> f32[4] {
    CHECK-NEXT:   %param_0 = f32[4]{0} parameter(0)
    CHECK-NEXT:   %param_1 = f32[4,8]{1,0} parameter(1)
    CHECK-NEXT:   %mb.dup = f32[4,8]{1,0} broadcast(%param_0), dimensions={0}
    CHECK-NEXT:   %s.dup = f32[4,8]{1,0} subtract(%param_1, %mb.dup)
    CHECK-NEXT:   %ex.dup = f32[4,8]{1,0} exponential(%s.dup)
    CHECK-NEXT:   %z = f32[] constant(0)
    CHECK-NEXT:   ROOT %r = f32[4]{0} reduce(%ex.dup, %z), dimensions={1}, to_apply=%add
    CHECK-NEXT: }
    CHECK:      %[[DIV:fused_computation[.0-9]*]] (param_0: f32[4], param_1: f32[4,8], param_2: f32[4]) -> f32[4,8] {
    CHECK-NEXT:   %param_0 = f32[4]{0} parameter(0)
    CHECK-NEXT:   %param_1 = f32[4,8]{1,0} parameter(1)
    CHECK-NEXT:   %param_2 = f32[4]{0} parameter(2)
    CHECK-NEXT:   %mb = f32[4,8]{1,0} broadcast(%param_0), dimensions={0}
    CHECK-NEXT:   %s = f32[4,8]{1,0} subtract(%param_1, %mb)
    CHECK-NEXT:   %ex = f32[4,8]{1,0} exponential(%s)
    CHECK-NEXT:   %rb = f32[4,8]{1,0} broadcast(%param_2), dimensions={0}
    CHECK-NEXT:   ROOT %d = f32[4,8]{1,0} divide(%ex, %rb)
    CHECK-NEXT: }
    CHECK:      ENTRY
    CHECK:        %m = f32[4]{0} reduce(%x, %ninf), dimensions={1}, to_apply=%max
    CHECK-NEXT:   %reduction_fusion = f32[4]{0} fusion(%m, %x), {{.*}}calls=%[[SUM]]
    CHECK-NEXT:   ROOT %loop_fusion = f32[4,8]{1,0} fusion(%m, %x, %reduction_fusion), kind=kLoop, calls=%[[DIV]]
    """)
    refused = log.refused()
    assert refused[("m", "mb.dup")] == "expensive producer would be recomputed per reused element"
    assert refused[("x", "s.dup")] == "producer is a parameter"


def test_reduction_epilogue_leaves_max_reductions_and_respects_its_budget():
    assert_rewrite(SOFTMAX.replace("to_apply=add", "to_apply=max"), ReductionEpilogueFusion(), None)  # no sum: a max compares its inputs
    log = FusionLog()
    # a budget of one: only the exponential is recomputed in the sum
    assert_rewrite(SOFTMAX, ReductionEpilogueFusion(max_duplicated=1, log=log), """
    CHECK:      %[[SUM:fused_computation[.0-9]*]] (param_0: f32[4,8]) -> f32[4] {
    CHECK-NEXT:   %param_0 = f32[4,8]{1,0} parameter(0)
    CHECK-NEXT:   %ex.dup = f32[4,8]{1,0} exponential(%param_0)
    CHECK-NEXT:   %z = f32[] constant(0)
    CHECK-NEXT:   ROOT %r = f32[4]{0} reduce(%ex.dup, %z), dimensions={1}, to_apply=%add
    CHECK-NEXT: }
    CHECK:      ENTRY
    CHECK:        %s = f32[4,8]{1,0} subtract(%x, %mb)
    CHECK-NEXT:   %ex = f32[4,8]{1,0} exponential(%s)
    CHECK-NEXT:   %reduction_fusion = f32[4]{0} fusion(%s), {{.*}}calls=%[[SUM]]
    """)
    assert log.refused()[("s", "ex.dup")] == "cost: recomputation budget of this reduction spent"


