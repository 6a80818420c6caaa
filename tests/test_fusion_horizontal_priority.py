"""Horizontal and priority fusion: exactly what each fuses and refuses (and why)
on small hand-written modules, and equal outputs with XLA keeping our fusions on
a small corpus module through the pre-scheduler hook."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

import hlo_tools
from tests.passes_util import SOFTMAX_CHAIN
from hlo_tools import HloOpcode
from passes import PassManager
from passes.fusion.horizontal import HorizontalFusion, HorizontalLog
from fusion_analysis.legality import Decision
from passes.fusion.pipeline import FusionHook, passes_of
from passes.fusion.priority import Candidate, PriorityFusion, PriorityLog, default_cost
from passes.fusion.profitability import never_duplicate
from passes.registry import parse_pipeline


def _fusions(module) -> dict[str, list[str]]:
    """fusion name -> names of its body's instructions (no parameters, no tuple root)."""
    out = {}
    for f in module.entry:
        if f.opcode is HloOpcode.FUSION:
            body = f.fused_computation
            out[f.name] = sorted(i.name for i in body if i.opcode is not HloOpcode.PARAMETER
                                 and not (i is body.root and i.opcode is HloOpcode.TUPLE))
    return out


def test_both_passes_are_registered():
    names = [p.name for p in parse_pipeline("priority-fusion,horizontal-fusion,dce")]
    assert names == ["priority-fusion", "horizontal-fusion", "dce"]


# -- priority fusion ---------------------------------------------------------------

#: a softmax-like chain: the exp feeds a reduce and a subtract, the multiply feeds
#: the exp and a negate, a dot and the root read results.
CHAIN = SOFTMAX_CHAIN


def test_priority_fuses_by_benefit_and_refuses_with_reasons():
    module = hlo_tools.parse(CHAIN)
    log = PriorityLog()
    assert PassManager([PriorityFusion(log=log)], check_changed=True).run(module).changed
    hlo_tools.verify(module)
    assert _fusions(module) == {"priority_fusion": ["b", "k"]}
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
    assert module.entry.get_instruction("d").opcode is HloOpcode.DOT
    assert module.entry.get_instruction("r").opcode is HloOpcode.REDUCE  # a reduce plus a constant is no fusion


def test_priority_multi_output_merges_instead_of_duplicating_and_refuses_cycles_and_shapes():
    module = hlo_tools.parse(CHAIN)
    log = PriorityLog()
    assert PriorityFusion(log=log, multi_output=True).run(module)
    hlo_tools.verify(module)
    fusions = _fusions(module)
    assert sorted(fusions.values()) == [["b", "k"], ["m", "n"]]
    mo = next(module.entry.get_instruction(n) for n, body in fusions.items() if body == ["m", "n"])
    assert mo.shape.is_tuple  # m stays an output for c: nothing is recomputed
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
    module = hlo_tools.parse(DUP)
    log = PriorityLog()
    assert PriorityFusion(log=log).run(module)
    hlo_tools.verify(module)
    # the broadcast is copied into both users (the original is gone): 128 B result
    # written once and read twice saved, its 16 B input is cheap (cached)
    assert sorted(_fusions(module).values()) == [["a", "b.dup.1"], ["b.dup", "m"]]
    assert log.steps == [("b", ("m", "a"), 384, "duplicate")]
    # the transpose must stay for the dot, so a copy in the sine would read its
    # input again for the one read it saves: no benefit
    assert log.refused()[("tr", "s")] == "cost: benefit 0 <= 0"
    assert log.refused()[("tr", "d")] == "consumer is a dot"
    assert module.entry.get_instruction("tr").opcode is HloOpcode.TRANSPOSE

    nodup = hlo_tools.parse(DUP)
    log = PriorityLog()
    assert not PriorityFusion(profitable=never_duplicate, log=log).run(nodup)
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
    assert PriorityFusion(cost=roofline, log=log).run(module)
    hlo_tools.verify(module)
    assert _fusions(module) == {"priority_fusion": ["e", "n"]}
    assert log.refused()[("r", "a")] == "producer has a side effect"
    assert [c.producer.name for c in seen] == ["n", "n"]  # queued, then re-checked when popped
    assert log.steps == [("n", ("e",), 0.128, "merge")]

    module = hlo_tools.parse(module.to_text())
    log = PriorityLog()
    assert not PriorityFusion(cost=lambda c: -1.0, log=log).run(module)


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
    module = hlo_tools.parse(UPDATES)
    log = HorizontalLog()
    assert HorizontalFusion(log=log).run(module)
    hlo_tools.verify(module)
    assert _fusions(module) == {"horizontal_fusion": ["a", "b", "s"]}
    f = module.entry.get_instruction("horizontal_fusion")
    assert f.attribute("kind") == "kLoop" and [str(s) for s in f.shape.tuple_shapes] == ["f32[8]{0}"] * 3
    assert log.batches == [["a", "b", "s"]]
    refused = log.refused()
    assert refused[("c", "a")] == "dependent: uses or feeds a member"  # c reads a
    assert refused[("d", "c")] == "shape mismatch: [4, 2]{1,0} vs [8]{0}"
    assert refused[("e", "")] == "too large: 262144 bytes > 65536"
    assert refused[("r", "")] == "has a side effect"
    # c opened its own group and found no partner, so it stays a kernel of its own
    assert module.entry.get_instruction("c").opcode is HloOpcode.ADD


