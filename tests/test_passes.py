"""The pass manager and the registry. The cleanup passes' own tests are .hlo files with
inline CHECK lines (tests/hlo/, run by tests/test_hlo_files.py)."""

from __future__ import annotations

import pytest

import hlo_tools
from passes import ComputationPass, PassError, PassManager, available_passes, get_pass, parse_pipeline
from tests.passes_util import Flipper



def mod(body: str, extra: str = "") -> str:
    return "HloModule m\n\n" + extra + "ENTRY e {\n" + body + "}\n"


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


def test_pipeline_names_parse_where_pass_names_do():
    """One spec parser: ``best`` expands inside ``parse_pipeline`` (once only in a second parser)."""
    from passes.registry import BEST, pass_names

    names = [p.name for p in parse_pipeline("best,cse")]
    assert names == BEST.split(",") + ["cse"] == pass_names("best,cse")
    with pytest.raises(KeyError, match="unknown pass 'nope'.*pipelines: best, gpu-best, priority"):
        parse_pipeline("best,nope")
