"""``hlo profile``: a trace joined to the instructions of the module that ran
(xla_bridge.trace reads it, hlo_analysis.profiles joins it), on the real XLA:CPU:
a corpus module run under the profiler, and a trace a user made with
``jax.profiler.trace`` of a model of their own, which the lab never ran.

How close the host roofline comes to the measured times is a measurement:
``bench/profile_vs_model.py`` prints the joined share and the rank correlation
over every runnable corpus module."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

import corpus
from hlo_analysis import cost, devices, profiles, roofline
from hlo_analysis.units import finite, fmt_seconds
from hlo_tools.parser import parse
from hlo_tools.formats import wire_fields
from xla_bridge.jax_internals import cuda_plugin_available
from xla_bridge.trace import KernelEvent, TraceUnavailable, profile_module, read_trace, trace_files, xla_pgle_costs

from conftest import run_hlo

REPS = 3
RUNNABLE = sorted(e.name for e in corpus.load() if e.runnable)


def _profiled(name: str):
    e = next(corpus.load(name))
    text, events = profile_module(e.text("before_optimizations"), reps=REPS, name=e.name)
    return parse(text), events


@pytest.fixture(scope="module")
def decode_profile():
    return _profiled("llama3-tiny-decode-f32")


@pytest.mark.parametrize("name", RUNNABLE)
def test_every_event_of_a_runnable_corpus_module_joins_to_an_instruction(name):
    module, events = _profiled(name)
    j = profiles.join(module, events, devices.host())
    assert j.runs == REPS
    assert j.joined_share >= 0.995 and not j.unjoined
    # every kernel of the cost model ran, once a run, and has its prediction beside it
    # (loop bodies' kernels as often as the roofline's loop rule says)
    runs = {k.name: k.executions for k in roofline.roofline(module, devices.host()).kernels}
    by_name = {k.name: k for k in j.kernels}
    assert set(runs) <= set(by_name)
    for name, n in runs.items():
        k = by_name[name]
        assert k.executions == n and k.measured_s > 0 and k.predicted_s is not None and k.predicted_s > 0
    assert j.predicted_s > 0 and j.device_s > 0


def test_a_module_the_trace_lacks_is_named_with_what_it_holds(decode_profile):
    module, events = decode_profile
    other = parse("HloModule jit_other\n\nENTRY %main {\n  ROOT %p = f32[2]{0} parameter(0)\n}\n")
    with pytest.raises(profiles.ProfileJoinError, match=r"no events of module jit_other; it holds: .*program"):
        profiles.join(other, events, devices.host())


def _event(name: str, t0: float, t1: float, run: int = 1) -> KernelEvent:
    return KernelEvent(name, "m", 1, run, "/host:CPU", "t", t0, t1, t1)


def test_a_loop_event_keeps_only_its_own_time():
    module = parse("""HloModule m

%body (p: f32[4]) -> f32[4] {
  %p = f32[4]{0} parameter(0)
  ROOT %e = f32[4]{0} exponential(%p)
}

%cond (q: f32[4]) -> pred[] {
  %q = f32[4]{0} parameter(0)
  ROOT %t = pred[] constant(true)
}

