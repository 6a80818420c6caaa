"""XLA:GPU's own collective estimates (xla_bridge.collective_estimates): read
from XLA's scheduler log during a deviceless 8-GPU compile (no GPU needed)."""

from __future__ import annotations

import re

import pytest

from corpus.bundled import load
from xla_bridge.jax_internals import cuda_plugin_available
from xla_bridge.collective_estimates import parse_estimator_log, xla_collective_estimates

pytestmark = pytest.mark.skipif(not cuda_plugin_available(),
                                reason="jax's CUDA plugin is not installed (pip install --no-deps jax-cuda12-plugin "
                                       "jax-cuda12-pjrt at jaxlib's version): XLA:GPU cannot compile here")

#: One collective of each kind, three all-gathers of growing size in one group.
KINDS = """HloModule collective_kinds

add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

ENTRY main {
  p0 = f32[4096]{0} parameter(0), sharding={replicated}
  p1 = f32[262144]{0} parameter(1), sharding={replicated}
  p2 = f32[4194304]{0} parameter(2), sharding={replicated}
  ag0 = f32[16384]{0} all-gather(p0), channel_id=1, replica_groups={{0,1,2,3},{4,5,6,7}}, use_global_device_ids=true, dimensions={0}
  ag1 = f32[1048576]{0} all-gather(p1), channel_id=2, replica_groups={{0,1,2,3},{4,5,6,7}}, use_global_device_ids=true, dimensions={0}
  ag2 = f32[16777216]{0} all-gather(p2), channel_id=3, replica_groups={{0,1,2,3},{4,5,6,7}}, use_global_device_ids=true, dimensions={0}
  ar = f32[4194304]{0} all-reduce(p2), channel_id=4, replica_groups={{0,4},{1,5},{2,6},{3,7}}, use_global_device_ids=true, to_apply=add
  rs = f32[65536]{0} reduce-scatter(p1), channel_id=5, replica_groups={{0,1,2,3},{4,5,6,7}}, use_global_device_ids=true, dimensions={0}, to_apply=add
  a2a = f32[262144]{0} all-to-all(p1), channel_id=6, replica_groups={{0,1,2,3},{4,5,6,7}}, dimensions={0}
  cp = f32[262144]{0} collective-permute(p1), channel_id=7, source_target_pairs={{0,1},{1,2},{2,3},{3,0},{4,5},{5,6},{6,7},{7,4}}
  ROOT t = (f32[16384]{0}, f32[1048576]{0}, f32[16777216]{0}, f32[4194304]{0}, f32[65536]{0}, f32[262144]{0}, f32[262144]{0}) tuple(ag0, ag1, ag2, ar, rs, a2a, cp)
}
"""

#: Keep the three all-gathers apart (XLA would combine them into one).
NO_COMBINING = {"xla_gpu_all_gather_combine_threshold_bytes": 0, "xla_gpu_all_reduce_combine_threshold_bytes": 0,
                "xla_gpu_reduce_scatter_combine_threshold_bytes": 0}


@pytest.fixture(scope="module")
def llama():
    """The smallest sharded corpus module, as XLA schedules it for 8 H100s."""
    entry = next(load("llama3-tiny-train-f32-dp2tp4"))
    return xla_collective_estimates(entry.text("before_optimizations"), target="h100", topology="1x1x8")


@pytest.fixture(scope="module")
def kinds():
    return xla_collective_estimates(KINDS, target="h100", topology="1x1x8", flags=NO_COMBINING)


def test_every_async_collective_of_the_scheduled_module_has_a_positive_estimate(llama):
    assert llama.device == "NVIDIA H100 80GB HBM3"
    started = [c for c in llama.collectives if c.asynchronous]
    assert len(started) >= 10
    assert {c.kind for c in llama.collectives} >= {"all-gather", "all-reduce", "reduce-scatter", "collective-permute"}
    missing = [c.name for c in llama.collectives if c.seconds is None]
    assert not missing, missing
    assert all(0 < s < 1e-3 for s in llama.seconds.values())
    assert not llama.conflicts
    assert not llama.unmatched, llama.unmatched  # every collective XLA priced is in the inventory
    assert any(c.asynchronous and c.opcode == "reduce-scatter-start" for c in llama.collectives)
    # names are the scheduled module's, and it carries them
    for name in llama.seconds:
        assert f"%{name} = " in llama.scheduled_text


def test_synchronous_collectives_keep_the_estimate_of_the_start_they_were(llama):
    """XLA turns start/done pairs with nothing between them into sync ops after
    scheduling; metadata scheduling_name joins them to the log's name."""
    made_sync = [c for c in llama.collectives if not c.asynchronous and c.scheduling_name != c.name]
    assert made_sync
    assert all(re.search(r"-start(\.\d+)?$", c.scheduling_name) for c in made_sync), made_sync


def test_each_kind_is_estimated_and_estimates_grow_with_bytes(kinds):
    by_kind = {}
    for c in kinds.collectives:
        by_kind.setdefault(c.kind, []).append(c)
    assert set(by_kind) == {"all-gather", "all-reduce", "reduce-scatter", "all-to-all", "collective-permute"}
    assert all(c.seconds and c.seconds > 0 for c in kinds.collectives), kinds.collectives
    gathers = sorted(by_kind["all-gather"], key=lambda c: c.result_bytes)
    assert [c.result_bytes for c in gathers] == [65536, 4194304, 67108864]
    assert len({c.groups for c in gathers}) == 1
    times = [c.seconds for c in gathers]
    assert times == sorted(times) and times[0] < times[-1] / 4


def test_the_log_parser_attributes_lines_to_their_module_by_thread():
    log = "\n".join([
        "I1204 02:30:21.264943   19945 gpu_hlo_schedule.cc:481] Fingerprint before LHS for module m(1) = ab",
        "I1204 02:30:21.264943   19946 gpu_hlo_schedule.cc:481] Fingerprint before LHS for module fusion.1(9) = cd",
        "I1204 02:30:21.3   19945 sol_latency_estimator.cc:532] GetLatencyBetween: Computed collective time for "
        "all-gather-start.1: 29.728 us",
        "I1204 02:30:21.3   19946 sol_latency_estimator.cc:532] GetLatencyBetween: Computed collective time for "
        "all-gather-start.1: 1 us",
        "I1204 02:30:21.3   19945 sol_latency_estimator.cc:520] Failed to compute collective time: INVALID_ARGUMENT: "
        "x for all-reduce-start",
        "I1204 02:30:21.3   19945 analytical_latency_estimator.cc:50] Analytical estimator calculated latency "
        "between all-reduce-start and all-reduce-done to be: 5 us.",
        "not a log line: Computed collective time for x: 3 us",
    ])
    parsed = parse_estimator_log(log)
    assert parsed.micros["m"] == {"all-gather-start.1": [29.728], "all-reduce-start": [5.0]}
    assert parsed.micros["fusion.1"] == {"all-gather-start.1": [1.0]}
    assert parsed.failures["m"] == {"all-reduce-start": "INVALID_ARGUMENT: x"}


def test_an_unknown_estimator_is_refused():
    with pytest.raises(ValueError, match="unknown estimator"):
        xla_collective_estimates(KINDS, estimator="pgle")
