"""Mixed-precision train steps (MaxText's shape: bf16 dots in a scan over layers,
f32 master weights): what made `best` 3x slower than stock with differing outputs.

Cause, found on a MaxText 0.2.5 dump (docs/third_party.md): `library-dot-fusion`
handed only f32 dots to YNNPACK, so bf16 dots fell to XLA:CPU's own dot emitter,
10-20x slower and rounding differently from the YNNPACK kernels stock XLA uses.
tests/data/bf16_scan_train_step.hlo is a module of that shape."""

from __future__ import annotations

import json

from pathlib import Path

import numpy as np
import ml_dtypes

import hlo_tools
from hlo_tools.precision import computed_through
from hlo_tools.shape import PrimitiveType
from passes import PassManager
from passes.registry import parse_pipeline
from xla_bridge.hook_stage import HookStage
from xla_bridge.compiler import Hook, compile
from xla_bridge.inputs import make_inputs
from xla_bridge.runner import compare_outputs, diff_output, output_precisions, run

SCAN = Path(__file__).parent / "data" / "bf16_scan_train_step.hlo"


def _best_hook() -> Hook:
    return Hook(PassManager(parse_pipeline("best")), HookStage.for_fusion("cpu"))


def test_best_on_a_bf16_scan_matches_stock_and_leaves_no_dot_to_xlas_emitter():
    module = hlo_tools.parse(SCAN.read_text())
    inputs = make_inputs(module, seed=0)[0]
    stock = compile(module, "cpu", "stock")
    best = compile(module, "cpu", "as-written", hook=_best_hook())
    cmp = compare_outputs(run(stock, inputs), run(best, inputs), through=output_precisions(module))
    assert cmp.ok, str(cmp)
    # every dot of B sits in a YNNPACK fusion, the one with a [K,M] lhs included
    opt = best.optimized_module
    in_ynn = {id(callee) for c in opt.computations for i in c
              if i.opcode.value == "fusion" and "__ynn_fusion" in (i.attribute("backend_config") or "")
              for callee in i.called_computations}
    dots = [(c, i.name) for c in opt.computations for i in c if i.opcode.value == "dot"]
    assert len(dots) == 3 and all(id(c) in in_ynn for c, _ in dots), [(c.name, n) for c, n in dots]


def test_xlas_own_bf16_dot_emitter_is_what_differed():
    """The baseline moved, not our passes: with XLA's fusion off and no library
    fusions (as-written), the bf16 dots round differently from stock's, far
    beyond bf16's tolerance; `best` now matches stock."""
    module = hlo_tools.parse(SCAN.read_text())
    inputs = make_inputs(module, seed=0)[0]
    through = output_precisions(module)
    stock = run(compile(module, "cpu", "stock"), inputs)
    bare = run(compile(module, "cpu", "as-written"), inputs)
    assert not compare_outputs(stock, bare, through=through).ok


def test_outputs_computed_through_bf16_are_found_per_tuple_element():
    module = hlo_tools.parse("""HloModule m

ENTRY e {
  a = f32[4]{0} parameter(0)
  b = f32[4]{0} parameter(1)
  h = bf16[4]{0} convert(a)
  n = bf16[4]{0} negate(h)
  back = f32[4]{0} convert(n)
  t = (f32[4]{0}, f32[4]{0}) tuple(back, b)
  x = f32[4]{0} get-tuple-element(t), index=1
  y = f32[4]{0} add(x, b)
  i = s32[4]{0} convert(b)
  ROOT r = (f32[4]{0}, f32[4]{0}, (s32[4]{0}, f32[4]{0})) tuple(back, y, (s32[4]{0}, f32[4]{0}) tuple(i, back))
}
""")
    bf16, f32 = PrimitiveType.BF16, PrimitiveType.F32
    assert computed_through(module) == [{bf16, f32}, {f32}, {f32}, {bf16, f32}]
    assert output_precisions(module)[0] == ["bfloat16", "float32"]


def test_a_while_loop_passes_its_inner_types_on():
    module = hlo_tools.parse(SCAN.read_text())
    assert computed_through(module) == [{PrimitiveType.BF16, PrimitiveType.F32}]


def test_an_f32_output_of_bf16_arithmetic_is_compared_at_bf16s_tolerance():
    rng = np.random.default_rng(0)
    a = rng.standard_normal(256).astype(np.float32)
    b = (a * (1 + 5e-3)).astype(np.float32)       # bf16 rounding, far beyond f32's tolerance
    assert not diff_output(0, a, b).ok
    d = diff_output(0, a, b, through=["bfloat16", "float32"])
    assert d.ok and d.tolerance_of == "bfloat16" and "computed through bfloat16" in str(d)
    assert not diff_output(0, a, -a, through=["bfloat16"]).ok   # a wrong sign is still a mismatch
    ints = np.arange(4, dtype=np.int32)
    assert not diff_output(0, ints, ints + 1, through=["bfloat16"]).ok  # integers stay exact
    assert np.dtype(ml_dtypes.bfloat16).name == "bfloat16"


def test_bench_says_when_the_baseline_itself_moved(tmp_path):
    """A fusion pass that leaves the bf16 dots to XLA's own emitter: B differs from
    stock, and so does XLA's as-written pipeline with no pass at all; bench names
    the first difference and says the baseline moved (a tune candidate's "unequal"
    carries the same first difference)."""
    from tests.conftest import run_hlo

    done = run_hlo("bench", SCAN, "--passes", "horizontal-fusion", "--reps", "2", "--no-record")
    assert "first difference: output 0 float32[64, 128]: MISMATCH" in done.stdout
    assert "bfloat16's: computed through bfloat16" in done.stdout
    assert "baseline moved: as-written without any pass already differs from stock" in done.stdout
    # judged against the moved baseline, which the pass matches: not the pass's fault, exit 0
    assert "against that baseline the passes' outputs are exact" in done.stdout or \
        "against that baseline the passes' outputs are close" in done.stdout, done.stdout
    assert done.returncode == 0, done.stderr
    js = run_hlo("bench", SCAN, "--passes", "horizontal-fusion", "--reps", "2", "--no-record", "--json")
    d = json.loads(js.stdout)
    assert d["outputs"] == "mismatch" and d["outputs_vs_baseline"] in ("exact", "close")
