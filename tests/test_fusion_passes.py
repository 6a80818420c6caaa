"""Fusion passes: what each fuses and refuses on small modules, and equal outputs
with XLA keeping our fusions on a small corpus module."""

from __future__ import annotations



import hlo_tools
from tests.passes_util import ADD_REDUCER, SOFTMAX_CHAIN
from hlo_tools import HloOpcode
from passes import PassManager
from passes.fusion.call_inliner import CallInliner
from fusion_analysis.legality import Decision
from passes.fusion.library_dot import LibraryDotFusion
from passes.fusion.pipeline import BEST, FusionHook, passes_of
from passes.fusion.producer_consumer import FusionLog, ProducerConsumerFusion
from passes.fusion.profitability import never_duplicate

SRC = SOFTMAX_CHAIN


def _fusions(module):
    return {f.name: sorted(i.name for i in f.fused_computation if i.opcode is not HloOpcode.PARAMETER)
            for f in module.entry if f.opcode is HloOpcode.FUSION}


def test_producer_consumer_fuses_and_refuses_with_reasons():
    module = hlo_tools.parse(SRC)
    log = FusionLog()
    assert PassManager([ProducerConsumerFusion(log=log)], check_changed=True).run(module).changed
    hlo_tools.verify(module)
    assert _fusions(module) == {"loop_fusion": ["b", "k"]}  # the broadcast of the reduction joins the subtract
    refused = log.refused()
    assert refused[("r", "b")] == "expensive producer would be recomputed per reused element"
    assert refused[("n", "k")] == "cost: expensive producer would be duplicated"
    assert refused[("n", "r")] == "cost: expensive producer would be duplicated"
    assert refused[("x", "m")] == "producer is a parameter"
    # m feeds n and c: it would have to be duplicated, and duplicating arithmetic is
    # refused (FMA contraction may differ per copy); sibling fusion is the fix
    assert refused[("m", "c")] == refused[("m", "n")] == "cost: duplicated arithmetic may not recompute bit-identically"
    # the reduce only gained its init constant, and a lone op plus a constant is no fusion (as in XLA:CPU)
    assert ("z", "r") in log.fused() and module.entry.get_instruction("r").opcode is HloOpcode.REDUCE
    assert module.entry.get_instruction("d").opcode is HloOpcode.DOT  # dots stay library calls


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
    dup = hlo_tools.parse(DUP)
    assert ProducerConsumerFusion().run(dup)
    assert sorted(_fusions(dup).values()) == [["a", "b.dup"], ["b", "m"]]  # the broadcast is recomputed in both
    nodup = hlo_tools.parse(DUP)
    log = FusionLog()
    ProducerConsumerFusion(profitable=never_duplicate, log=log).run(nodup)
    assert not any(".dup" in i.name for c in nodup.computations for i in c)
    assert log.refused()[("b", "a")] == "cost: duplication disabled"


def test_producer_consumer_reports_unchanged_when_nothing_fuses():
    module = hlo_tools.parse("""HloModule m

ENTRY e {
  x = f32[4,4]{1,0} parameter(0)
  ROOT d = f32[4,4]{1,0} dot(x, x), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}
""")
    before = module.to_text()
    assert not ProducerConsumerFusion().run(module)
    assert module.to_text() == before


def test_custom_profitability_is_a_callable():
    module = hlo_tools.parse(SRC)
    log = FusionLog()
    ProducerConsumerFusion(profitable=lambda p, users, dup: Decision.forbid("cost: no"), log=log).run(module)
    assert not _fusions(module)
    assert set(log.refused().values()) <= {"cost: no", "producer is a parameter", "consumer is a dot", "producer is a dot",
                                           "expensive producer would be recomputed per reused element",
                                           "consumer is tuple-shaped"}


def test_library_dot_fusion_wraps_the_dots_ynn_takes_only():
    module = hlo_tools.parse("""HloModule m

ENTRY e {
  x = f32[4,8]{1,0} parameter(0)
  y = f32[8,2]{1,0} parameter(1)
  q = f32[2,3,4,8]{3,2,1,0} parameter(2)
  k = f32[2,3,8,5]{3,2,1,0} parameter(3)
  v = f32[8,1]{1,0} parameter(4)
  d = f32[4,2]{1,0} dot(x, y), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  t = f32[4,4]{1,0} dot(x, x), lhs_contracting_dims={1}, rhs_contracting_dims={1}
  b = f32[2,3,4,5]{3,2,1,0} dot(q, k), lhs_batch_dims={0,1}, lhs_contracting_dims={3}, rhs_batch_dims={0,1}, rhs_contracting_dims={2}
  n = f32[4,1]{1,0} dot(x, v), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  l = f32[2,8]{1,0} dot(y, x), lhs_contracting_dims={0}, rhs_contracting_dims={1}
  ROOT r = (f32[4,2]{1,0}, f32[4,4]{1,0}, f32[2,3,4,5]{3,2,1,0}, f32[4,1]{1,0}, f32[2,8]{1,0}) tuple(d, t, b, n, l)
}
""")
    assert LibraryDotFusion().run(module)
    wrapped = {f.fused_computation.root.name for f in module.entry if f.opcode is HloOpcode.FUSION}
    assert wrapped == {"d", "t", "b"}  # [M,K]x[K,N], [M,K]x[N,K], leading batch dims
    f = module.entry.get_instruction("ynn_fusion")
    assert f.attribute("kind") == "kCustom" and "__ynn_fusion" in f.attribute("backend_config")
    # YNN fails at run time on a degenerate N=1 matrix; the lhs must contract its last dim
    assert module.entry.get_instruction("n").opcode is module.entry.get_instruction("l").opcode is HloOpcode.DOT


