"""hlo_analysis.cost against XLA's own HloCostAnalysis (real XLA on CPU).

Every corpus module's optimized CPU stage is compared; the other stages on the
tiny modules (the full-size ones run in ``bench/cost_model_accuracy.py
--agreement``, which sweeps every stage of every module)."""

from __future__ import annotations

import pytest

import corpus
import hlo_tools
from hlo_analysis import cost
from xla_bridge import jax_internals

KEYS = ("flops", "transcendentals", "bytes accessed")


def _entries():
    if not (corpus.CORPUS_DIR / "manifest.json").exists():
        return []
    return list(corpus.load())


def _cases():
    out = []
    for e in _entries():
        for stage in e.stages:
            if stage == "cpu_after_optimizations" or e.size == "tiny":
                out.append(pytest.param(e, stage, id=f"{e.name}/{stage}"))
    return out


def _rel(ours: float, theirs: float) -> float:
    return abs(ours - theirs) / max(abs(theirs), 1.0)


@pytest.mark.parametrize("entry,stage", _cases())
def test_agrees_with_xla_cost_analysis(entry, stage):
    text = entry.text(stage)
    theirs = jax_internals.cost_analysis_of_text(text)
    if not theirs:
        # XLA's parser rejects two sharded XLA:GPU modules it printed itself
        # (output_to_operand_aliasing on all-reduce-start); nothing to compare.
        assert "dp2tp4" in entry.name and stage.startswith("gpu_"), f"XLA could not analyse {entry.name}/{stage}"
        pytest.skip("XLA cannot re-parse this module")
    ours = cost.module_cost(hlo_tools.parse(text))
    for k in ("flops", "bytes accessed"):
        assert _rel(ours[k], theirs.get(k, 0.0)) < 0.01, (k, ours[k], theirs.get(k))
    assert _rel(ours["transcendentals"], theirs.get("transcendentals", 0.0)) < 0.01


def _module(body: str, extra: str = "") -> str:
    return f"HloModule m\n\n{extra}\nENTRY %e {{\n  {body}\n}}\n"


def _both(text: str) -> tuple[dict, dict]:
    return cost.module_cost(hlo_tools.parse(text)), jax_internals.cost_analysis_of_text(text)


def test_dot_is_two_m_n_k_flops():
    text = _module("%a = f32[8,16]{1,0} parameter(0)\n  %b = f32[16,4]{1,0} parameter(1)\n"
                   "  ROOT %d = f32[8,4]{1,0} dot(%a, %b), lhs_contracting_dims={1}, rhs_contracting_dims={0}")
    ours, theirs = _both(text)
    assert ours["flops"] == 2 * 8 * 4 * 16 == theirs["flops"]
    assert ours["bytes accessed"] == 4 * (8 * 16 + 16 * 4 + 8 * 4) == theirs["bytes accessed"]


def test_elementwise_flops_and_transcendentals():
    text = _module("%a = f32[128]{0} parameter(0)\n  %e = f32[128]{0} exponential(%a)\n"
                   "  ROOT %m = f32[128]{0} multiply(%e, %a)")
    ours, theirs = _both(text)
    assert (ours["flops"], ours["transcendentals"]) == (128, 128)
    assert ours == {k: theirs.get(k, 0.0) for k in KEYS}


FUSED = """%fused (p0: f32[64,64], p1: f32[64]) -> f32[64,64] {
  %p0 = f32[64,64]{1,0} parameter(0)
  %p1 = f32[64]{0} parameter(1)
  %b = f32[64,64]{1,0} broadcast(%p1), dimensions={1}
  %s = f32[64,64]{1,0} subtract(%p0, %b)
  %e = f32[64,64]{1,0} exponential(%s)
  ROOT %m = f32[64,64]{1,0} multiply(%e, %p0)
}
"""


