"""Robustness: mutated real module texts either parse or raise HloParseError
with a line and column inside the input; nothing else escapes, nothing hangs."""

from __future__ import annotations

import signal

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import hlo_tools
from hlo_tools import HloParseError
from tests.conftest import accepted_modules, corpus_stage_texts


def _seed_texts() -> list[str]:
    texts = [p.read_text() for p in accepted_modules()[::12]]
    small = sorted((t for _, t in corpus_stage_texts()), key=len)[:3]
    return texts + [t[:20000] for t in small]


SEEDS = _seed_texts()


def _tokens(text: str) -> list[str]:
    import re

    return re.findall(r"\s+|[A-Za-z_%][\w.\-%]*|\d+|.", text)


@st.composite
def mutated(draw) -> str:
    text = draw(st.sampled_from(SEEDS))
    kind = draw(st.sampled_from(["truncate", "delete", "swap", "bytes", "duplicate"]))
    if kind == "truncate":
        return text[: draw(st.integers(0, len(text)))]
    toks = _tokens(text)
    if kind == "bytes":
        pos = draw(st.integers(0, len(text)))
        junk = draw(st.text(min_size=1, max_size=8))
        return text[:pos] + junk + text[pos:]
    i = draw(st.integers(0, len(toks) - 1))
    j = draw(st.integers(0, len(toks) - 1))
    if kind == "delete":
        del toks[i : i + draw(st.integers(1, 4))]
    elif kind == "swap":
        toks[i], toks[j] = toks[j], toks[i]
    else:
        toks.insert(j, toks[i])
    return "".join(toks)


class _Timeout(Exception):
    pass


def _alarm(signum, frame):
    raise _Timeout()


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated())
def test_only_located_parse_errors_escape(text):
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(10)  # a hang is a failure
    try:
        module = hlo_tools.parse(text, source="fuzz.hlo")
        module.to_text()  # whatever parses must also print
    except HloParseError as e:
        lines = text.split("\n")
        assert 1 <= e.line <= len(lines), (e.line, len(lines))
        assert 1 <= e.column <= len(lines[e.line - 1]) + 1, (e.column, lines[e.line - 1][:80])
        assert e.source == "fuzz.hlo"
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
