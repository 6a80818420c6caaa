"""``hlo viz`` cannot hang (issue 20): the view is bounded by edges as well as
nodes, Graphviz runs under a timeout and is killed past it and on Ctrl-C, a
timeout draws a smaller view, and the largest CPU-optimized corpus train step
draws at default options in well under a minute.

Real corpus modules and the real ``dot`` binary; nothing mocked.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import corpus
from tests.conftest import ROOT, run_hlo
from visualize import FocusOptions, select, to_dot
from visualize.render import LayoutTimeout, dot_binary, render
from hlo_lab.samples import corpus_module
from visualize.view import suggest_focus

needs_dot = pytest.mark.skipif(dot_binary() is None, reason="Graphviz's dot is not installed (apt-get install graphviz)")

#: The 4k-instruction CPU train step that sat in dot for 13 minutes before the edge budget.
HUNG = "gemma2-tiny-train-f32"
STAGE = "cpu_after_optimizations"


def largest_cpu_train_step() -> corpus.Entry:
    entries = [e for e in corpus.load() if e.workload == "train" and STAGE in e.files]
    assert entries, "no CPU-optimized train step in the corpus"
    return max(entries, key=lambda e: e.meta["instructions"][STAGE])


def write_stage(name: str, tmp_path: Path) -> Path:
    entry = next(iter(corpus.load(name)))
    path = tmp_path / f"{name}.hlo"
    path.write_text(entry.text(STAGE))
    return path


def dot_children(pid: int) -> list[int]:
    """Live ``dot`` processes whose parent is ``pid``."""
    found = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            stat = Path(f"/proc/{d}/stat").read_text()
        except OSError:
            continue
        comm, rest = stat[stat.index("(") + 1:stat.rindex(")")], stat[stat.rindex(")") + 1:].split()
        if comm == "dot" and int(rest[1]) == pid and rest[0] != "Z":
            found.append(int(d))
    return found


def test_edge_budget_bounds_the_view_and_matches_the_drawing():
    module = corpus_module(HUNG, STAGE)
    view = select(module, FocusOptions())
    assert view.node_count <= 500 and view.edge_count <= 800
    assert "within the budget of 800 edges" in view.notice  # edges, not nodes, stopped it here
    assert view.edge_count == to_dot(view).count(" -> ")  # the count is what dot will get
    wider = select(module, FocusOptions(max_nodes=1000))  # a larger --max-nodes alone widens both budgets
    assert FocusOptions(max_nodes=1000).edge_budget == 1600 and wider.edge_count > 800
    tight = select(module, FocusOptions(max_edges=100))
    assert 0 < tight.edge_count <= 100 and "within the budget of 100 edges" in tight.notice


def test_suggested_focus_is_not_drawn_and_exists():
    module = corpus_module(HUNG, STAGE)
    view = select(module, FocusOptions(max_edges=200))
    focus = suggest_focus(view)
    assert focus is not None and focus.name not in view.names and focus.parent is module.entry


@needs_dot
def test_timeout_raises_and_leaves_no_dot_running():
    module = corpus_module(HUNG, STAGE)
    source = to_dot(select(module, FocusOptions(max_nodes=5000))).replace("nslimit=2", "")  # uncapped: minutes
    t0 = time.monotonic()
    with pytest.raises(LayoutTimeout, match="did not finish within 0.5 s"):
        render(source, "svg", timeout=0.5)
    assert time.monotonic() - t0 < 10
    assert dot_children(os.getpid()) == []


@needs_dot
def test_largest_cpu_train_step_draws_at_default_options(tmp_path):
    entry = largest_cpu_train_step()
    path = write_stage(entry.name, tmp_path)
    t0 = time.monotonic()
    p = run_hlo("viz", path, "-o", tmp_path / "g.svg", timeout=300)
    took = time.monotonic() - t0
    assert p.returncode == 0, p.stderr
    assert took < 120, f"hlo viz on {entry.name} took {took:.0f} s"
    assert (tmp_path / "g.svg").read_text().count("<g id=") > 100
    assert "not shown" in p.stderr and "to see more: --around " in p.stderr and "Traceback" not in p.stderr


@needs_dot
def test_the_module_that_hung_draws_its_page(tmp_path):
    path = write_stage(HUNG, tmp_path)
    t0 = time.monotonic()
    p = run_hlo("viz", path, "-o", tmp_path / "g.html", "-q", timeout=300)
    assert p.returncode == 0, p.stderr
    assert time.monotonic() - t0 < 120
    assert "<svg" in (tmp_path / "g.html").read_text()


@needs_dot
def test_a_timeout_draws_a_smaller_view_once(tmp_path):
    path = write_stage(HUNG, tmp_path)
    # 954 edges take 3-8 s in dot here; the half-size retry, well under a second
    p = run_hlo("viz", path, "-o", tmp_path / "g.svg", "--max-nodes", "1000", "--timeout", "1.5", "-q", timeout=300)
    assert p.returncode == 0, p.stderr
    assert "did not finish within 1.5 s on 467 nodes and 954 edges (stopped); drawing a smaller view" in p.stderr
    assert "<svg" in (tmp_path / "g.svg").read_text()
    p = run_hlo("viz", path, "-o", tmp_path / "h.svg", "--timeout", "0.001", "-q", timeout=300)  # both tries time out
    assert p.returncode == 1 and not (tmp_path / "h.svg").exists()
    assert p.stderr.strip().splitlines()[-1].startswith("hlo viz: Graphviz's dot did not finish within 0.001 s")
    assert "Traceback" not in p.stderr


def test_progress_on_stderr_and_quiet_with_q(tmp_path):
    if dot_binary() is None:
        pytest.skip("Graphviz's dot is not installed")
    path = write_stage("llama3-tiny-train-f32", tmp_path)
    env = dict(os.environ, FORCE_COLOR="1")  # rich draws its live display as on a terminal
    args = [sys.executable, "-m", "hlo_lab.cli", "viz", str(path), "-o", str(tmp_path / "g.svg")]
    loud = subprocess.run(args, capture_output=True, text=True, env=env, cwd=ROOT, timeout=300)
    quiet = subprocess.run([*args, "-q"], capture_output=True, text=True, env=env, cwd=ROOT, timeout=300)
    assert loud.returncode == quiet.returncode == 0, (loud.stderr, quiet.stderr)
    assert "laying out 399 nodes, 787 edges with Graphviz" in loud.stderr
    assert "laying out" not in quiet.stderr and "note:" in quiet.stderr


#: Ctrl-C as a terminal delivers it: a suite run in the background ignores SIGINT,
#: and an ignored signal stays ignored across exec.
_AS_IN_A_TERMINAL = ("import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); "
                     "signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGINT]); os.execv(sys.argv[1], sys.argv[1:])")


@needs_dot
def test_ctrl_c_kills_dot(tmp_path):
    path = write_stage(HUNG, tmp_path)
    # a layout of minutes, SIGINT to hlo alone (not its group): hlo itself must stop dot
    p = subprocess.Popen([sys.executable, "-c", _AS_IN_A_TERMINAL, sys.executable, "-m", "hlo_lab.cli", "viz", str(path),
                          "-o", str(tmp_path / "g.svg"), "--max-nodes", "5000", "--timeout", "600", "-q"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT, start_new_session=True)
    try:
        end = time.monotonic() + 60
        while not (dots := dot_children(p.pid)) and time.monotonic() < end:
            assert p.poll() is None, p.communicate()
            time.sleep(0.1)
        assert dots, "dot never started"
        time.sleep(0.5)
        os.kill(p.pid, signal.SIGINT)
        _, err = p.communicate(timeout=20)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
    assert p.returncode == 130 and "Traceback" not in err, err
    end = time.monotonic() + 5
    while any(Path(f"/proc/{d}").exists() for d in dots) and time.monotonic() < end:
        time.sleep(0.05)
    assert not any(Path(f"/proc/{d}").exists() for d in dots), "dot outlived a Ctrl-C of hlo viz"
    assert not (tmp_path / "g.svg").exists()
