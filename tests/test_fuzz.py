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


def test_mutants_in_child_processes_raise_only_located_errors(tmp_path):
    """Every strategy of tests/fuzz.py (truncation, token swaps, unicode and
    superscript digits, huge numbers, deep nesting, NaN/inf constants,
    duplicated attributes, call cycles, comments, ...) on real modules, each
    mutant parsed, verified and printed in a child process with a time and a
    memory limit: no other exception, no hang, no dead child, every error
    located inside the text.  bench/fuzz_campaign.py runs the long version."""
    from collections import Counter

    from tests.fuzz import FAILURES, STRATEGIES, Campaign

    seeds = [(p.name, p.read_text()) for p in accepted_modules()[::6]]
    seeds += [(label, text[:30000]) for label, text in sorted(corpus_stage_texts(), key=lambda s: len(s[1]))[:3]]
    campaign = Campaign(seeds, seed=23, timeout=20.0, mem_mb=2048)
    counts = campaign.run(40 * len(STRATEGIES))
    print("\nfuzz counts:", dict(counts))
    print("by strategy:", dict(Counter((r.strategy, r.cls) for r in campaign.results)))
    failed = campaign.failures()
    for i, r in enumerate(failed[:20]):
        (tmp_path / f"{i}_{r.strategy}.hlo").write_text(r.text, encoding="utf-8", errors="surrogatepass")
    assert not failed, f"{len(failed)} failures (mutants in {tmp_path}):\n" + "\n".join(
        f"{r.strategy} on {r.seed}: {r.cls}: {r.detail}" for r in failed[:20])
    assert set(FAILURES).isdisjoint(counts) and sum(counts.values()) >= 38 * len(STRATEGIES)
    assert counts["parse_error"] and counts["verify_error"] and counts["ok"]