def test_fusion_reads_operands_once_and_writes_once():
    text = _module("%x = f32[64,64]{1,0} parameter(0)\n  %y = f32[64]{0} parameter(1)\n"
                   "  ROOT %f = f32[64,64]{1,0} fusion(%x, %y), kind=kLoop, calls=%fused", FUSED)
    ours, theirs = _both(text)
    # %x is read once although three fused instructions use it; the broadcast
    # reads %y as XLA counts it (FusionParameterReadBytes), nothing in between.
    assert ours["bytes accessed"] == 4 * (64 * 64 + 64 + 64 * 64) == theirs["bytes accessed"]
    assert ours["flops"] == 2 * 64 * 64 and ours["transcendentals"] == 64 * 64
    fusion = cost.analyze(hlo_tools.parse(text)).by_name()["f"]
    assert (fusion.bytes_read, fusion.bytes_written) == (4 * (64 * 64 + 64), 4 * 64 * 64)


def test_fusion_that_slices_reads_only_the_slice():
    comp = ("%fs (p: f32[64,64]) -> f32[8,64] {\n  %p = f32[64,64]{1,0} parameter(0)\n"
            "  ROOT %s = f32[8,64]{1,0} slice(%p), slice={[0:8], [0:64]}\n}\n")
    text = _module("%x = f32[64,64]{1,0} parameter(0)\n  ROOT %f = f32[8,64]{1,0} fusion(%x), kind=kLoop, calls=%fs", comp)
    ours, theirs = _both(text)
    assert ours["bytes accessed"] == 2 * 4 * 8 * 64 == theirs["bytes accessed"]


def test_tuple_index_table_size_is_pinned():
    """XLA's CPU client sizes a tuple as 4 bytes per element (measured)."""
    text = _module("%a = f32[2]{0} parameter(0)\n  %t = (f32[2]{0}, f32[2]{0}, f32[2]{0}) tuple(%a, %a, %a)\n"
                   "  ROOT %g = f32[2]{0} get-tuple-element(%t), index=0")
    ours, theirs = _both(text)
    assert ours["bytes accessed"] == 3 * cost.POINTER_SIZE == theirs["bytes accessed"] == 12


def test_custom_call_is_the_one_deliberate_difference():
    """XLA prices a custom-call as unknown (-1 flops, -1 bytes); we count its
    operands and output and flag it."""
    text = _module('%a = f32[16]{0} parameter(0)\n  ROOT %c = f32[16]{0} custom-call(%a), custom_call_target="foo"')
    ours, theirs = _both(text)
    assert theirs["flops"] == -1 and theirs["bytes accessed"] == -1
    assert ours["flops"] == 0 and ours["bytes accessed"] == 2 * 4 * 16
    assert cost.analyze(hlo_tools.parse(text)).by_name()["c"].unknown


def test_async_sugar_is_priced_as_the_wrapped_instruction():
    text = _module(
        "%p = f32[4,32]{1,0} parameter(0)\n"
        "  %s = ((f32[4,32]{1,0}), f32[2,32]{1,0}) reduce-scatter-start(%p), channel_id=1, replica_groups={{0,1}}, "
        "dimensions={0}, to_apply=%add\n  ROOT %d = f32[2,32]{1,0} reduce-scatter-done(%s)",
        "%add (a: f32[], b: f32[]) -> f32[] {\n  %a = f32[] parameter(0)\n  %b = f32[] parameter(1)\n"
        "  ROOT %c = f32[] add(%a, %b)\n}\n")
    ours, theirs = _both(text)
    assert ours["bytes accessed"] == theirs["bytes accessed"]


def _sharded_cases():
    return [pytest.param(e, id=e.name) for e in _entries() if e.sharded and "before_optimizations" in e.stages]


@pytest.mark.parametrize("entry", _sharded_cases())
def test_sharded_before_optimizations_within_one_percent(entry):
    """The 2x4-mesh train steps before optimization (issue 15 item 9); a real dump of a
    sharded step, with its sharding custom-calls, is in tests/test_cost_sharded.py."""
    text = entry.text("before_optimizations")
    theirs = jax_internals.cost_analysis_of_text(text)
    assert theirs, f"XLA could not analyse {entry.name}"
    ours = cost.module_cost(hlo_tools.parse(text))
    for k in KEYS:
        assert _rel(ours[k], theirs.get(k, 0.0)) < 0.01, (k, ours[k], theirs.get(k))


