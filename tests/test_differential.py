"""The fast scanner and the lark grammar (the specification) must produce the
same records, hence the same IR, on every module."""

from __future__ import annotations

import pytest

import hlo_tools
from hlo_tools.parser import parse_records
from tests.conftest import accepted_modules, corpus_stage_texts


def _keys(rec):
    return (
        rec.name,
        [(k, v) for k, v, _ in rec.attrs],
        rec.stack_frames,
        [
            (c.name, c.is_entry, [(k, v) for k, v, _ in c.attrs], c.signature, [r.key() for r in c.instrs])
            for c in rec.computations
        ],
    )


def _assert_same(text: str, source: str) -> None:
    fast = parse_records(text, source)
    spec = parse_records(text, source, use_scanner=False)
    assert _keys(fast) == _keys(spec), f"{source}: scanner and grammar disagree"
    assert hlo_tools.parse(text, source).to_text() == hlo_tools.parse(text, source, use_scanner=False).to_text()


@pytest.mark.parametrize("path", accepted_modules(), ids=lambda p: p.name)
def test_conformance_scanner_matches_grammar(path):
    _assert_same(path.read_text(), str(path))


def _corpus_sample():
    """Every stage of the tiny modules; for real-shape modules the smallest
    stage of each (the grammar parses ~0.3 MB/s, so all 2 MB stages would take
    minutes; bench/parse_speed.py covers the large ones with the scanner)."""
    out = []
    by_module: dict[str, list[tuple[str, str]]] = {}
    for label, text in corpus_stage_texts():
        by_module.setdefault(label.split(":")[0], []).append((label, text))
    for name, stages in by_module.items():
        if "tiny" in name or all(len(t) < 400_000 for _, t in stages):
            out.extend(stages)
        else:
            out.append(min(stages, key=lambda s: len(s[1])))
    return out


_SAMPLE = _corpus_sample()


@pytest.mark.parametrize("label, text", _SAMPLE, ids=[s[0] for s in _SAMPLE])
def test_corpus_scanner_matches_grammar(label, text):
    _assert_same(text, label)


def test_line_the_scanner_cannot_read_goes_to_the_grammar():
    # an operand that is itself an instruction (nested), and a value with a space
    text = """HloModule m
ENTRY e {
  p = f32[4] parameter(0)
  ROOT c = f32[4] custom-call(p), custom_call_target="foo", literal=s32[2]{0} {1, 2}
}
"""
    m = hlo_tools.parse(text)
    assert m.entry.root.attributes["literal"] == "s32[2]{0} {1, 2}"
    _assert_same(text, "inline")