def test_horizontal_refuses_paths_through_other_kernels_and_caps_groups():
    module = hlo_tools.parse("""HloModule m

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
""")
    log = HorizontalLog()
    assert HorizontalFusion(max_members=2, log=log).run(module)
    hlo_tools.verify(module)
    # a and c fill the first group; b could not join it, so it leads the second
    assert sorted(_fusions(module).values()) == [["a", "c"], ["b", "f"]]
    refused = log.refused()
    assert refused[("b", "a")] == "would create a cycle: a path leads from one member to another"  # a -> d -> b
    assert refused[("h", "b")] == "cap: group has 2 members"  # f joined b's group, h found both full
    assert refused[("d", "")] == "is a dot"

    module = hlo_tools.parse(UPDATES)
    log = HorizontalLog()
    assert not HorizontalFusion(profitable=lambda members, operands: Decision.forbid("cost: no"), log=log).run(module)
    assert log.refused()[("b", "a")] == "cost: no"


def test_horizontal_batches_loop_fusions_after_producer_consumer():
    module = hlo_tools.parse("""HloModule m

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
""")
    PassManager(passes_of("producer-consumer-fusion,horizontal-fusion,dce")).run(module)
    hlo_tools.verify(module)
    # two SGD updates, each one loop fusion after producer-consumer (the broadcast
    # duplicated into both), then one kernel: a 2-output loop fusion
    assert _fusions(module) == {"horizontal_fusion": ["l", "l.dup", "lr", "lr.dup", "sc0", "sc1", "up0", "up1"]}
    assert [i.opcode_text for i in module.entry if i.opcode is not HloOpcode.PARAMETER] == [
        "fusion", "get-tuple-element", "get-tuple-element", "tuple"]


# -- through XLA -------------------------------------------------------------------


CORPUS = Path(__file__).resolve().parent.parent / "corpus" / "modules"


@pytest.mark.parametrize("pipeline", [
    "priority-fusion,library-dot-fusion,dce",
    "producer-consumer-fusion,horizontal-fusion,library-dot-fusion,dce",
])
def test_on_a_corpus_module_equal_outputs_and_fusions_kept(xla_cpu, pipeline):
    from xla_bridge.xla_compile import compile
    from xla_bridge.xla_run import compare

    path = CORPUS / "llama3-tiny-decode-f32" / "before_optimizations.hlo.txt.gz"
    if not path.exists():
        pytest.skip("llama3-tiny-decode-f32 not in the corpus")
    text = gzip.decompress(path.read_bytes()).decode()
    hook = FusionHook(passes_of(pipeline))
    ours = compile(text, "cpu", "as-written", hook=(hook, "pre-scheduler"))
    for m in hook.modules:
        hlo_tools.verify(m)
    entry = ours.optimized_module.entry
    fused = sum(1 for i in entry if i.opcode is HloOpcode.FUSION)
    assert fused == hook.fusions_out > 0  # XLA kept the fusions as we wrote them
    if "horizontal" in pipeline:  # and it got at least one multi-output batch
        assert any(i.opcode is HloOpcode.FUSION and i.shape.is_tuple and i.attribute("kind") == "kLoop" for i in entry)
    stock = compile(text, "cpu", "stock")
    assert compare(stock, ours).verdict in ("exact", "close")


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
    module = hlo_tools.parse(_PASS_THROUGH)
    log = PriorityLog()
    PriorityFusion(log=log).run(module)
    hlo_tools.verify(module)
    # the broadcast reads each element of the {rsqrt, negate, bitcast} chain 8 times
    assert sorted(_fusions(module).values()) == [["b", "m"], ["c", "n", "r"]]
    assert log.refused()[("c", "b")] == "expensive producer would be recomputed per reused element"
    # a cost that takes the bitcast first: {c, b, m} forms, and the rsqrt chain
    # may still not join it, the broadcast reusing what flows through the bitcast
    module = hlo_tools.parse(_PASS_THROUGH)
    log = PriorityLog()
    PriorityFusion(cost=lambda c: default_cost(c) + 1000 * (c.producer.name == "c"), log=log).run(module)
    assert sorted(_fusions(module).values()) == [["b", "c", "m"], ["n", "r"]]
    assert log.refused()[("n", "c")] == "expensive producer would be recomputed per reused element"