ANNOTATIONS = [
    ('f32[256]{0} custom-call(%a), custom_call_target="Sharding", sharding={devices=[4]<=[4]}', 256),
    ('f32[64]{0} custom-call(%a), custom_call_target="SPMDFullToShardShape", sharding={manual}', 256),
    ('f32[1024]{0} custom-call(%a), custom_call_target="SPMDShardToFullShape", sharding={devices=[4]<=[4]}', 256),
    ('(f32[64]{0}) custom-call(%a), custom_call_target="xla.sdy.GlobalToLocalShape", '
     'custom_call_has_side_effect=true', 256),
    ('f32[1024]{0} custom-call(%a), custom_call_target="xla.sdy.LocalToGlobalShape", '
     'custom_call_has_side_effect=true', 256),
]


@pytest.mark.parametrize("call,n", ANNOTATIONS, ids=[c.split('"')[1] for c, _ in ANNOTATIONS])
def test_sharding_annotations_cost_nothing(call, n):
    """XLA prices every custom-call as unknown (-1); a sharding annotation is a marker
    the partitioner consumes, so we price it as free (XLA's -1 to within one)."""
    text = _module(f"%a = f32[{n}]{{0}} parameter(0)\n  ROOT %c = {call}")
    ours, theirs = _both(text)
    assert (theirs["flops"], theirs["bytes accessed"]) == (-1, -1)
    assert (ours["flops"], ours["bytes accessed"]) == (0, 0)
    c = cost.analyze(hlo_tools.parse(text)).by_name()["c"]
    assert not c.unknown and cost.is_sharding_annotation(hlo_tools.parse(text).entry.root)


ADD = "%add (a: f32[], b: f32[]) -> f32[] {\n  %a = f32[] parameter(0)\n  %b = f32[] parameter(1)\n  ROOT %c = f32[] add(%a, %b)\n}\n"
ARGMAX = ("%r2 (a: f32[], b: s32[], c: f32[], d: s32[]) -> (f32[], s32[]) {\n  %a = f32[] parameter(0)\n"
          "  %b = s32[] parameter(1)\n  %c = f32[] parameter(2)\n  %d = s32[] parameter(3)\n"
          "  %m = f32[] maximum(%a, %c)\n  %n = s32[] minimum(%b, %d)\n  ROOT %t = (f32[], s32[]) tuple(%m, %n)\n}\n")
LESS = ("%lt (a: f32[], b: f32[], c: s32[], d: s32[]) -> pred[] {\n  %a = f32[] parameter(0)\n  %b = f32[] parameter(1)\n"
        "  %c = s32[] parameter(2)\n  %d = s32[] parameter(3)\n  ROOT %r = pred[] compare(%a, %b), direction=LT\n}\n")
