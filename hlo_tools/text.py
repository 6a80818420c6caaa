"""Text helpers shared by the parser, the typed attribute views and the checks."""

from __future__ import annotations


def split_top_level(text: str) -> list[tuple[str, int]]:
    """Splits at commas outside brackets and strings; returns (piece, offset)."""
    out, depth, start, in_str, i, n = [], 0, 0, False, 0, len(text)
    while i < n:
        c = text[i]
        if in_str:
            if c == "\\":
                i += 1
            elif c == '"':
                in_str = False
        elif c == '"':
            in_str = True
        elif c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif c == "," and depth == 0:
            out.append((text[start:i], start))
            start = i + 1
        i += 1
    out.append((text[start:], start))
    return out
