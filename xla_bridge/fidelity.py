"""Round-trip fidelity against XLA's own parser and printer: the check behind
the conformance tests and ``hlo demo``."""

from __future__ import annotations

from . import jax_internals
from hlo_tools.errors import HloParseError
from hlo_tools.parser import parse


def fidelity_problem(text: str, source: str = "<string>") -> str | None:
    """None when ``text`` round-trips, else what went wrong.

    Our parse + print must be accepted by XLA and canonicalize to XLA's
    canonical print of the original; XLA's canonical text must come back
    byte-for-byte through our parse + print.  Where XLA cannot re-read its own
    print (e.g. XLA:GPU's all-reduce-start with output_to_operand_aliasing), the
    check left is that we give XLA's print back byte-for-byte.
    """
    try:
        ours = parse(text, source=source).to_text()
    except HloParseError as e:
        return f"our parser rejects it: {e.format(caret=False)}"
    try:
        want = jax_internals.canonical_text(text)
    except HloParseError:
        return None if ours == text else "XLA cannot re-read this module, and our print differs from XLA's"
    try:
        got = jax_internals.canonical_text(ours)
    except HloParseError as e:
        return f"XLA rejects our print: {e.message}"
    if got != want:
        return "XLA's canonical print of our text differs from its print of the original"
    if parse(want, source=source + " (canonical)").to_text() != want:
        return "XLA's canonical text does not come back byte-for-byte"
    return None