TUPLE_RESULTS = {
    "topk": ("%a = f32[64,8]{1,0} parameter(0)\n"
             "  ROOT %t = (f32[64,2]{1,0}, s32[64,2]{1,0}) topk(%a), k=2, largest=true", "", 2048 + 1024),
    "sort": ("%a = f32[64,8]{1,0} parameter(0)\n  %b = s32[64,8]{1,0} parameter(1)\n"
             "  ROOT %t = (f32[64,8]{1,0}, s32[64,8]{1,0}) sort(%a, %b), dimensions={1}, to_apply=%lt", LESS, 2 * 4096),
    "variadic-reduce": ("%a = f32[64,8]{1,0} parameter(0)\n  %b = s32[64,8]{1,0} parameter(1)\n"
                        "  %z = f32[] constant(0)\n  %y = s32[] constant(0)\n  ROOT %r = (f32[64]{0}, s32[64]{0}) "
                        "reduce(%a, %b, %z, %y), dimensions={1}, to_apply=%r2", ARGMAX, 4096 + 8 + 512),
    "copy-of-tuple": ("%a = ((f32[256]{0}, f32[64]{0}), f32[8]{0}) parameter(0)\n"
                      "  ROOT %o = ((f32[256]{0}, f32[64]{0}), f32[8]{0}) copy(%a)", "", 8 + 1312),
    "copy-start/done": ("%a = f32[256]{0} parameter(0)\n  %s = (f32[256]{0}, f32[256]{0}, u32[]) copy-start(%a)\n"
                        "  ROOT %d = f32[256]{0} copy-done(%s)", "", (1024 + 2052) + (12 + 1024)),
    "all-reduce-start/done": ("%a = f32[256]{0} parameter(0)\n  %b = f32[64]{0} parameter(1)\n"
                              "  %s = (f32[256]{0}, f32[64]{0}) all-reduce-start(%a, %b), replica_groups={}, to_apply=%add\n"
                              "  ROOT %d = (f32[256]{0}, f32[64]{0}) all-reduce-done(%s)", ADD, 2 * 1280 + 8 + 1280),
    "send/recv": ("%t = token[] after-all()\n  %a = f32[256]{0} parameter(0)\n"
                  "  %s = (f32[256]{0}, u32[], token[]) send(%a, %t), channel_id=2\n"
                  "  %sd = token[] send-done(%s), channel_id=2\n  %r = (f32[256]{0}, u32[], token[]) recv(%t), channel_id=3\n"
                  "  %rd = (f32[256]{0}, token[]) recv-done(%r), channel_id=3\n"
                  "  ROOT %g = f32[256]{0} get-tuple-element(%rd), index=0", "", 2052 + 12 + 1028 + 1036),
    "rng-bit-generator": ("%a = u64[2]{0} parameter(0)\n"
                          "  ROOT %o = (u64[2]{0}, u32[256]{0}) rng-bit-generator(%a), algorithm=rng_three_fry", "", 16 + 1040),
}


@pytest.mark.parametrize("name", sorted(TUPLE_RESULTS))
def test_tuple_results_are_sized_by_their_array_leaves(name):
    """XLA:CPU charges a tuple-shaped result its array leaves (a tuple operand, its index
    table; the ``tuple`` instruction itself, its index table: pinned above)."""
    body, extra, expected = TUPLE_RESULTS[name]
    ours, theirs = _both(_module(body, extra))
    assert theirs["bytes accessed"] == expected
    assert ours == {k: theirs.get(k, 0.0) for k in KEYS}


FMA = _module("%a = f32[8,32]{1,0} parameter(0)\n  %b = f32[8,32]{1,0} parameter(1)\n  %c = f32[8,32]{1,0} parameter(2)\n"
              "  ROOT %f = f32[8,32]{1,0} fma(%a, %b, %c)")


def _xla_knows_fma() -> bool:
    """jaxlib >= 0.12.1 parses ``fma`` (jax.lax.fma); older ones reject the opcode."""
    try:
        return bool(jax_internals.cost_analysis_of_text(FMA).get("flops"))
    except Exception:  # noqa: BLE001 - the old parser's "unknown opcode"
        return False


def test_fma_is_a_multiply_and_an_add():
    ours = cost.module_cost(hlo_tools.parse(FMA))
    # jaxlib 0.12.1's own cost analysis of this module: 512 flops, 4096 bytes
    assert (ours["flops"], ours["transcendentals"], ours["bytes accessed"]) == (2 * 8 * 32, 0, 4 * 4 * 8 * 32)


@pytest.mark.skipif(not _xla_knows_fma(), reason="this jaxlib's XLA has no fma opcode (jaxlib >= 0.12.1 has)")
def test_fma_agrees_with_xla_cost_analysis():
    ours, theirs = _both(FMA)
    assert ours == {k: theirs.get(k, 0.0) for k in KEYS}
