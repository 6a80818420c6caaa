"""Issue 39, hostile input second round: convolutions XLA's parser refuses (our
verdict is XLA's), and 10,000-deep chains of calls and of nested fusions that
every command gets through without a RecursionError, a traceback or a hang."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

import hlo_tools
from tests.conftest import SHARED
from tests.fuzz import chain_module
from hlo_tools import VerificationError

ROOT = Path(__file__).resolve().parent.parent

# ../shared/repro/hostile2/convolution_*.hlo, verbatim.
# name -> (text, XLA's message (None: XLA accepts), XLA's "was parsing L:C" line)
CONVOLUTIONS = {
    "convolution_no_window.hlo": (
        "HloModule conv\n\nENTRY main {\n  a = f32[4,8] parameter(0)\n  b = f32[4,8] parameter(1)\n"
        "  ROOT c = f32[4,8] convolution(a, b)\n}\n",
        "attribute dim_labels is expected but not seen", 7),
    "convolution_one_operand.hlo": (
        "HloModule conv1\n\nENTRY main {\n  a = f32[4,8] parameter(0)\n"
        "  ROOT c = f32[4,8] convolution(a), dim_labels=bf_io->bf\n}\n",
        "expects at least 2 operands", 6),
    "convolution_one_operand_b.hlo": (
        "HloModule conv1\n\nENTRY main {\n  a = f32[4,8] parameter(0)\n  ROOT c = f32[4,8] convolution(a)\n}\n",
        "attribute dim_labels is expected but not seen", 6),
    # neighbours, to pin the rule down from both sides
    "convolution_no_operands.hlo": (
        "HloModule conv0\n\nENTRY main {\n  ROOT c = f32[4,3] convolution(), dim_labels=bf_io->bf\n}\n",
        "expects at least 2 operands", 5),
    "convolution_two_operands_no_window.hlo": (
        "HloModule conv2\n\nENTRY main {\n  a = f32[4,8] parameter(0)\n  b = f32[8,3] parameter(1)\n"
        "  ROOT c = f32[4,3] convolution(a, b), dim_labels=bf_io->bf\n}\n",
        None, None),
}

# what our verifier says for each one XLA rejects
OUR_WORDS = {
    "expects at least 2 operands": "%c (convolution): takes at least 2 operands",
    "attribute dim_labels is expected but not seen": "%c (convolution): needs attribute dim_labels=",
}


def _xla_verdict(text: str) -> tuple[str, int] | None:
    """None when XLA's parser takes the text, else (its message, its line)."""
    from xla_bridge import jax_internals  # slow to import: only these tests need it

    try:
        jax_internals._xc().hlo.hlo_module_from_text(text)
    except Exception as e:  # noqa: BLE001 - XlaRuntimeError / ValueError by jaxlib version
        m = re.search(r"was parsing (\d+):(\d+): error: (.*)", str(e))
        assert m, str(e)
        return m.group(3).strip(), int(m.group(1))
    return None


@pytest.mark.parametrize("name", sorted(CONVOLUTIONS))
def test_convolution_verdict_is_xlas(name):
    text, xla_words, xla_line = CONVOLUTIONS[name]
    verdict = _xla_verdict(text)
    if xla_words is None:
        assert verdict is None, verdict
        hlo_tools.verify(hlo_tools.parse(text, source=name))
        return
    assert verdict is not None and xla_words in verdict[0] and verdict[1] == xla_line, verdict
    with pytest.raises(VerificationError) as info:
        hlo_tools.verify(hlo_tools.parse(text, source=name))
    e = info.value
    assert OUR_WORDS[xla_words] in str(e), str(e)
    # XLA reports where its lexer stands after the instruction: the token after
    # `ROOT c = ...` (here the closing brace).  We name that instruction, which ends
    # on the line just before the one XLA gives.
    lines = text.split("\n")
    ours = next(i + 1 for i, line in enumerate(lines) if line.lstrip().startswith(("ROOT c =", "c =")))
    assert e.instruction_name == "c" and ">>ROOT %c" in e.context
    assert xla_line == ours + 1 and lines[xla_line - 1].strip() == "}", (xla_line, ours)


