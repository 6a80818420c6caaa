"""``hlo reduce``: delta debugging on real corpus modules, where the answer is
known: the text route's XLA:CPU abort on a train step (a transpose inside a
fusion), a rewrite that swaps the operands of one subtract, a pass that fires,
a shell predicate.  Real XLA on the CPU, in the XLA worker."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

import pytest

import corpus
from hlo_lab.cli import main
from hlo_lab.debug.reduce import subgraph
from hlo_lab.debug.reduce.ddmin import Budget, ddmin
from hlo_lab.debug.reduce.predicates import NothingToReduce, abort_message, aborts_like, outputs_differ, pass_fires
from hlo_lab.debug.reduce.reducer import reduce_module
from hlo_tools import HloOpcode, Module, Rewriter, parse, verify
from passes import PassManager
from passes.base import Pass
from passes.registry import BEST, TEXT_PREFIX, parse_pipeline
from tests.conftest import run_hlo


def _before(name: str) -> Module:
    return parse(next(e for e in corpus.load() if e.name == name).text("before_optimizations"))


def _opcodes(module: Module) -> list[str]:
    return [i.opcode.value for i in module.instructions()]


# -- ddmin -------------------------------------------------------------------------------


def test_ddmin_finds_the_two_parts_that_matter():
    calls = []

    def test(subset):
        calls.append(len(subset))
        return {17, 63} <= set(subset)

    assert ddmin(list(range(100)), test) == [17, 63]
    assert len(calls) < 60  # log-like, not one test per part


def test_ddmin_out_of_budget_keeps_an_accepted_subset():
    budget = Budget(tests=8)
    accepted = []

    def test(subset):
        budget.charge()
        ok = {3, 90} <= set(subset)
        if ok:
            accepted.append(list(subset))
        return ok

    got = ddmin(list(range(100)), test)
    assert budget.used == 8
    assert got == accepted[-1] and len(got) < 100


# -- candidates ------------------------------------------------------------------------------


def test_any_subset_of_a_train_step_is_a_valid_module():
    """Every candidate verifies, feeds only array parameters, and keeps exactly
    the instructions asked for (plus parameters and, for several outputs, a tuple)."""
    module = _before("llama3-tiny-train-f32")
    names = [i.name for i in subgraph.reducible(module.entry)]
    for lo, hi in ((0, 40), (300, 900), (len(names) - 50, len(names)), (10, 11)):
        keep = set(names[lo:hi])
        cand = subgraph.keep_entry(module, keep)
        verify(cand)
        kept = {i.name for i in cand.entry if i.opcode not in (HloOpcode.PARAMETER, HloOpcode.TUPLE)}
        dropped_gtes = {n for n in keep - kept if module.entry.get_instruction(n).opcode is HloOpcode.GET_TUPLE_ELEMENT}
        assert kept | dropped_gtes >= keep - {n for n in keep if module.entry.get_instruction(n).opcode is HloOpcode.TUPLE}
        assert kept <= keep
        assert all(not p.shape.is_tuple for p in cand.entry.parameters)
        assert [p.parameter_number for p in cand.entry.parameters] == list(range(len(cand.entry.parameters)))
    assert module.instruction_count == 1519  # the original is untouched


def test_a_fusion_body_cut_feeds_new_parameters():
    module = parse("""HloModule m
