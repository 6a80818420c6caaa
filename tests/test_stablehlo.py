"""StableHLO in and out, and modules from jax functions."""

from __future__ import annotations

import pytest

import jax
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from hlo_tools import parse  # noqa: E402
from hlo_tools.opcode import HloOpcode  # noqa: E402
from xla_bridge.stablehlo import from_jax, from_module, to_module  # noqa: E402
from xla_bridge.jax_internals import XlaCompileError  # noqa: E402
from xla_bridge.examples import FUSION_KLOOP, UNFUSED  # noqa: E402
from xla_bridge.runner import compare, run_module  # noqa: E402


def test_from_jax_with_abstract_args_gives_the_pre_optimization_module():
    def mlp(x, w):
        return jnp.tanh(x @ w).sum(axis=1)

    m = from_jax(mlp, jax.ShapeDtypeStruct((4, 8), jnp.float32), jnp.ones((8, 3), jnp.float32))
    ops = {i.opcode for i in m.walk()}
    assert HloOpcode.DOT in ops and HloOpcode.TANH in ops and HloOpcode.REDUCE in ops
    assert HloOpcode.FUSION not in ops  # before XLA's optimizations
    assert [p.shape.to_text(print_layout=False) for p in m.entry.parameters] == ["f32[4,8]", "f32[8,3]"]


def test_stablehlo_round_trip_keeps_the_computation():
    text = from_module(parse(UNFUSED))
    assert "stablehlo.exponential" in text and "func.func" in text
    back = to_module(text)
    assert compare(parse(UNFUSED), back).verdict == "exact"


def test_fusions_appear_as_mhlo_fusion():
    assert "mhlo.fusion" in from_module(parse(FUSION_KLOOP))


def test_bad_stablehlo_is_a_typed_error():
    with pytest.raises(XlaCompileError, match="convert failed"):
        to_module("module { func.func @main() -> tensor<f32> { nonsense } }")


def _op_names(module) -> list[str]:
    return [i.attributes["metadata"] for i in module.entry if "op_name=" in (i.attributes.get("metadata") or "")]


def test_metadata_survives_from_jax_to_module_and_back():
    def f(x, y):
        return jnp.tanh(x @ y) + 1

    args = (jnp.ones((4, 8), jnp.float32), jnp.ones((8, 3), jnp.float32))
    m = from_jax(f, *args)
    names = _op_names(m)
    assert any('op_name="jit(f)/tanh"' in n for n in names) and any("dot_general" in n for n in names)
    assert "xla_bridge/stablehlo.py" not in m.to_text()  # the stack frames point at the user's code, not ours
    lowered = jax.jit(f).lower(*args)
    assert _op_names(to_module(lowered.as_text(debug_info=True))) == names
    assert _op_names(to_module(from_module(m))) == names  # metadata -> MLIR locations -> metadata


def test_to_module_keeps_large_constants():
    table = np.arange(100, dtype=np.float32)
    lowered = jax.jit(lambda x: x * table).lower(jnp.ones(100, jnp.float32))
    m = to_module(lowered.as_text())
    assert "{...}" not in m.to_text()
    x = np.linspace(-1, 1, 100, dtype=np.float32)
    assert np.array_equal(run_module(m, [x])[0], x * table)