def test_call_inliner():
    module = hlo_tools.parse("""HloModule m

neg {
  a = f32[4]{0} parameter(0)
  ROOT n = f32[4]{0} negate(a)
}

ENTRY e {
  x = f32[4]{0} parameter(0)
  c = f32[4]{0} call(x), to_apply=neg
  ROOT e = f32[4]{0} exponential(c)
}
""")
    assert CallInliner().run(module)
    hlo_tools.verify(module)
    assert [i.opcode_text for i in module.entry] == ["parameter", "negate", "exponential"]
    assert len(module.computations) == 1


def test_text_route_small_module_equal_and_kept(xla_cpu):
    from xla_bridge.xla_compile import compile
    from xla_bridge.xla_run import compare

    module = hlo_tools.parse(SRC)
    ProducerConsumerFusion().run(module)
    res = compile(module, "cpu", "as-written")
    assert len(res.fusions()) >= len(_fusions(module))
    assert compare(hlo_tools.parse(SRC), module, pipeline_b="as-written").verdict in ("exact", "close")


# every runnable corpus module through the hook: tests/test_fusion_corpus.py


def test_expensive_producer_not_recomputed_through_a_bitcast_into_a_broadcast():
    """rsqrt -> bitcast -> broadcast: the bitcast reads each element once, but the
    broadcast behind it reuses them, so fusing rsqrt would recompute it per element."""
    module = hlo_tools.parse("""HloModule m

ENTRY e {
  x = f32[4,1]{1,0} parameter(0)
  y = f32[4,16]{1,0} parameter(1)
  r = f32[4,1]{1,0} rsqrt(x)
  c = f32[4]{0} bitcast(r)
  b = f32[4,16]{1,0} broadcast(c), dimensions={0}
  ROOT m = f32[4,16]{1,0} multiply(b, y)
}
""")
    log = FusionLog()
    ProducerConsumerFusion(log=log).run(module)
    assert _fusions(module) == {"loop_fusion": ["b", "c", "m"]}
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
    from passes.fusion.multi_output import MultiOutputFusion

    module = hlo_tools.parse(SIBLINGS)
    log = FusionLog()
    assert MultiOutputFusion(log=log).run(module)
    hlo_tools.verify(module)
    # readers of x: p, u, q merge (no path between them); the rng g is refused.
    # readers of p: n, c and w merge; the reduce r has another output shape.
    assert _fusions(module) == {"multi_output_fusion": ["p", "q", "tuple", "u"],
                                "multi_output_fusion.1": ["c", "n", "tuple", "w"]}
    decisions = [(p, c, d.reason) for p, c, d in log.entries]
    assert ("p", "g", "second sibling: %g has a side effect") in decisions
    assert ("n", "r", "outputs have different shapes: [4,8]{1,0}, [4]{0}") in decisions
    assert ("n", "c", "") in decisions and ("n", "w", "") in decisions


def test_multi_output_refuses_a_cycle_and_a_user():
    from passes.fusion.multi_output import MultiOutputFusion

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
    module = hlo_tools.parse(SRC)
    PassManager(passes_of("producer-consumer-fusion,multi-output-fusion,producer-consumer-fusion,dce")).run(module)
    hlo_tools.verify(module)
    # m fed n and c and could not be duplicated (arithmetic); once its users share a
    # fusion it moves in, and is computed once and never written to memory
    assert ["c", "m", "n", "tuple"] in _fusions(module).values()


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
    from passes.fusion.reduction_epilogue import ReductionEpilogueFusion

    module = hlo_tools.parse(SOFTMAX)
    log = FusionLog()
    PassManager([ReductionEpilogueFusion(log=log)] + passes_of("producer-consumer-fusion,dce")).run(module)
    hlo_tools.verify(module)
    fused = _fusions(module)
    # the sum recomputes exp(x - max); exp is then only read by the divide, which
    # takes the chain too: exp is never written to memory
    assert fused == {"reduction_fusion": ["ex.dup", "mb.dup", "r", "s.dup", "z"],
                     "loop_fusion": ["d", "ex", "mb", "rb", "s"]}
    refused = log.refused()
    assert refused[("m", "mb.dup")] == "expensive producer would be recomputed per reused element"
    assert refused[("x", "s.dup")] == "producer is a parameter"
    assert module.entry.get_instruction("m").opcode is HloOpcode.REDUCE  # the max stays alone


def test_reduction_epilogue_leaves_max_reductions_and_respects_its_budget():
    from passes.fusion.reduction_epilogue import ReductionEpilogueFusion

    module = hlo_tools.parse(SOFTMAX.replace("to_apply=add", "to_apply=max"))
    assert not ReductionEpilogueFusion().run(module)  # no sum: a max compares its inputs
    module = hlo_tools.parse(SOFTMAX)
    log = FusionLog()
    ReductionEpilogueFusion(max_duplicated=1, log=log).run(module)
    assert log.refused()[("s", "ex.dup")] == "cost: recomputation budget of this reduction spent"
