"""The collective inventory (hlo_analysis.collectives), its prices
(collective_time), exposed communication (communication) and ``hlo collectives``,
on the sharded corpus stages and on small modules with known answers."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import pytest

from corpus import bundled
from hlo_analysis import devices
from hlo_analysis.collective_time import price, price_detail
from hlo_analysis.collectives import counts, grep_counts, infer_mesh, inventory, mesh_from_entry
from hlo_analysis.communication import analyze
from hlo_analysis.replica_groups import Mesh, ReplicaGroupsError, parse_replica_groups
from hlo_lab.cli import main
from hlo_lab.cli.collectives import latency_hiding_comparison
from hlo_tools import parse

H100 = devices.load("h100")
MESH = Mesh(("batch", "model"), (2, 4))
STAGES = ("cpu_after_optimizations", "gpu_h100_after_optimizations")
SHARDED = [e for e in bundled.load("*-dp2tp4")]


@pytest.fixture(scope="module")
def corpus_stages():
    out = {}
    for e in SHARDED:
        for stage in STAGES:
            text = e.text(stage)
            out[(e.name, stage)] = (e, text, parse(text))
    return out


def test_the_corpus_has_sharded_stages():
    assert len(SHARDED) == 3


@pytest.mark.parametrize("stage", STAGES)
def test_counts_match_a_grep_of_the_module_text(corpus_stages, stage):
    for (name, st), (entry, text, module) in corpus_stages.items():
        if st != stage:
            continue
        got = counts(inventory(module, MESH))
        # a plain grep, written apart from the module's own pattern
        kinds = "all-gather|all-reduce|reduce-scatter|all-to-all|collective-permute"
        grep: dict[str, int] = {}
        for k in re.findall(rf"= \S.*? ({kinds})(-start)?\(", text):
            key = k[0] + k[1]
            grep[key] = grep.get(key, 0) + 1
        assert got == dict(sorted(grep.items())), name
        assert got == dict(sorted(grep_counts(text).items()))
        assert got == entry.meta["collectives"][stage]  # the generator's own count
        if stage.startswith("gpu"):
            assert any(k.endswith("-start") for k in got)  # async pairs, counted once


def test_the_corpus_mesh_is_read_and_inferred(corpus_stages):
    for (name, stage), (entry, _, module) in corpus_stages.items():
        assert mesh_from_entry(entry.path(stage)) == MESH
        assert infer_mesh(module) == MESH  # the module's own mesh-axes groups name batch and model


SMALL = """HloModule small, num_partitions=8

%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}

%cond (c: (s32[], f32[4,16])) -> pred[] {
  %c = (s32[], f32[4,16]{1,0}) parameter(0)
  %i = s32[] get-tuple-element(%c), index=0
  %n = s32[] constant(3)
  ROOT %lt = pred[] compare(%i, %n), direction=LT
}

%body (c: (s32[], f32[4,16])) -> (s32[], f32[4,16]) {
  %c = (s32[], f32[4,16]{1,0}) parameter(0)
  %i = s32[] get-tuple-element(%c), index=0
  %x = f32[4,16]{1,0} get-tuple-element(%c), index=1
  %one = s32[] constant(1)
  %j = s32[] add(%i, %one)
  %y = f32[4,16]{1,0} all-reduce(%x), channel_id=9, replica_groups=[2,4]<=[8], use_global_device_ids=true, to_apply=%add
  ROOT %t = (s32[], f32[4,16]{1,0}) tuple(%j, %y)
}

