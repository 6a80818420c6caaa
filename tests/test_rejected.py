"""XLA's own negative cases: the 66 modules its parser rejects.  Ours rejects
them too (a located HloParseError) or the verifier does (naming the instruction)."""

from __future__ import annotations

import re

import pytest

import hlo_tools
from tests.conftest import CONFORMANCE, rejected_modules


@pytest.mark.skipif(not CONFORMANCE.exists(), reason=f"XLA's conformance modules are not at {CONFORMANCE} (set HLO_SHARED_DIR)")
def test_rejected_modules_are_rejected_with_a_location():
    mods = rejected_modules()
    assert len(mods) == 66
    missed, parse_rejects, same_line = [], 0, 0
    for path, label in mods:
        text = path.read_text()
        try:
            module = hlo_tools.parse(text, str(path))
        except hlo_tools.HloParseError as e:
            lines = text.split("\n")
            assert 1 <= e.line <= len(lines) and 1 <= e.column <= len(lines[e.line - 1]) + 1, (path.name, e.line, e.column)
            assert e.source == str(path)
            parse_rejects += 1
            m = re.search(r"was parsing (\d+):", label.get("error_detail", ""))
            same_line += bool(m and int(m.group(1)) == e.line)
            continue
        problems = hlo_tools.verify(module, raise_on_error=False)
        if not problems:
            missed.append(f"{path.name}: {label.get('error_detail', '').splitlines()[0][:120]}")
    print(f"\nrejected by our parser: {parse_rejects} (same line as XLA: {same_line}); "
          f"by our verifier: {len(mods) - parse_rejects - len(missed)}; accepted: {len(missed)}")
    print("\n".join(missed))
    # 59 of 66 when written; the misses are XLA rules not modelled yet (listed above)
    assert len(missed) <= 7, "\n".join(missed)
    assert same_line >= 0.85 * parse_rejects