f {
  a = f32[4,8]{1,0} parameter(0)
  b = f32[4,8]{1,0} parameter(1)
  e = f32[4,8]{1,0} exponential(a)
  m = f32[4,8]{1,0} multiply(e, b)
  t = f32[8,4]{1,0} transpose(m), dimensions={1,0}
  ROOT n = f32[8,4]{1,0} negate(t)
}
ENTRY main {
  x = f32[4,8]{1,0} parameter(0)
  y = f32[4,8]{1,0} parameter(1)
  ROOT fu = f32[8,4]{1,0} fusion(x, y), kind=kLoop, calls=f
}
""")
    cand = subgraph.keep_fused(module, "fu", {"t"})
    verify(cand)
    body = cand.entry.root.fused_computation
    assert [i.opcode.value for i in body] == ["parameter", "transpose"]
    assert body.root.name == "t" and body.root.operand(0).name == "m"  # the parameter stands for %m
    assert cand.entry.root.shape.dims == (8, 4) and len(cand.entry.parameters) == 1


# -- the case: an XLA abort on a real train step --------------------------------------


@pytest.fixture(scope="module")
def aborting_train_step(tmp_path_factory) -> str:
    """llama3's tiny train step after our BEST fusion passes on the text route:
    XLA:CPU compiles it as written and CHECK-fails on a transpose inside a fusion."""
    module = _before("llama3-tiny-train-f32")
    PassManager(parse_pipeline(f"{TEXT_PREFIX},{BEST}")).run(module)
    path = tmp_path_factory.mktemp("reduce") / "train_text_route.hlo"
    path.write_text(module.to_text())
    return str(path)


def test_any_cut_of_a_fusion_body_is_a_valid_module(aborting_train_step):
    """Every fusion of the fused train step, its body cut to the first half: our
    verifier and XLA's parser accept each (a fusion used inside the entry keeps
    its root and so its shape; the new parameters are fed from the entry)."""
    from xla_bridge import jax_internals

    module = parse(open(aborting_train_step).read())
    names = subgraph.fusions(module)
    assert len(names) > 50
    for n, name in enumerate(names):
        body = [i.name for i in subgraph.reducible(module.entry.get_instruction(name).fused_computation)]
        cand = subgraph.keep_fused(module, name, body[: max(1, len(body) // 2)])
        verify(cand)
        fusion = cand.entry.get_instruction(name)
        assert fusion.operand_count == len(fusion.fused_computation.parameters)
        if n % 20 == 0:
            jax_internals.xla_module_from_text(cand.to_text())


def test_reduce_cli_shrinks_an_aborting_train_step(aborting_train_step, tmp_path):
    original = parse(open(aborting_train_step).read())
    message = abort_message(original)
    assert message is not None and "Check failed" in message
    out = tmp_path / "reduced.hlo"
    started = time.monotonic()
    r = run_hlo("reduce", aborting_train_step, "--until-abort", "-o", out, "--json", "-q")
    seconds = time.monotonic() - started
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    reduced = parse(out.read_text())
    assert report["original_instructions"] == original.instruction_count > 2000
    assert report["instructions"] == reduced.instruction_count < 20
    assert seconds < 300
    assert abort_message(reduced) == message  # checked again here, not taken from the reducer
    fused = [i for i in reduced.instructions() if i.parent is not reduced.entry]
    assert "transpose" in [i.opcode.value for i in fused]  # the cause the docs name, inside a fusion
    assert report["predicate"] == f"XLA aborts: {message}"


def test_reduce_refuses_a_module_that_does_not_abort(tmp_path, capsys):
    path = tmp_path / "fine.hlo"
    path.write_text(_before("llama3-tiny-decode-f32").to_text())
    with pytest.raises(NothingToReduce):
        aborts_like(parse(path.read_text()))
    assert main(["reduce", str(path), "--until-abort", "-q"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "does not abort" in err[0] and "fine.hlo" in err[0]


# -- outputs differ: a rewrite that swaps the operands of one subtract ---------------------------


@dataclass(frozen=True)
class SwapSubtract(Pass):
    """The known bug: ``target - x`` becomes ``x - target`` for one subtract."""

    target: str = "sub.11"
    name = "swap-subtract"

    def run(self, module: Module) -> bool:
        rw = Rewriter()
        for instr in module.instructions():
            if instr.name == self.target and instr.opcode is HloOpcode.SUBTRACT:
                rw.replace_operands(instr, tuple(reversed(instr.operands)))
        return rw.changed


def test_reduce_keeps_the_subtract_whose_operands_a_rewrite_swaps():
    module = _before("llama3-tiny-prefill-f32")
    assert module.entry.get_instruction("sub.11") is not None
    result = reduce_module(module, outputs_differ(pipeline_a="stock", pipeline_b="stock", passes=[SwapSubtract()]),
                           seconds=240)
    names = {i.name: i.opcode.value for i in result.module.instructions()}
    assert names.get("sub.11") == "subtract"
    assert result.instructions <= 3, result.module.to_text()  # two parameters and the subtract
    assert result.stopped is None and result.original_instructions == module.instruction_count


# -- a pass still fires -------------------------------------------------------------------------------


def test_reduce_keeps_a_pass_firing():
    module = _before("llama3-tiny-prefill-f32")
    spec = "producer-consumer-fusion"
    result = reduce_module(module, pass_fires(spec))
    assert PassManager(parse_pipeline(spec)).run(result.module.clone())
    computing = [i for i in result.module.entry if i.opcode is not HloOpcode.PARAMETER]
    assert len(computing) <= 2, result.module.to_text()  # a producer and its consumer
    assert result.instructions < 10


# -- a shell command as the predicate --------------------------------------------------------------


def test_reduce_cli_with_a_shell_predicate(tmp_path, capsys):
    src = tmp_path / "prefill.hlo"
    src.write_text(_before("llama3-tiny-prefill-f32").to_text())
    out = tmp_path / "small.hlo"
    assert main(["reduce", str(src), "--until", "grep -q ' transpose(' {}", "-o", str(out)]) == 0
    summary = capsys.readouterr().out
    small = parse(out.read_text())
    assert "transpose" in _opcodes(small) and small.instruction_count == 2, small.to_text()
    assert "-> 2 instructions" in summary and "`grep -q ' transpose(' {}` exits 0" in summary
    assert main(["reduce", str(src), "--until", "false", "-q"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "does not hold" in err[0]


_LOOP = """HloModule scanned