ENTRY %e (p: f32[4,16]) -> (f32[4,16], f32[8,16], f32[1,16], f32[4,16], f32[4,16], f32[4,16], f32[8,16], (s32[], f32[4,16])) {
  %p = f32[4,16]{1,0} parameter(0)
  %ar = f32[4,16]{1,0} all-reduce(%p), channel_id=1, replica_groups={{0,1,2,3},{4,5,6,7}}, use_global_device_ids=true, to_apply=%add, metadata={op_name="jit(f)/psum" source_file="model.py" source_line=12}
  %ag = f32[8,16]{1,0} all-gather(%p), channel_id=2, replica_groups=[4,2]<=[2,4]T(1,0), dimensions={0}, use_global_device_ids=true
  %rs = f32[1,16]{1,0} reduce-scatter(%p), channel_id=3, replica_groups=[2,4]<=[8], dimensions={0}, use_global_device_ids=true, to_apply=%add
  %a2a = f32[4,16]{1,0} all-to-all(%p), channel_id=4, replica_groups={{0,4},{1,5},{2,6},{3,7}}, dimensions={0}
  %cp = f32[4,16]{1,0} collective-permute(%p), channel_id=5, source_target_pairs={{0,1},{1,2},{2,3},{3,0},{4,5},{5,6},{6,7},{7,4}}
  %half = f32[4,16]{1,0} all-reduce(%p), channel_id=6, replica_groups=[4,2]<=[2,2,2]T(0,2,1), use_global_device_ids=true, to_apply=%add
  %mesh = f32[8,16]{1,0} all-gather(%p), channel_id=7, replica_groups=mesh['x'=2,'y'=4] {'x'}, dimensions={0}, use_global_device_ids=true
  %zero = s32[] constant(0)
  %init = (s32[], f32[4,16]{1,0}) tuple(%zero, %p)
  %loop = (s32[], f32[4,16]{1,0}) while(%init), condition=%cond, body=%body, backend_config={"known_trip_count":{"n":"3"}}
  ROOT %out = (f32[4,16]{1,0}, f32[8,16]{1,0}, f32[1,16]{1,0}, f32[4,16]{1,0}, f32[4,16]{1,0}, f32[4,16]{1,0}, f32[8,16]{1,0}, (s32[], f32[4,16]{1,0})) tuple(%ar, %ag, %rs, %a2a, %cp, %half, %mesh, %loop)
}
"""


def test_axes_bytes_and_trip_counts_on_a_small_module():
    by = {c.name: c for c in inventory(parse(SMALL), MESH)}
    f32_4x16 = 4 * 16 * 4
    ar, ag, rs, a2a, cp = by["ar"], by["ag"], by["rs"], by["a2a"], by["cp"]
    assert (ar.axis, ar.group_size, ar.bytes, ar.wire_bytes) == ("model", 4, f32_4x16, 2 * 3 / 4 * f32_4x16)
    assert (ag.axis, ag.groups[0], ag.bytes, ag.wire_bytes) == ("batch", (0, 4), 2 * f32_4x16, f32_4x16)
    assert (rs.axis, rs.bytes, rs.wire_bytes) == ("model", f32_4x16, 3 / 4 * f32_4x16)  # the unscattered operand
    assert (a2a.axis, a2a.mode) == ("batch", "cross-partition")
    assert (cp.axis, cp.bytes, cp.wire_bytes) == ("model", f32_4x16, f32_4x16)
    assert by["half"].axis == "model (2 of 4)" and by["half"].groups[0] == (0, 2)
    assert by["mesh"].axis == "batch"
    assert (ar.op_name, ar.source, ar.mode) == ("jit(f)/psum", "model.py:12", "flattened-id")
    assert (by["y"].executions, by["y"].trip_count_known, by["y"].computation) == (3, True, "body")
    assert not any(c.is_async for c in by.values())


def test_replica_group_forms_and_errors():
    assert parse_replica_groups("{}", 4) == ((0, 1, 2, 3),)
    assert parse_replica_groups("[2,4]<=[4,2]T(1,0)", 8) == ((0, 2, 4, 6), (1, 3, 5, 7))
    assert parse_replica_groups("mesh['a'=2,'b'=2,'c'=2] {'a','c'}", 8) == ((0, 1, 4, 5), (2, 3, 6, 7))
    with pytest.raises(ReplicaGroupsError, match=r"expected \[G,S\]<=\[dims\]"):
        parse_replica_groups("[3,4]<=[8]", 8)
    with pytest.raises(ReplicaGroupsError, match="naming the mesh's axes"):
        parse_replica_groups("mesh['a'=2,'b'=4] {'z'}", 8)
    with pytest.raises(ReplicaGroupsError, match="does not divide"):
        parse_replica_groups("mesh['a'=2,'b'=4] {'b':(2)4}", 8)


def test_sub_axes_of_the_mesh_form():
    """Shardy's sub-axis ``'b':(m)k`` (MaxText's fsdp=4 x tensor=2 dump prints
    ``{'fsdp':(2)2}``): the part of size k whose more-major parts multiply to m.
    The major half of a size-4 axis is the iota form XLA prints for the same groups."""
    iota = parse_replica_groups("[4,2]<=[2,2,2]T(0,2,1)", 8)
    assert parse_replica_groups("mesh['batch'=2,'model'=4] {'model':(1)2}", 8) == iota == ((0, 2), (1, 3), (4, 6), (5, 7))
    assert parse_replica_groups("mesh['batch'=2,'model'=4] {'model':(2)2}", 8) == ((0, 1), (2, 3), (4, 5), (6, 7))
    assert parse_replica_groups("mesh['fsdp'=4,'tensor'=2] {'fsdp':(2)2}", 8) == ((0, 2), (1, 3), (4, 6), (5, 7))
    assert parse_replica_groups("mesh['fsdp'=4,'tensor'=2] {'fsdp':(1)2,'tensor'}", 8) == ((0, 1, 4, 5), (2, 3, 6, 7))
    both = "mesh['fsdp'=4,'tensor'=2] {'fsdp':(1)2,'fsdp':(2)2}"
    assert parse_replica_groups(both, 8) == parse_replica_groups("mesh['fsdp'=4,'tensor'=2] {'fsdp'}", 8)
    with pytest.raises(ReplicaGroupsError, match="NAME=SIZE"):
        Mesh.parse("batch:2")


#: The mesh-axes spellings XLA prints for the groups of axis 'a' of a 2x4 mesh:
#: names quoted (jaxlib 0.10-0.12) or bare (newer XLA, mesh_and_axis.cc), with no
#: device order, a listed one, or an iota one (``[4,2]T(1,0)``: 0,2,4,6,1,3,5,7).
MESH_SPELLINGS = {
    "quoted": ("mesh['a'=2,'b'=4] {'a'}", ((0, 4), (1, 5), (2, 6), (3, 7))),
    "bare": ("mesh[a=2,b=4] {a}", ((0, 4), (1, 5), (2, 6), (3, 7))),
    "device_ids listed": ("mesh['a'=2,'b'=4], device_ids=(7,6,5,4,3,2,1,0) {'a'}", ((7, 3), (6, 2), (5, 1), (4, 0))),
    "device_ids iota": ("mesh['a'=2,'b'=4], device_ids=([4,2]T(1,0)) {'a'}", ((0, 1), (2, 3), (4, 5), (6, 7))),
    "device_ids bare": ("mesh[a=2,b=4], device_ids=([4,2]T(1,0)) {b}", ((0, 2, 4, 6), (1, 3, 5, 7))),
    "device_ids sub-axis": ("mesh['a'=2,'b'=4], device_ids=(1,0,3,2,5,4,7,6) {'b':(1)2}",
                            ((1, 3), (0, 2), (5, 7), (4, 6))),
}


def _one_collective(groups: str) -> str:
    return f"""HloModule m, num_partitions=8

