"""One way to measure a pass against XLA: ``Measurement`` + ``XlaPipeline`` + ``HookStage``."""

from __future__ import annotations

import pytest


from hlo_tools import parse
from hlo_tools.opcode import HloOpcode
from passes import PassManager, get_pass
from xla_bridge import AS_WRITTEN, STOCK, HookStage, Measurement, XlaPipeline, XlaCompileError
from xla_bridge.jax_internals import hook_supported
from xla_bridge.examples import UNFUSED

needs_hook = pytest.mark.skipif(not hook_supported(), reason="needs jax.extend.xla's pipeline hook (jax >= 0.12)")

SHARDED = """HloModule spmd, entry_computation_layout={(f32[8]{0})->f32[8]{0}}, num_partitions=2

ENTRY %main (p: f32[8]) -> f32[8] {
  %p = f32[8]{0} parameter(0), sharding={devices=[2]0,1}
  ROOT %a = f32[8]{0} add(%p, %p), sharding={devices=[2]0,1}
}
"""


class CountingPass:
    """A pass as the bridge sees one: ``run(module) -> bool``; changes nothing."""

    name = "counting"

    def __init__(self) -> None:
        self.runs = 0

    def run(self, module) -> bool:
        self.runs += 1
        return False


def test_hook_stages_have_one_spelling():
    assert HookStage("pre-scheduler") is HookStage.PRE_SCHEDULER
    assert HookStage.POST_SCHEDULER == "post-scheduler" and str(HookStage.POST_SCHEDULER) == "post-scheduler"
    assert HookStage.for_fusion("cpu") is HookStage.PRE_SCHEDULER
    assert HookStage.for_fusion("gpu") is HookStage.POST_SCHEDULER
    for other in ("pre", "pre_scheduler", "PRE_SCHEDULER", "post"):
        with pytest.raises(ValueError, match="unknown hook stage"):
            HookStage(other)


def test_pipeline_says_base_and_hook():
    assert STOCK.hook() is None and AS_WRITTEN.base == "as-written"
    p = XlaPipeline.as_written().hooked(CountingPass(), "pre-scheduler")
    assert p.stage is HookStage.PRE_SCHEDULER and p.base == "as-written"
    assert str(p) == "as-written + counting at pre-scheduler"
    assert p.hook() is not p.hook()  # one fresh Hook per compile
    with pytest.raises(ValueError, match="unknown pipeline"):
        XlaPipeline("fast")
    with pytest.raises(ValueError, match="needs a stage"):
        XlaPipeline("stock", pass_=CountingPass())


@needs_hook
def test_compile_each_runs_the_pass_only_where_hooked():
    counting = CountingPass()
    res = Measurement("cpu").compile_each(UNFUSED, {
        "stock": STOCK, "written": AS_WRITTEN, "hooked": STOCK.hooked(counting, HookStage.POST_SCHEDULER)})
    assert list(res) == ["stock", "written", "hooked"]
    assert [r.pipeline for r in res.values()] == ["stock", "as-written", "stock"]
    assert res["stock"].hook is None and res["written"].hook is None
    hook = res["hooked"].hook
    assert counting.runs == hook.calls >= 1 and hook.changed == 0
    assert hook.after is not None and hook.after.name == parse(hook.seen[0]).name
    # it changed nothing, so XLA compiled its own module: the same as stock
    assert res["hooked"].optimized_text == res["stock"].optimized_text


@needs_hook
def test_a_pass_manager_hooked_in_reports_its_change_and_xla_keeps_it():
    fuse = PassManager([get_pass("producer-consumer-fusion"), get_pass("dce")])
    m = Measurement("cpu")
    res = m.compile(UNFUSED, AS_WRITTEN.hooked(fuse, HookStage.for_fusion("cpu")))
    written = {i.name for i in res.hook.after.entry if i.opcode is HloOpcode.FUSION}
    compiled = {i.name for i in res.optimized_module.entry if i.opcode is HloOpcode.FUSION}
    assert res.hook.changed == 1 and written and written <= compiled
    b = m.benchmark(UNFUSED, UNFUSED, STOCK, AS_WRITTEN.hooked(fuse, HookStage.for_fusion("cpu")), reps=3, warmup=1)
    assert b.verdict in ("exact", "close") and b.hook_b.changed == 1
    with pytest.raises(ValueError, match="B's pipeline only"):
        m.benchmark(UNFUSED, UNFUSED, AS_WRITTEN.hooked(fuse, HookStage.PRE_SCHEDULER), STOCK)


def test_a_hooked_pass_that_raises_is_a_hook_error():
    class Boom:
        def run(self, module):
            raise RuntimeError("boom")

    if not hook_supported():
        pytest.skip("needs the pipeline hook")
    with pytest.raises(XlaCompileError, match="hooked pass raised RuntimeError: boom") as e:
        Measurement("cpu").compile(UNFUSED, STOCK.hooked(Boom(), HookStage.POST_SCHEDULER))
    assert e.value.stage == "hook"


def test_spmd_partitions_in_the_worker(monkeypatch):
    """Two host devices (an XLA flag read at jax's start: the worker restarts with it)."""
    monkeypatch.setenv("XLA_FLAGS", "--xla_force_host_platform_device_count=2")
    res = Measurement("cpu", partitions=2, contained=True).compile(SHARDED)
    assert res.partitions == 2 and not res.runnable
    shapes = {p.shape.without_layout().to_text() for p in res.optimized_module.entry.parameters}
    assert shapes == {"f32[4]"}  # each partition holds half
    with pytest.raises(ValueError, match="compile only"):
        Measurement("cpu", partitions=2).benchmark(SHARDED)
