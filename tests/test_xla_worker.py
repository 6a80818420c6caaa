"""The XLA worker: XLA aborts are contained and reported in one line, the worker
is reused and restarts after an abort, XLA's own optimized dumps run, and the
small CLI fixes of issue 15.  Real XLA on the CPU, the real ``hlo`` command."""

from __future__ import annotations

import functools
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest


import corpus  # noqa: E402
from hlo_tools import HloError, HloOpcode, parse  # noqa: E402
from hlo_lab.study import CpuRow, StudyError, studies  # noqa: E402
from passes import PassManager, parse_pipeline  # noqa: E402
from xla_bridge import worker  # noqa: E402
from xla_bridge.hook_stage import HookStage  # noqa: E402
from xla_bridge.measure import AS_WRITTEN, STOCK, Measurement  # noqa: E402
from xla_bridge.errors import XlaAbortError, XlaCompileError  # noqa: E402
from xla_bridge.jax_internals import backend_available, hook_supported  # noqa: E402
from xla_bridge.compiler import Hook, compile, is_optimized  # noqa: E402
from xla_bridge.examples import FUSION_KLOOP, UNFUSED  # noqa: E402
from xla_bridge.runner import compare, run_module  # noqa: E402
from tests.conftest import run_hlo  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
hlo = functools.partial(run_hlo, timeout=180)
MODULE = "llama3-tiny-decode-f32"
#: Fusing the pre-optimization decode step in Python leaves fusion bodies without
#: layouts; XLA:CPU's emitter then CHECK-fails (shape.h: has_layout()).
ABORTING_PASSES = "producer-consumer-fusion,dce"
ONE_ABORT_LINE = r"^hlo {cmd}: XLA aborted while compiling jit_decode{label}: Check failed: .+ \(\w+\.(cc|h):\d+\)$"


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    """The decode step as jax wrote it, and after our passes (which XLA aborts on)."""
    d = tmp_path_factory.mktemp("worker")
    entry = next(e for e in corpus.load() if e.name == MODULE)
    text = entry.text("before_optimizations")
    fused = parse(text)
    PassManager(parse_pipeline(ABORTING_PASSES)).run(fused)
    out = {"dec": d / "dec.hlo", "fused": d / "dec_fused.hlo"}
    out["dec"].write_text(text)
    out["fused"].write_text(fused.to_text())
    return out


def one_line(r: subprocess.CompletedProcess) -> str:
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2, (r.returncode, r.stderr[-2000:])
    assert len(lines) == 1, r.stderr[-2000:]
    return lines[0]


# -- every route that used to end in SIGABRT -------------------------------------------


def test_bench_passes_without_hook_reports_the_abort_in_one_line(files):
    r = hlo("bench", files["dec"], "--passes", ABORTING_PASSES, "--pipeline-b", "as-written", "--reps", "2", "--warmup",
            "0", "--no-record")
    assert re.match(ONE_ABORT_LINE.format(cmd="bench", label=r" \(as-written\)"), one_line(r))


def test_compare_with_an_aborting_b_names_b(files):
    r = hlo("compare", files["dec"], files["fused"], "--pipeline-b", "as-written")
    assert re.match(ONE_ABORT_LINE.format(cmd="compare", label=r" \(as-written\)"), one_line(r))


@pytest.mark.parametrize("cmd", ["compile", "run"])
def test_compile_and_run_report_the_abort_in_one_line(files, cmd):
    r = hlo(cmd, files["fused"], "--pipeline", "as-written")
    assert re.match(ONE_ABORT_LINE.format(cmd=cmd, label=""), one_line(r))


# -- the worker: reused, restarted, named phases, the environment, its end ----------------


def _abort_while_running() -> None:
    """Stands in for XLA dying at run time (a real SIGABRT in the worker)."""
    worker.note("running", "stand_in_module")
    os.abort()


