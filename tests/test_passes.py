"""The pass manager, the registry and the cleanup passes, shown as HLO before/after."""

from __future__ import annotations

import pytest

import hlo_tools
from passes import ComputationPass, PassError, PassManager, available_passes, get_pass, parse_pipeline
from tests.passes_util import Flipper, assert_rewrite

HEAD = "HloModule m\n\nENTRY e {\n"


def mod(body: str, extra: str = "") -> str:
    return "HloModule m\n\n" + extra + "ENTRY e {\n" + body + "}\n"


# -- dce ---------------------------------------------------------------------------
def test_dce_removes_dead_chain_and_unreachable_computation():
    extra = "unused {\n  a = f32[] parameter(0)\n  ROOT n = f32[] negate(a)\n}\n\n"
    src = mod("  p = f32[4]{0} parameter(0)\n  d1 = f32[4]{0} exponential(p)\n  d2 = f32[4]{0} negate(d1)\n  ROOT r = f32[4]{0} abs(p)\n", extra)
    want = mod("  p = f32[4]{0} parameter(0)\n  ROOT r = f32[4]{0} abs(p)\n")
    assert_rewrite(src, get_pass("dce"), want)


def test_dce_keeps_side_effects_and_parameters():
    src = mod(
        "  p = f32[4]{0} parameter(0)\n  q = f32[4]{0} parameter(1)\n  t = token[] after-all()\n"
        "  o = token[] outfeed(p, t), outfeed_shape=f32[4]{0}\n"
        '  c = f32[4]{0} custom-call(p), custom_call_target="log", custom_call_has_side_effect=true\n'
        "  ROOT r = f32[4]{0} abs(p)\n"
    )
    assert_rewrite(src, get_pass("dce"), None)


# -- cse ---------------------------------------------------------------------------
def test_cse_merges_identical_ops_ignoring_metadata():
    src = mod(
        "  p = f32[4]{0} parameter(0)\n"
        '  a = f32[4]{0} exponential(p), metadata={op_name="a"}\n'
        '  b = f32[4]{0} exponential(p), metadata={op_name="b"}\n'
        "  c1 = f32[] constant(2)\n  c2 = f32[] constant(2)\n"
        "  ROOT r = (f32[4]{0}, f32[4]{0}, f32[], f32[]) tuple(a, b, c1, c2)\n"
    )
    want = mod(
        "  p = f32[4]{0} parameter(0)\n"
        '  a = f32[4]{0} exponential(p), metadata={op_name="a"}\n'
        "  c1 = f32[] constant(2)\n"
        "  ROOT r = (f32[4]{0}, f32[4]{0}, f32[], f32[]) tuple(a, a, c1, c1)\n"
    )
    assert_rewrite(src, get_pass("cse"), want)


def test_cse_refuses_rng_and_different_attributes():
    src = mod(
        "  lo = f32[] parameter(0)\n  hi = f32[] parameter(1)\n"
        "  r1 = f32[4]{0} rng(lo, hi), distribution=rng_uniform\n"
        "  r2 = f32[4]{0} rng(lo, hi), distribution=rng_uniform\n"
        "  x = f32[2,2]{1,0} reshape(r1)\n"
        "  t1 = f32[2,2]{1,0} transpose(x), dimensions={1,0}\n"
        "  t2 = f32[2,2]{1,0} transpose(x), dimensions={0,1}\n"
        "  ROOT t = (f32[4]{0}, f32[2,2]{1,0}, f32[2,2]{1,0}) tuple(r2, t1, t2)\n"
    )
    assert_rewrite(src, get_pass("cse"), None)


