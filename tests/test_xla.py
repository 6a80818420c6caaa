"""compile(): stock vs as-written on XLA:CPU, XLA's figures, typed errors."""

from __future__ import annotations

import pytest


import xla_bridge
from hlo_tools import parse
from hlo_tools.opcode import HloOpcode
from xla_bridge.jax_internals import XlaCompileError, canonical_text, jax_versions
from xla_bridge import jax_internals, compiler
from xla_bridge.compiler import AS_WRITTEN_DISABLED_PASSES, compile, disabled_passes, parse_flags
from xla_bridge.examples import FUSION_KLOOP, UNFUSED


def fused_bodies(res) -> dict[str, list[str]]:
    """fusion name -> opcodes of its fused computation (parameters left out)."""
    out = {}
    for comp in res.optimized_module.computations:
        for ins in comp:
            if ins.opcode is HloOpcode.FUSION:
                out[ins.name] = [i.opcode.value for i in ins.fused_computation if i.opcode is not HloOpcode.PARAMETER]
    return out


def test_stock_compile_exposes_optimized_module_cost_memory_and_time():
    res = compile(parse(UNFUSED), "cpu", "stock")
    assert res.module_name == "unfused" and res.backend == "cpu" and res.runnable
    assert res.optimized_module.is_scheduled
    # XLA:CPU's own fusion put the whole elementwise chain into one loop fusion
    assert sorted(fused_bodies(res).values()) == [["add", "multiply", "subtract", "exponential"]]
    assert res.cost["flops"] > 0 and res.cost["transcendentals"] == 32 * 64
    assert res.memory["argument_size_in_bytes"] == 2 * 32 * 64 * 4
    assert res.compile_seconds > 0


def test_as_written_keeps_the_hand_written_fusion_and_stock_fuses_over_it():
    module = parse(FUSION_KLOOP)
    written = fused_bodies(compile(module, pipeline="as-written"))
    assert ["add", "multiply"] in written.values()  # our fusion, as written
    assert ["add", "multiply", "subtract", "exponential"] not in written.values()
    stock = fused_bodies(compile(module, pipeline="stock"))
    # stock: XLA's own fusion of the consumers; as-written: each stays its own kernel
    assert ["subtract", "exponential"] in stock.values()
    assert not any("subtract" in body and "exponential" in body for body in written.values())


def test_as_written_table_has_both_backends_and_flags_add_to_it():
    assert "fusion" in AS_WRITTEN_DISABLED_PASSES["cpu"]
    assert "priority-fusion" in AS_WRITTEN_DISABLED_PASSES["gpu"]
    assert disabled_passes("cpu", "stock") == ()
    res = compile(UNFUSED, pipeline="as-written", flags=["--xla_disable_hlo_passes=algsimp"])
    assert res.debug_options["xla_disable_hlo_passes"].split(",")[-1] == "algsimp"
    assert set(AS_WRITTEN_DISABLED_PASSES["cpu"]) <= set(res.debug_options["xla_disable_hlo_passes"].split(","))


def test_parse_flags_types_values():
    assert parse_flags(["--xla_cpu_enable_fast_math=false", "--xla_foo=3", "--xla_dump_to=/tmp/x"]) == {
        "xla_cpu_enable_fast_math": False, "xla_foo": 3, "xla_dump_to": "/tmp/x"}
    with pytest.raises(ValueError, match="not an XLA debug option"):
        parse_flags(["--cpu_fast"])


def test_unknown_pipeline_and_backend_are_refused():
    with pytest.raises(ValueError, match="unknown pipeline 'fast'"):
        compile(UNFUSED, pipeline="fast")
    with pytest.raises(ValueError, match="unknown backend 'tpu'"):
        compile(UNFUSED, backend="tpu")


def test_module_xla_rejects_raises_with_xla_message_and_module_name():
    bad = """HloModule rejected_by_xla
ENTRY e {
  p = f32[2] parameter(0)
  ROOT r = f32[3] add(p, p)
}
"""
    with pytest.raises(XlaCompileError, match="rejected_by_xla") as info:
        compile(bad)
    assert info.value.module_name == "rejected_by_xla"
    assert "same shape" in info.value.xla_message  # XLA's (StableHLO verifier's) own words


def test_text_xla_parser_rejects_is_a_parse_stage_error():
    with pytest.raises(XlaCompileError, match="parse failed") as info:
        compile("HloModule nonsense\nENTRY e {\n  ROOT r = f32[2] frobnicate()\n}\n")
    assert info.value.stage == "parse" and info.value.module_name == "nonsense"
    assert "frobnicate" in info.value.xla_message
    # the one line a command prints says what XLA's parser saw, not only "Syntax error ...:"
    assert "frobnicate" in str(info.value)


def test_dump_dir_gets_every_pass(tmp_path):
    compile(UNFUSED, dump_dir=tmp_path)
    names = [p.name for p in tmp_path.iterdir()]
    assert any(n.endswith("cpu_after_optimizations.txt") for n in names)
    assert any(".after_" in n for n in names)


def test_existing_helpers_keep_their_behaviour():
    assert canonical_text(UNFUSED).startswith("HloModule unfused")
    assert set(jax_versions()) == {"jax", "jaxlib"}


def test_compile_has_one_import_path():
    assert xla_bridge.compile is compiler.compile is compile
    assert not hasattr(jax_internals, "compile")  # the jaxlib layer re-exports nothing of the user-facing one