ENTRY %main (x: f32[4]) -> f32[4] {
  %x = f32[4]{0} parameter(0)
  ROOT %w = f32[4]{0} while(%x), condition=%cond, body=%body
}
""")
    # the while's event holds two iterations of its body (10 and 20 ns): 30 of its 100 ns are theirs
    events = [_event("w", 0, 100), _event("e", 10, 20), _event("e", 40, 60)]
    j = profiles.join(module, events, devices.load("h100"))
    by_name = {k.name: k for k in j.kernels}
    assert by_name["w"].measured_s == pytest.approx(70e-9) and by_name["e"].measured_s == pytest.approx(30e-9)
    assert by_name["e"].executions == 2
    assert j.device_s == pytest.approx(100e-9)  # the loop's span, counted once


# -- a trace made by a user, without the lab --------------------------------------------


@pytest.fixture(scope="module")
def user_trace(tmp_path_factory):
    """A small model of our own (a fori loop of 4 trips, jax.random, argmax, a tuple
    out) run 3 times under ``jax.profiler.trace``, with another program run in the
    same trace; its optimized module as jax compiled it."""
    import jax
    import jax.numpy as jnp

    def f(key, w, x):
        noise = jax.random.normal(key, x.shape)

        def body(i, c):
            x, s = c
            x = jnp.tanh(x @ w) + 0.1 * noise
            return x, s + x.sum()

        x, s = jax.lax.fori_loop(0, 4, body, (x, 0.0))
        return jax.nn.softmax(x, axis=-1).argmax(-1), s

    args = (jax.random.PRNGKey(0), jnp.full((64, 64), 0.01), jnp.ones((8, 64)))
    g = jax.jit(f)
    jax.block_until_ready(g(*args))
    d = tmp_path_factory.mktemp("trace")
    scale = jax.jit(lambda a: a * 2.0)
    with jax.profiler.trace(str(d)):
        for _ in range(3):
            jax.block_until_ready(g(*args))
            jax.block_until_ready(scale(args[2]))
    hlo = d / "jit_f.after_optimizations.hlo"
    hlo.write_text(g.lower(*args).compile().as_text())
    return hlo, d


def test_a_trace_made_by_a_user_joins_without_the_lab_running_it(user_trace):
    hlo, d = user_trace
    module = parse(hlo.read_text())
    j = profiles.join(module, read_trace(d), devices.host())
    assert j.runs == 3 and j.joined_share >= 0.995
    assert [m for m, _ in j.others] == ["jit__lambda"]  # the other program of the trace: named, not joined
    looped = [k for k in j.kernels if k.predicted_s is not None and k.executions == 4]
    assert looped, "the loop body's kernels run 4 times a run"
    # the prediction counts the loop's trips as the trace does
    est = {k.name: k for k in roofline.roofline(module, devices.host()).kernels}
    assert all(est[k.name].executions == 4 for k in looped)


def test_hlo_profile_reads_a_users_trace_and_says_what_is_wrong(user_trace, tmp_path):
    hlo, d = user_trace
    r = run_hlo("profile", hlo, "--trace", d, "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["module"] == "jit_f" and out["runs"] == 3 and out["joined_share"] >= 0.995
    assert out["device"] == "host" and out["kernels"][0]["measured_s"] >= out["kernels"][-1]["measured_s"]
    r = run_hlo("profile", hlo, "--trace", tmp_path / "none")
    assert r.returncode == 1 and "no such file or folder" in r.stderr and "Traceback" not in r.stderr
    other = tmp_path / "other.hlo"
    other.write_text("HloModule jit_g\n\nENTRY %main {\n  ROOT %p = f32[2]{0} parameter(0)\n}\n")
    r = run_hlo("profile", other, "--trace", d)
    assert r.returncode == 1 and "no events of module jit_g; it holds: jit_f" in r.stderr


def test_a_file_that_is_not_a_trace_is_named(tmp_path):
    bad = tmp_path / "x.xplane.pb"
    bad.write_bytes(b"\x00not a proto")
    with pytest.raises(TraceUnavailable, match="x.xplane.pb"):
        read_trace(bad)


# -- PGLE: XLA's profile-guided latency estimator input ----------------------------------


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b, n = n & 0x7F, n >> 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _encode(data: bytes, fields: dict, replace) -> bytes:
    out = bytearray()
    for number, items in fields.items():
        for wire, start, end in items:
            payload = replace(number, data[start:end]) if wire == 2 else data[start:end]
            out += _varint(number << 3 | wire) + (_varint(len(payload)) if wire == 2 else b"") + payload
    return bytes(out)


def _as_device_plane(xspace: bytes, old: str, new: str) -> bytes:
    """The XSpace with plane ``old`` (XPlane field 2, its name) renamed ``new``."""
    def plane(number: int, blob: bytes) -> bytes:
        if number != 1:  # XSpace field 1: the planes
            return blob
        return _encode(blob, wire_fields(blob), lambda n, b: new.encode() if n == 2 and b == old.encode() else b)
    return _encode(xspace, wire_fields(xspace), plane)


def test_pgle_costs_are_xlas_own(user_trace, tmp_path):
    """XLA's converter (jaxlib's get_profiled_instructions_proto) reads device planes
    only: on this XLA:CPU trace it returns nothing. Given the same events on a device
    plane, it and ours agree on every key and value."""
    hlo, d = user_trace
    assert xla_pgle_costs(d) == {}
    (src,) = trace_files(d)
    dst = tmp_path / "plugins" / "profile" / "run" / src.name
    dst.parent.mkdir(parents=True)
    dst.write_bytes(_as_device_plane(src.read_bytes(), "/host:CPU", "/device:GPU:0"))
    theirs = xla_pgle_costs(tmp_path)
    events = read_trace(tmp_path)
    ours = profiles.pgle_costs(parse(hlo.read_text()), events)
    # XLA's covers every program of the trace, ours the module's; without a fingerprint
    # XLA keys by name alone, so a name both programs use is one entry there, mixed
    other = {e.hlo_op for e in events if e.hlo_module != "jit_f"}
    assert ours and other and set(theirs) == set(ours) | other
    assert all(ours[k] == pytest.approx(theirs[k], rel=1e-9) for k in set(ours) - other)


@pytest.mark.skipif(not cuda_plugin_available(), reason="XLA:GPU without a GPU needs the CUDA plugin (make venv)")
def test_xla_reads_the_pgle_file_hlo_profile_writes(user_trace, tmp_path):
    hlo, d = user_trace
    out = tmp_path / "profile.pbtxt"
    r = run_hlo("profile", hlo, "--trace", d, "--pgle", out)
    assert r.returncode == 0, r.stderr
    assert out.read_text().startswith("costs { name: ")
    bad = tmp_path / "bad.pbtxt"
    bad.write_text(out.read_text().replace("cost_us", "cost", 1))
    target = next(corpus.load("llama3-tiny-decode-f32")).path("before_optimizations")
    said = {}
    for f in (out, bad):
        r = run_hlo("compile", target, "--target", "h100", "--xla-flag=--xla_gpu_enable_latency_hiding_scheduler=true",
                    f"--xla-flag=--xla_gpu_pgle_profile_file_or_directory_path={f}")
        assert r.returncode == 0, r.stderr
        said[f] = r.stderr
    assert "failed to parse PGLE proto" not in said[out]
    assert "failed to parse PGLE proto" in said[bad]  # XLA does read the file: a broken one is said so


# -- the profile on the graph: hlo viz --profile -----------------------------------------------


@pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz's `dot` is missing (apt-get install -y graphviz)")
def test_hlo_viz_shows_a_profile_on_its_nodes(decode_profile, tmp_path):
    module, events = decode_profile
    hlo = tmp_path / "decode.hlo"
    hlo.write_text(module.to_text())
    prof = tmp_path / "profile.json"  # what `hlo profile --json` prints
    prof.write_text(json.dumps(finite(profiles.join(module, events, devices.host()).as_dict())))
    top = json.loads(prof.read_text())["kernels"][0]
    page = tmp_path / "page.html"
    r = run_hlo("viz", hlo, "--profile", prof, "-o", page, "-q", "--around", top["name"], "--radius", "1")
    assert r.returncode == 0, r.stderr
    text = page.read_text()
    assert f"measured {fmt_seconds(top['measured_s'])}" in text and "— hlo profile" in text
    r = run_hlo("viz", hlo, "--after", hlo, "--profile", prof, "--after-profile", prof, "-o", tmp_path / "ba.html",
                "-q", "--around", top["name"], "--radius", "1")
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "ba.html").read_text().count("— hlo profile") == 2  # a table per side
    other = tmp_path / "other.hlo"
    other.write_text(module.to_text().replace(f"HloModule {module.name}", "HloModule jit_other", 1))
    r = run_hlo("viz", other, "--profile", prof, "-o", tmp_path / "o.html")
    assert r.returncode == 1 and f"a profile of module '{module.name}', not of 'jit_other'" in r.stderr


_SHARDED = '''
import sys, jax, jax.numpy as jnp, numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
mesh = Mesh(np.array(jax.devices()).reshape(2, 4), ("data", "model"))
def f(w, x):
    h = jnp.tanh(x @ w)
    return (h * h).sum()
w = jax.device_put(jnp.full((64, 128), 0.01), NamedSharding(mesh, P(None, "model")))
x = jax.device_put(jnp.ones((16, 64)), NamedSharding(mesh, P("data", None)))
g = jax.jit(jax.grad(f))
jax.block_until_ready(g(w, x))
with jax.profiler.trace(sys.argv[1]):
    for _ in range(2):
        jax.block_until_ready(g(w, x))
open(sys.argv[2], "w").write(g.lower(w, x).compile().as_text())
'''


def test_a_sharded_programs_trace_joins_per_device(tmp_path):
    """A user's SPMD program on 8 host devices (a 2x4 mesh, an all-reduce in its
    gradient): each device runs every instruction once a run; times are per device."""
    hlo = tmp_path / "grad.hlo"
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=8", JAX_PLATFORMS="cpu")
    r = subprocess.run([sys.executable, "-c", _SHARDED, str(tmp_path / "trace"), str(hlo)], capture_output=True,
                       text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    module = parse(hlo.read_text())
    j = profiles.join(module, read_trace(tmp_path / "trace"), devices.host())
    assert j.devices == 8 and j.runs == 2 and j.joined_share >= 0.995
    by_name = {k.name: k for k in j.kernels}
    assert all(k.executions == 1 for k in j.kernels)
    (reduce,) = [k for k in j.kernels if k.opcode == "all-reduce"]
    assert reduce.measured_s > 0 and reduce.predicted_s is not None and set(by_name) >= {
        i.name for i in cost.kernel_instructions(module)}


def test_hlo_profile_names_xlas_kernels_as_the_file_has_them(tmp_path):
    """XLA renames what it compiles (jaxlib's StableHLO round trip); each kernel row
    also names the instruction of the user's file it outputs, with its computation."""
    e = next(corpus.load("llama3-tiny-decode-f32"))
    f = tmp_path / "decode.hlo"
    f.write_text(e.text("before_optimizations"))
    r = run_hlo("profile", f, "--reps", "2", "--json")
    assert r.returncode == 0, r.stderr[-2000:]
    kernels = json.loads(r.stdout)["kernels"]
    user = parse(f.read_text())
    named = [k["as_written"] for k in kernels if k["as_written"]]
    assert len(named) >= 0.8 * len(kernels) > 0
    assert sum(k["as_written"]["name"] != k["name"] for k in kernels if k["as_written"]) > 0  # XLA's names are not the file's
    for w in named:
        assert user.get_computation(w["computation"]).get_instruction(w["name"]) is not None, w