add {{
  x = f32[] parameter(0)
  y = f32[] parameter(1)
  ROOT s = f32[] add(x, y)
}}

ENTRY main {{
  p = f32[8,16]{{1,0}} parameter(0)
  ROOT ar = f32[8,16]{{1,0}} all-reduce(p), channel_id=1, replica_groups={groups}, use_global_device_ids=true, to_apply=add
}}
"""


@pytest.mark.parametrize("spelling", list(MESH_SPELLINGS))
def test_each_mesh_spelling_is_read(spelling, tmp_path, capsys):
    """Each spelling's groups (the devices at the mesh positions that differ only
    along the named axes), read by `hlo collectives` and `hlo analyze`; the quoted
    ones are also what this jaxlib's XLA parses and prints back."""
    from xla_bridge import jax_internals

    text, groups = MESH_SPELLINGS[spelling]
    assert parse_replica_groups(text, 8) == groups
    module = parse(_one_collective(text))
    assert module.entry.root.attributes["replica_groups"] == text  # device_ids is part of the value
    [c] = inventory(module, infer_mesh(module))
    assert c.groups == groups
    if "'" in text:
        printed = jax_internals.xla_module_from_text(_one_collective(text)).to_string()
        assert f"replica_groups={text}," in printed
    path = tmp_path / "m.hlo"
    path.write_text(_one_collective(text))
    assert main(["collectives", str(path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["counts"]["all-reduce"] == 1
    assert main(["analyze", str(path)]) == 0


def test_a_mesh_device_order_that_is_not_a_permutation_is_an_error():
    with pytest.raises(ReplicaGroupsError, match="not an order of the mesh's 8 devices"):
        parse_replica_groups("mesh['a'=2,'b'=4], device_ids=(0,1,2,3,4,5,6,6) {'a'}", 8)
    with pytest.raises(ReplicaGroupsError, match="not a permutation"):
        parse_replica_groups("mesh['a'=2,'b'=4], device_ids=([4,2]T(1,1)) {'a'}", 8)


def test_prices_follow_the_ring_formulas():
    c = next(c for c in inventory(parse(SMALL), MESH) if c.name == "ar")
    s, n = c.bytes, 4
    want = 5e-6 + 2 * (n - 1) * H100.nvlink_latency_s + 2 * (n - 1) / n * s / H100.nvlink_bandwidth
    assert price(c, H100) == pytest.approx(want)
    # two nodes of four: the model axis stays in a node, the batch axis crosses
    assert price_detail(c, H100, 2, devices=8).link == "nvlink"
    ag = next(c for c in inventory(parse(SMALL), MESH) if c.name == "ag")
    p = price_detail(ag, H100, 2, devices=8)
    assert p.link == "ib" and p.seconds == pytest.approx(5e-6 + H100.ib_latency_s + ag.bytes / 2 / H100.ib_bandwidth)
    with pytest.raises(ValueError, match="no interconnect figures"):
        price(c, devices.load("b200"))


ASYNC = """HloModule overlapped, is_scheduled=true, num_partitions=8

ENTRY %e (p: f32[1024,1024], w: f32[2048,2048]) -> (f32[4096,1024], f32[4096,1024], f32[2048,2048], f32[1024,1024]) {
  %p = f32[1024,1024]{1,0} parameter(0)
  %w = f32[2048,2048]{1,0} parameter(1)
  %covered-start = (f32[1024,1024]{1,0}, f32[4096,1024]{1,0}) all-gather-start(%p), channel_id=1, replica_groups=[2,4]<=[8], dimensions={0}, use_global_device_ids=true
  %mm = f32[2048,2048]{1,0} dot(%w, %w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  %covered-done = f32[4096,1024]{1,0} all-gather-done(%covered-start)
  %bare-start = (f32[1024,1024]{1,0}, f32[4096,1024]{1,0}) all-gather-start(%p), channel_id=2, replica_groups=[2,4]<=[8], dimensions={0}, use_global_device_ids=true
  %bare-done = f32[4096,1024]{1,0} all-gather-done(%bare-start)
  %sync = f32[1024,1024]{1,0} all-reduce(%p), channel_id=3, replica_groups=[2,4]<=[8], use_global_device_ids=true, to_apply=%add
  ROOT %t = (f32[4096,1024]{1,0}, f32[4096,1024]{1,0}, f32[2048,2048]{1,0}, f32[1024,1024]{1,0}) tuple(%covered-done, %bare-done, %mm, %sync)
}

%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}
"""


def test_exposed_communication_on_a_hand_built_schedule():
    r = analyze(parse(ASYNC), MESH, H100)
    by = {p.collective.name: p for p in r.collectives}
    assert r.counts() == {"all-gather-start": 2, "all-reduce": 1}
    cov, bare, sync = by["covered-start"], by["bare-start"], by["sync"]
    # the 2048^3 f32 dot between start and done (~36 us at TF32) hides most of the
    # 16 MiB gather (~39 us at 450 GB/s): what it leaves is the exposed part
    assert cov.seconds == pytest.approx(bare.seconds)
    assert 0 < cov.covered_s < cov.seconds and cov.covered_s > 0.8 * cov.seconds
    assert cov.exposed_s == pytest.approx(cov.seconds - cov.covered_s)
    assert bare.covered_s == 0 and bare.exposed_s == pytest.approx(bare.seconds)  # nothing scheduled between
    assert sync.exposed_s == pytest.approx(sync.seconds)  # sync collectives are exposed in full
    assert r.exposed_s == pytest.approx(cov.exposed_s + bare.exposed_s + sync.exposed_s)
    assert 0 < r.exposed_fraction < 1


def test_our_scheduler_never_exposes_more_than_xlas_schedule(corpus_stages):
    entry, _, module = corpus_stages[("llama3-tiny-train-f32-dp2tp4", "gpu_h100_after_optimizations")]
    s = latency_hiding_comparison(module, MESH, H100, max_in_flight=2, memory_slack=0.1)
    assert s.after_exposed_s <= s.before_exposed_s + 1e-12
    assert s.after_peak_bytes <= s.before_peak_bytes * 1.1
    assert s.before_exposed_s <= s.comm_s


def test_cli_json_keys_and_counts(capsys):
    entry = SHARDED[0]
    assert main(["collectives", f"{entry.name}/gpu_h100_after_optimizations", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert {"counts", "bytes", "collectives", "totals", "memory", "bytes_by_axis"} <= set(d)
    assert d["counts"] == entry.meta["collectives"]["gpu_h100_after_optimizations"]
    assert sum(d["counts"].values()) == len(d["collectives"])
    for c in d["collectives"]:
        assert {"kind", "bytes", "axis", "exposed_us"} <= set(c)
    assert set(d["bytes"]) == set(d["counts"])
    assert 0 < d["totals"]["exposed_fraction"] <= 1
    assert d["memory"]["peak_bytes"] >= d["memory"]["parameters_bytes"]


def test_cli_errors(capsys, tmp_path):
    path = tmp_path / "small.hlo"
    path.write_text(SMALL)
    assert main(["collectives", str(path), "--mesh", "a=3"]) == 2
    assert "has 3 devices, the module 8" in capsys.readouterr().err
    assert main(["collectives", str(path), "--nodes", "3"]) == 2
    assert "does not divide" in capsys.readouterr().err
    assert main(["collectives", str(path), "--target", "a100"]) == 2
    assert "no interconnect figures" in capsys.readouterr().err
    assert main(["collectives", str(path), "--mesh", "p=2,q=4"]) == 0
    assert "p,q" not in capsys.readouterr().out  # no group varies along both


def test_cli_tables_redirected_to_a_file_keep_their_columns(monkeypatch, tmp_path):
    """Piped, rich assumed 80 columns and folded the op_name column to one letter a
    line (549 lines for MaxText's train step, whose op_names are long); the
    command's console is wide there."""
    from tests.conftest import run_hlo

    monkeypatch.delenv("COLUMNS", raising=False)
    long_name = "jit(train_step)/transpose(jvp())/while/body/checkpoint/rematted_computation/dot_general"
    path = tmp_path / "small.hlo"
    path.write_text(SMALL.replace('op_name="jit(f)/psum"', f'op_name="{long_name}"'))
    done = run_hlo("collectives", path, "--mesh", "batch=2,model=4")
    assert done.returncode == 0, done.stderr
    top = done.stdout[done.stdout.index("top 10 exposed"):]
    assert len(top.splitlines()) <= 16, top
    assert "rematted_computation/dot_general" in top


_UNPARTITIONED = """HloModule jit_step, num_partitions=8

ENTRY main {
  w = f32[64,32] parameter(0), sharding={mesh['fsdp'=4,'tensor'=2], [{'fsdp'}, {'tensor'}]}
  x = f32[8,64] parameter(1), sharding={mesh['fsdp'=4,'tensor'=2], [{'fsdp'}, {}]}
  ROOT y = f32[8,32] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}
"""


def test_a_module_before_partitioning_takes_its_mesh_from_named_shardings(tmp_path, capsys):
    """A sharded jit's before_optimizations dump has named shardings and no
    collective: the mesh is the shardings' (it was axis0=8), and the report says
    its shapes are the whole program's."""
    from hlo_analysis.collectives import awaits_partitioning

    module = parse(_UNPARTITIONED)
    assert infer_mesh(module) == Mesh(("fsdp", "tensor"), (4, 2)) and awaits_partitioning(module)
    assert not awaits_partitioning(parse(SMALL))
    path = tmp_path / "b.hlo"
    path.write_text(_UNPARTITIONED)
    assert main(["collectives", str(path), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["mesh"] == {"axes": ["fsdp", "tensor"], "shape": [4, 2]} and d["awaits_partitioning"] is True
    assert main(["collectives", str(path)]) == 0
    out = capsys.readouterr().out
    assert "mesh fsdp=4,tensor=2" in out and "not partitioned yet" in out and "memory of the whole program" in out