# -- simplify ------------------------------------------------------------------------
@pytest.mark.parametrize(
    "body, want",
    [
        (  # x + 0 -> x (either order, broadcast of a scalar zero)
            "  x = f32[4]{0} parameter(0)\n  z = f32[] constant(0)\n  b = f32[4]{0} broadcast(z), dimensions={}\n  ROOT a = f32[4]{0} add(b, x)\n",
            "  ROOT x = f32[4]{0} parameter(0)\n",
        ),
        (  # x * 1 -> x
            "  x = f32[] parameter(0)\n  one = f32[] constant(1)\n  ROOT m = f32[] multiply(x, one)\n",
            "  ROOT x = f32[] parameter(0)\n",
        ),
        (  # transpose of transpose cancels
            "  x = f32[2,3]{1,0} parameter(0)\n  t = f32[3,2]{1,0} transpose(x), dimensions={1,0}\n  ROOT u = f32[2,3]{1,0} transpose(t), dimensions={1,0}\n",
            "  ROOT x = f32[2,3]{1,0} parameter(0)\n",
        ),
        (  # transposes compose
            "  x = f32[2,3,4]{2,1,0} parameter(0)\n  t = f32[3,2,4]{2,1,0} transpose(x), dimensions={1,0,2}\n  ROOT u = f32[3,4,2]{2,1,0} transpose(t), dimensions={0,2,1}\n",
            "  x = f32[2,3,4]{2,1,0} parameter(0)\n  ROOT u.1 = f32[3,4,2]{2,1,0} transpose(x), dimensions={1,2,0}\n",
        ),
        (  # reshape of reshape
            "  x = f32[6]{0} parameter(0)\n  r = f32[2,3]{1,0} reshape(x)\n  ROOT s = f32[3,2]{1,0} reshape(r)\n",
            "  x = f32[6]{0} parameter(0)\n  ROOT s.1 = f32[3,2]{1,0} reshape(x)\n",
        ),
        (  # broadcast of broadcast
            "  x = f32[3]{0} parameter(0)\n  b = f32[2,3]{1,0} broadcast(x), dimensions={1}\n  ROOT c = f32[4,2,3]{2,1,0} broadcast(b), dimensions={1,2}\n",
            "  x = f32[3]{0} parameter(0)\n  ROOT c.1 = f32[4,2,3]{2,1,0} broadcast(x), dimensions={2}\n",
        ),
        (  # exact convert chain s8 -> s32 -> f32 becomes one convert
            "  x = s8[4]{0} parameter(0)\n  a = s32[4]{0} convert(x)\n  ROOT b = f32[4]{0} convert(a)\n",
            "  x = s8[4]{0} parameter(0)\n  ROOT b.1 = f32[4]{0} convert(x)\n",
        ),
        (  # full slice
            "  x = f32[4,3]{1,0} parameter(0)\n  ROOT s = f32[4,3]{1,0} slice(x), slice={[0:4], [0:3]}\n",
            "  ROOT x = f32[4,3]{1,0} parameter(0)\n",
        ),
        (  # broadcast scalar constants fold
            "  x = f32[4]{0} parameter(0)\n  c2 = f32[] constant(2)\n  c3 = f32[] constant(3.5)\n"
            "  b2 = f32[4]{0} broadcast(c2), dimensions={}\n  b3 = f32[4]{0} broadcast(c3), dimensions={}\n"
            "  s = f32[4]{0} add(b2, b3)\n  ROOT r = f32[4]{0} multiply(x, s)\n",
            "  x = f32[4]{0} parameter(0)\n  constant = f32[] constant(5.5)\n  broadcast = f32[4]{0} broadcast(constant), dimensions={}\n"
            "  ROOT r = f32[4]{0} multiply(x, broadcast)\n",
        ),
    ],
)
def test_simplify_rewrites(body, want):
    assert_rewrite(mod(body), get_pass("simplify"), mod(want))


@pytest.mark.parametrize(
    "body",
    [
        # f32 -> f16 -> f32 loses precision: must stay
        "  x = f32[4]{0} parameter(0)\n  a = f16[4]{0} convert(x)\n  ROOT b = f32[4]{0} convert(a)\n",
        # x + 1 is not x + 0
        "  x = f32[4]{0} parameter(0)\n  o = f32[] constant(1)\n  b = f32[4]{0} broadcast(o), dimensions={}\n  ROOT a = f32[4]{0} add(x, b)\n",
        # a reshape with another layout is a real copy
        "  x = f32[2,3]{1,0} parameter(0)\n  ROOT r = f32[2,3]{0,1} reshape(x)\n",
        # a strided slice is not the identity
        "  x = f32[4]{0} parameter(0)\n  ROOT s = f32[2]{0} slice(x), slice={[0:4:2]}\n",
    ],
)
def test_simplify_refuses(body):
    assert_rewrite(mod(body), get_pass("simplify"), None)


# -- the manager ------------------------------------------------------------------------
class _Breaks(ComputationPass):
    name = "breaks"

    def run_on_computation(self, comp):
        root = comp.root
        root.shape = hlo_tools.parse_shape("s32[7]")
        return True


class _Liar(ComputationPass):
    name = "liar"

    def run_on_computation(self, comp):
        return True  # claims a change it never made


SRC = mod("  x = f32[2,3]{1,0} parameter(0)\n  ROOT t = f32[3,2]{1,0} transpose(x), dimensions={1,0}\n")


def test_manager_names_the_pass_that_broke_the_ir():
    with pytest.raises(PassError, match="pass breaks left an invalid module") as info:
        PassManager([get_pass("dce"), _Breaks()]).run(hlo_tools.parse(SRC))
    assert info.value.ran == ("dce", "breaks")


def test_manager_catches_a_lying_changed_flag():
    with pytest.raises(PassError, match="liar reported changed=True"):
        PassManager([_Liar()], check_changed=True).run(hlo_tools.parse(SRC))


def test_manager_fixed_point_cap():
    with pytest.raises(PassError, match="did not reach a fixed point in 3 iterations"):
        PassManager([Flipper()], fixed_point=True, max_iterations=3, verify=False).run(hlo_tools.parse(SRC))


def test_manager_records_and_dumps(tmp_path):
    src = mod("  x = f32[4]{0} parameter(0)\n  d = f32[4]{0} negate(x)\n  a = f32[4]{0} abs(x)\n  b = f32[4]{0} abs(x)\n  ROOT r = f32[4]{0} add(a, b)\n")
    module = hlo_tools.parse(src)
    result = PassManager(parse_pipeline("dce,cse"), fixed_point=True, dump_dir=tmp_path).run_with_report(module)
    assert result.changed and result.iterations == 2
    first = result.records[:2]
    assert [(r.name, r.changed, r.instructions_before, r.instructions_after) for r in first] == [("dce", True, 5, 4), ("cse", True, 4, 3)]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["00.input.hlo", "01.dce.hlo", "02.cse.hlo", "03.dce.hlo", "04.cse.hlo"]
    assert hlo_tools.load(tmp_path / "02.cse.hlo").instruction_count == 3
    assert "dce" in result.table() and "5 -> 4" in result.table()


def test_registry():
    assert {"dce", "cse", "simplify", "inline-fusions"} <= set(available_passes())
    with pytest.raises(KeyError, match="unknown pass 'nope'"):
        get_pass("nope")