def test_hlo_check_on_the_one_operand_convolution_is_one_located_error(tmp_path):
    """What the issue saw: `hlo check` said ok; now it names the instruction."""
    f = tmp_path / "convolution_one_operand.hlo"
    f.write_text(CONVOLUTIONS["convolution_one_operand.hlo"][0])
    r = subprocess.run([sys.executable, "-m", "hlo_lab.cli", "check", str(f)], capture_output=True, text=True,
                       timeout=120, cwd=ROOT)
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr[-2000:]
    assert "%c (convolution): takes at least 2 operands (lhs, rhs), has 1" in r.stdout + r.stderr


# -- 10,000-deep chains -----------------------------------------------------------------

DEPTH = 10_000


@pytest.fixture(scope="module")
def chains(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("deep")
    paths = {}
    for kind in ("call", "fusion"):
        paths[kind] = d / f"{kind}_chain_{DEPTH}.hlo"
        paths[kind].write_text(chain_module(kind, DEPTH, callers_first=kind == "call"))  # both orders
    return paths


def test_chain_generator_is_valid_and_matches_the_reproducer_shape():
    for kind in ("call", "fusion"):
        m = hlo_tools.parse(chain_module(kind, 50))
        hlo_tools.verify(m)
        assert len(m.computations) == 51
    for kind in ("call", "fusion"):
        repro = SHARED / "repro" / "hostile2" / f"{kind}_chain_1000.hlo"
        if repro.exists():
            assert chain_module(kind, 1000) == repro.read_text()


COMMANDS = {
    "check": lambda f, d: ["check", str(f)],
    "stats": lambda f, d: ["stats", str(f)],
    "opt-best": lambda f, d: ["opt", "--passes", "best", str(f), "-o", str(d / "opt.hlo")],
    "viz": lambda f, d: ["viz", "-q", "-o", str(d / "g.svg"), str(f)],
    "analyze": lambda f, d: ["analyze", str(f)],
    "fmt": lambda f, d: ["fmt", str(f), "-o", str(d / "fmt.hlo")],
    "diff": lambda f, d: ["diff", str(f), str(f)],
    "collectives": lambda f, d: ["collectives", str(f)],  # its inventory walk and memory profile recursed
    "scan": lambda f, d: ["scan", str(f), "-o", str(d / "scan"), "-q"],
    "divergence": lambda f, d: ["divergence", "-q", str(f), str(f)],  # module copies recursed per call level
    # passes beyond `best` that walked the chain level by level
    "opt-memory-scheduler": lambda f, d: ["opt", "--passes", "memory-scheduler", str(f), "-o", str(d / "opt.hlo")],
    "opt-latency-hiding-scheduler": lambda f, d: ["opt", "--passes", "latency-hiding-scheduler", str(f), "-o", str(d / "opt.hlo")],
    "opt-inline-fusions": lambda f, d: ["opt", "--passes", "inline-fusions", str(f), "-o", str(d / "opt.hlo")],
}


#: the issue asks for under 30 s; the test machine is shared and slow, so allow twice that
LIMIT_S = 60


@pytest.mark.parametrize(("kind", "command"), [
    (kind, command) for kind in ("call", "fusion") for command in sorted(COMMANDS)])
def test_deep_chain_command_finishes_cleanly(chains, tmp_path, kind, command):
    args = COMMANDS[command](chains[kind], tmp_path)
    start = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "hlo_lab.cli", *args], capture_output=True, text=True,
                       timeout=LIMIT_S + 30, cwd=ROOT)
    took = time.monotonic() - start
    both = r.stdout + r.stderr
    assert "Traceback" not in both and "RecursionError" not in both, both[-3000:]
    if r.returncode != 0:  # a refusal is fine, said in one line
        assert len(r.stderr.strip().splitlines()) == 1, r.stderr[-3000:]
    assert took < LIMIT_S, f"hlo {command} on the {DEPTH}-deep {kind} chain took {took:.1f} s"
    if command == "check":
        assert r.returncode == 0 and f"({2 * DEPTH + 2} instructions, {DEPTH + 1} computations)" in r.stdout
    if command.startswith("opt-") or command == "fmt":
        out = tmp_path / ("fmt.hlo" if command == "fmt" else "opt.hlo")
        assert r.returncode == 0 and hlo_tools.parse(out.read_text()).instruction_count >= 2