def test_worker_is_reused_and_restarts_after_an_abort(files):
    compile(UNFUSED, contained=True)
    w = worker.worker()
    pid, starts = w.pid, w.starts
    res = compile(FUSION_KLOOP, "cpu", "as-written", contained=True)
    assert w.pid == pid and w.starts == starts  # reused: no start-up paid again
    assert res.contained and not res.runnable and any(n.startswith("my_fusion") for n, _ in res.fusions())

    with pytest.raises(XlaAbortError) as info:
        compile(files["fused"].read_text(), "cpu", "as-written", contained=True)
    e = info.value
    assert isinstance(e, XlaCompileError) and isinstance(e, HloError)
    assert (e.phase, e.module) == ("compiling", "jit_decode") and e.message.startswith("Check failed: ")
    assert e.exit_status == -signal.SIGABRT and str(e).startswith("XLA aborted while compiling jit_decode: ")
    assert not w.alive

    outs = run_module(UNFUSED, contained=True)  # a fresh worker serves the next call
    assert w.alive and w.pid != pid and w.starts == starts + 1 and outs[0].shape == (32, 64)


def test_an_abort_while_running_names_the_phase():
    with pytest.raises(XlaAbortError, match=r"^XLA aborted while running stand_in_module: Fatal Python error"):
        worker.contained(_abort_while_running)
    assert compare(UNFUSED, UNFUSED, contained=True).verdict == "exact"


def test_errors_raised_in_the_worker_keep_their_type_and_fields():
    with pytest.raises(XlaCompileError) as info:
        compile("HloModule broken\n\nENTRY %e { ROOT %x = f32[] nonsense() }\n", contained=True)
    assert info.value.module_name == "broken" and info.value.stage == "parse"
    with pytest.raises(ValueError, match="not an XLA debug option"):
        compile(UNFUSED, flags=["--no_such_flag=1"], contained=True)


def test_a_closure_cannot_be_sent_and_says_what_to_do():
    with pytest.raises(worker.XlaWorkerError, match="contained=False"):
        compile(UNFUSED, hook=Hook(lambda module: False, "post-scheduler"), contained=True)


@pytest.mark.skipif(not hook_supported(), reason="the pipeline hook needs jax >= 0.12")
def test_a_hooked_benchmark_in_the_worker_brings_the_hooks_state_back():
    fuse = PassManager(parse_pipeline("producer-consumer-fusion,dce"))
    measurement = Measurement("cpu", contained=True)
    res = measurement.benchmark(UNFUSED, UNFUSED, STOCK, AS_WRITTEN.hooked(fuse, HookStage.PRE_SCHEDULER), reps=2,
                                warmup=0, input_sets=1)
    assert res.verdict in ("exact", "close")
    hook = res.hook_b
    assert hook.calls == 1 and hook.seen and hook.changed == 1
    assert any(i.opcode is HloOpcode.FUSION for i in hook.after.entry)  # the module the passes left came back


def test_the_parents_environment_reaches_the_worker(monkeypatch):
    w = worker.worker()
    worker.contained(os.getpid)
    starts = w.starts
    monkeypatch.setenv("HLO_WORKER_PROBE", "42")
    assert worker.contained(os.getenv, ("HLO_WORKER_PROBE",)) == "42"
    assert w.starts == starts + 1  # XLA reads its environment once: a change restarts the worker
    assert worker.contained(os.getenv, ("JAX_PLATFORMS",)) == os.environ.get("JAX_PLATFORMS")


_PARENT = """
import sys, time
from xla_bridge import worker
worker.contained(sum, ([1, 2],))
print(worker.worker().pid, flush=True)
time.sleep(60)
"""


def test_the_worker_ends_with_its_parent_even_when_the_parent_is_killed():
    parent = subprocess.Popen([sys.executable, "-c", _PARENT], stdout=subprocess.PIPE, text=True, cwd=ROOT,
                              env=dict(os.environ, PYTHONPATH=str(ROOT)))
    try:
        pid = int(parent.stdout.readline())
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.1)
        else:
            os.kill(pid, signal.SIGKILL)
            pytest.fail("the worker outlived its parent")
    finally:
        if parent.poll() is None:
            parent.kill()


def test_a_study_loop_keeps_the_other_modules_rows(files):
    rows = studies([("aborts", files["fused"].read_text()), ("unfused", UNFUSED)], "producer-consumer-fusion,dce",
                   reps=2, warmup=0)
    assert isinstance(rows[0], StudyError) and rows[0].error.startswith("XLA aborted while compiling")
    assert isinstance(rows[1], CpuRow) and rows[1].outputs in ("exact", "close")


# -- XLA's own optimized modules run ----------------------------------------------------------