body {
  t = (s32[], f32[8], f32[8]) parameter(0)
  i = s32[] get-tuple-element(t), index=0
  x = f32[8] get-tuple-element(t), index=1
  w = f32[8] get-tuple-element(t), index=2
  m = f32[8] multiply(x, w)
  e = f32[8] exponential(m)
  a = f32[8] add(e, x)
  one = s32[] constant(1)
  j = s32[] add(i, one)
  ROOT r = (s32[], f32[8], f32[8]) tuple(j, a, w)
}

cond {
  t = (s32[], f32[8], f32[8]) parameter(0)
  i = s32[] get-tuple-element(t), index=0
  k = s32[] constant(2)
  ROOT lt = pred[] compare(i, k), direction=LT
}

ENTRY main {
  p = f32[8] parameter(0)
  q = f32[8] parameter(1)
  z = s32[] constant(0)
  t = (s32[], f32[8], f32[8]) tuple(z, p, q)
  loop = (s32[], f32[8], f32[8]) while(t), condition=cond, body=body
  y = f32[8] get-tuple-element(loop), index=1
  ROOT n = f32[8] negate(y)
}
"""


def test_reduce_enters_a_loop_body():
    """A failure inside a scanned layer: the reduction takes one iteration of the
    body as the module (the loop state's elements as parameters), then cuts it
    down to the exponential (it stopped at the while: 9 instructions left)."""
    from hlo_lab.debug.reduce import subgraph

    module = parse(_LOOP)
    body = subgraph.loop_body(module, "loop")
    verify(body)
    assert [p.shape.to_text() for p in body.entry.parameters] == ["s32[]", "f32[8]", "f32[8]"]
    got = reduce_module(module, lambda m: any(i.opcode is HloOpcode.EXPONENTIAL for i in m.instructions()))
    assert not any(i.opcode is HloOpcode.WHILE for i in got.module.instructions())
    assert _opcodes(got.module) == ["parameter", "exponential"], got.module.to_text()
    assert any(s.phase == "loop body loop" for s in got.steps)
    # named as the file has them: the body's copy made the entry, and it takes the body's name back
    assert got.module.entry.name == "body" and [i.name for i in got.module.entry] == ["m", "e"]
