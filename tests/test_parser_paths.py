"""The parser's two paths: the compiled core (hlo_tools/_scan.pyx, built by the
package's own build when a C compiler is there) and the pure-Python scanner and
builder it stands in for.  Both must give the same records, the same modules
(printed byte for byte, every slot of every instruction) and the same errors,
on the corpus, XLA's conformance set and XLA's test tree.

Which path ``parse`` takes here is printed in pytest's header (conftest.py) and
by ``test_which_path_runs``; without a compiled core the comparisons skip and
say so, and the rest of the suite runs on the pure-Python path."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import hlo_tools
from hlo_tools import scanner
from hlo_tools.errors import HloParseError
from hlo_tools.parser import parse_records
from hlo_tools.records import InstrRecord
from tests.conftest import CONFORMANCE, ROOT, accepted_modules, corpus_stage_texts, rejected_modules

needs_core = pytest.mark.skipif(scanner.COMPILED is None, reason="no compiled core in this install (no C compiler when "
                                "it was built, or HLO_PARSER=python): only the pure-Python path exists to test")


def _records(rec) -> list:
    """Everything in a module record, positions included."""
    return [rec.name, rec.attrs, rec.stack_frames,
            [(c.name, c.pos, c.is_entry, c.signature, c.signature_pos, c.attrs, list(c.instrs)) for c in rec.computations]]


def _outcome(text: str, source: str, compiled: bool) -> tuple[str, str]:
    try:
        return "module", hlo_tools.parse(text, source, compiled=compiled).to_text()
    except HloParseError as e:
        return "error", str(e)


def _assert_same(text: str, source: str) -> None:
    python, compiled = _outcome(text, source, False), _outcome(text, source, True)
    assert python == compiled, f"{source}: the two paths disagree ({python[0]} / {compiled[0]})"
    if python[0] == "module":
        assert _records(parse_records(text, source, compiled=False)) == _records(parse_records(text, source, compiled=True)), \
            f"{source}: the compiled scanner's records differ"


def test_which_path_runs():
    """Says which path this install parses with; where a compiled core was built
    (a C compiler at install time), it must be the one ``parse`` takes."""
    built = sorted(Path(hlo_tools.__file__).parent.glob("_scan*.so")) + sorted(Path(hlo_tools.__file__).parent.glob("_scan*.pyd"))
    print(f"\nhlo_tools parser path: {scanner.PARSER_PATH} (compiled core built: {[p.name for p in built] or 'no'})")
    if built and os.environ.get("HLO_PARSER", "").lower() != "python":
        assert scanner.PARSER_PATH == "compiled", "a compiled core is built but parse does not use it"
    else:
        assert scanner.PARSER_PATH == "python"


def test_the_pure_python_path_is_chosen_by_environment(tmp_path):
    """``HLO_PARSER=python`` (and a machine without a C compiler) parse with the
    pure-Python path, to the same module."""
    code = ("import sys, hlo_tools; from hlo_tools import scanner; "
            "m = hlo_tools.load(sys.argv[1]); print(scanner.PARSER_PATH, m.instruction_count)")
    sample = next(iter(corpus_stage_texts()))
    tmp = tmp_path / "module.hlo"
    tmp.write_text(sample[1])
    out = subprocess.run([sys.executable, "-c", code, str(tmp)], capture_output=True, text=True, cwd=ROOT,
                         env={**os.environ, "HLO_PARSER": "python"}, timeout=120)
    assert out.returncode == 0, out.stderr
    path_name, count = out.stdout.split()
    assert path_name == "python"
    assert int(count) == hlo_tools.parse(sample[1]).instruction_count


@needs_core
def test_corpus_modules_parse_the_same_on_both_paths():
    """Every stage of the small corpus modules and the three largest stages of the
    full-size ones (16-20 MB: the modules bench/parse_speed.py times)."""
    texts = corpus_stage_texts()
    small = [(label, text) for label, text in texts if len(text) < 3_000_000]
    largest = sorted((t for t in texts if len(t[1]) >= 3_000_000), key=lambda t: -len(t[1]))[:3]
    assert len(small) > 40 and len(largest) == 3
    for label, text in small + largest:
        _assert_same(text, label)


@needs_core
def test_conformance_modules_parse_the_same_on_both_paths(conformance_dir):
    accepted, rejected = accepted_modules(), rejected_modules()
    assert accepted and rejected
    for path in accepted:
        _assert_same(path.read_text(), str(path))
    for path, _ in rejected:
        _assert_same(path.read_text(errors="replace"), str(path))


def _xla_test_tree() -> list[dict]:
    path = CONFORMANCE / "xla_tests.jsonl.gz"
    if not path.exists():
        return []
    with gzip.open(path, "rt") as f:
        return [json.loads(line) for line in f]


@needs_core
@pytest.mark.skipif(not _xla_test_tree(), reason="xla_tests.jsonl.gz not present")
def test_xla_test_tree_parses_the_same_on_both_paths():
    """All 4,825 modules of XLA's test tree, those XLA rejects included (same error,
    same line and column)."""
    records = _xla_test_tree()
    errors = 0
    for r in records:
        source = f"{r['source']}:{r['line']}"
        _assert_same(r["text"], source)
        errors += _outcome(r["text"], source, True)[0] == "error"
    assert len(records) > 4800 and errors > 200


@needs_core
def test_every_slot_of_every_instruction_is_the_same():
    """The compiled builder fills Instruction's slots itself: each one, on every
    instruction of a train step (fusions, while loops, constants, tuples)."""
    label, text = next((label, text) for label, text in corpus_stage_texts() if label.endswith("tiny-train-f32:cpu_after_optimizations"))
    a, b = hlo_tools.parse(text, compiled=False), hlo_tools.parse(text, compiled=True)
    slots = [s for s in hlo_tools.Instruction.__slots__ if s != "__weakref__"]

    def plain(v):
        if isinstance(v, hlo_tools.Instruction):
            return ("instr", v.name)
        if isinstance(v, hlo_tools.Computation):
            return ("comp", v.name)
        if isinstance(v, dict):
            return {plain(k): plain(x) for k, x in v.items()}
        if isinstance(v, tuple):
            return tuple(plain(x) for x in v)
        return v

    checked = 0
    for ca, cb in zip(a.computations, b.computations, strict=True):
        assert ca.name == cb.name and ca.root.name == cb.root.name and ca.instruction_count == cb.instruction_count
        for ia, ib in zip(ca.instructions, cb.instructions, strict=True):
            for s in slots:
                assert plain(getattr(ia, s)) == plain(getattr(ib, s)), f"%{ia.name}.{s}"
            checked += 1
    assert checked > 500


@needs_core
def test_the_line_matcher_is_the_scanner_regex():
    """``_scan.match_line`` against ``scanner._LINE.fullmatch``: every line of a
    corpus module, and lines built to hit each corner of the regex."""
    core = scanner.COMPILED
    lines = next(text for label, text in corpus_stage_texts() if label.endswith("tiny-train-f32:gpu_h100_after_optimizations")).split("\n")
    lines += [
        "  ROOT = f32[] constant(0)", "  ROOT  x = f32[] negate(y)", "ROOT%x=f32[]negate(y)", "  x = f32[2]{0 negate(y)",
        "  x = (f32[], (s32[], (u8[], (pred[])))) tuple(a, b)", "  x = (f32[], (s32[], (u8[], (pred[], (f16[]))))) tuple(a)",
        "  x = b(f32[2]{0}) custom-call(y)", "  x = f32[] add(y, z), metadata={op_name=\"a, b=c\" source_line=3}",
        "  x = f32[] add(y, z), backend_config={\"a\":{\"b\":{\"c\":{\"d\":1}}}}",
        "  x = f32[] add(y, z), backend_config={\"a\":{\"b\":{\"c\":{\"d\":{\"e\":1}}}}}",
        "  x = f32[] add(y, z), a=\"unterminated", "  x = f32[] add(y, z), a=\"esc\\\"aped\"", "  x = f32[] add(y, z),  a=1",
        "  x = f32[] add(y, z), a=[1,(2)], b=(3,[4])", "  x = f32[] add(y, z), a={}, b=\x1f", "  x = f32[] add(y, (z))",
        "  x = f32[] add(y, z), a=1 \r", "  x = f32[] add(y, z), a=1, a=2", "  x.1-2 = s32[<=4,?] iota(), iota_dimension=0",
        "\tx\t=\tf32[]\tnegate(y)", "  %x = f32[] negate(%y), sharding={devices=[2,1]<=[2]}",
    ]
    text = "\n".join(lines)
    off = 0
    for line in lines:
        m = scanner._LINE.fullmatch(text, off, off + len(line))
        got = core.match_line(text, off, off + len(line))
        if m is None:
            assert got is None, repr(line)
        else:
            groups, starts = got
            assert groups == (m.group(1) is not None, *m.group(2, 3, 4, 5, 6)), repr(line)
            assert starts == (m.start(2), m.start(3), m.start(4), m.start(5), m.start(6)), repr(line)
        off += len(line) + 1


@needs_core
def test_instruction_slots_are_checked_by_the_core():
    """A slot added to Instruction and not to the compiled builder stops it with a
    message naming the slot (the compiled path never leaves a slot unset)."""
    with pytest.raises(ValueError, match="slots changed"):
        scanner.COMPILED.slot_offsets(type("Fake", (), {"__slots__": ("_name", "extra")}))
    assert len(scanner.COMPILED.slot_offsets(hlo_tools.Instruction)) == len(hlo_tools.Instruction.__slots__) - 1  # __weakref__


@needs_core
def test_records_of_a_body_are_instr_records():
    text = "HloModule m\n\nENTRY e {\n  p = f32[2]{0} parameter(0)\n  ROOT n = f32[2]{0} negate(p), metadata={op_name=\"n\"}\n}\n"
    out: list = []
    n, off = scanner.COMPILED.scan_body(text, text.index("  p"), out, InstrRecord)
    assert n == 2 and text[off:] == "}\n"
    assert all(type(r) is InstrRecord for r in out)
    assert out[1].is_root and out[1].name == "n" and out[1].attrs == ', metadata={op_name="n"}'
    assert out[1].operand_pos == text.index("p), metadata")