def test_a_real_dumps_optimized_modules_compile_and_run(tmp_path):
    d = tmp_path / "dump"
    subprocess.run([sys.executable, str(ROOT / "tests" / "dump_model.py"), str(d)], check=True, capture_output=True,
                   env=dict(os.environ, PYTHONPATH=str(ROOT)), timeout=300)
    after = sorted(d.glob("*.jit_train_step.cpu_after_optimizations.txt"))
    assert after and is_optimized(after[0].read_text())
    r = hlo("run", after[0])
    assert r.returncode == 0 and r.stdout.startswith("output 0: "), r.stderr[-2000:]
    before = Path(str(after[0]).replace("cpu_after_optimizations", "before_optimizations"))
    r = hlo("compare", before, after[0])
    assert r.returncode == 0 and ": exact" in r.stdout.splitlines()[0], r.stdout + r.stderr[-2000:]


def test_the_stock_optimized_module_runs_as_written(tmp_path):
    """What ``hlo compile M --dump-optimized OPT`` writes compares equal with M (it
    was an abort with --pipeline-b as-written)."""
    entry = next(e for e in corpus.load() if e.name == "gemma2-tiny-decode-f32")
    (tmp_path / "m.hlo").write_text(entry.text("before_optimizations"))
    assert hlo("compile", tmp_path / "m.hlo", "--dump-optimized", tmp_path / "opt.hlo").returncode == 0
    r = hlo("compare", tmp_path / "m.hlo", tmp_path / "opt.hlo", "--pipeline-b", "as-written")
    assert r.returncode == 0 and ": exact" in r.stdout.splitlines()[0], r.stdout + r.stderr[-2000:]


# -- the small ones ----------------------------------------------------------------------------


def test_an_unknown_hook_pass_fails_before_any_compile(files):
    t0 = time.perf_counter()
    r = hlo("bench", files["dec"], "--passes", "producer-consumer-fusion,no-such-pass", "--hook", "pre-scheduler")
    line = one_line(r)
    assert line.startswith("hlo bench: unknown pass 'no-such-pass'; available: ") and "dce" in line
    assert time.perf_counter() - t0 < 30  # no XLA compile happened (they take seconds here)


def test_bench_help_points_to_a_command_that_exists():
    out = hlo("bench", "--help").stdout
    assert "hlo passes" not in out and "hlo opt --list" in out
    listed = hlo("opt", "--list").stdout.split()
    assert listed[:3] == ["broadcast-of-reshape", "cache-update-in-place", "call-inliner"]


@pytest.mark.skipif(backend_available("gpu"), reason="a GPU is present")
@pytest.mark.parametrize("cmd", ["run", "bench"])
def test_gpu_without_a_gpu_says_so_before_compiling(files, cmd):
    line = one_line(hlo(cmd, files["dec"], "--backend", "gpu", *(["--no-record"] if cmd == "bench" else [])))
    assert line == (f"hlo {cmd}: no GPU here (jax sees no gpu device), so nothing can run on it; compiling for one "
                    "works without it: hlo compile --backend gpu --target h100")


@pytest.mark.parametrize("flag, says", [("--no_such_flag=1", "not an XLA debug option: '--no_such_flag=1'"),
                                        ("--xla_no_such_flag=1", "No such compile option: 'xla_no_such_flag'")])
def test_a_bad_xla_flag_is_one_line(files, flag, says):
    line = one_line(hlo("compile", files["dec"], f"--xla-flag={flag}"))
    assert line.startswith("hlo compile: ") and says in line


_STACK_FRAMES = """HloModule sf

ENTRY main {
  p = f32[4] parameter(0)
  n = f32[4] negate(p), metadata={op_name="jit(f)/neg" stack_frame_id=7}
  ROOT e = f32[4] exponential(n), metadata={op_name="jit(f)/exp" stack_frame_id=9}
}
"""


def test_xla_stack_frame_warnings_are_said_once(tmp_path):
    """Metadata naming stack frames the module's table lacks (a third-party train
    step's after_optimizations dump): XLA warns once per instruction and per
    parse; the command says so in one counted note instead of dozens of lines."""
    from tests.conftest import run_hlo

    path = tmp_path / "sf.hlo"
    path.write_text(_STACK_FRAMES)
    done = run_hlo("bench", path, "--passes", "best", "--reps", "2", "--no-record")
    assert done.returncode == 0, done.stderr
    assert "Invalid stack_frame_id" not in "".join(ln for ln in done.stderr.splitlines() if not ln.startswith("note:"))
    assert re.search(r"note: XLA warned \d+ times 'Invalid stack_frame_id'", done.stderr), done.stderr
