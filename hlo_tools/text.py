"""Text helpers shared by the parser, the typed attribute views and the checks."""

from __future__ import annotations

import re

from .errors import IrError


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


def value_pattern(depth: int) -> str:
    """A regex for an attribute value whose braces nest at most ``depth`` deep:
    plain characters, strings, and bracketed groups (no top-level spaces).
    Possessive quantifiers keep it linear on long metadata strings."""
    string = r'"(?:[^"\\\n]++|\\.)*+"'
    braced = r"\{(?:[^{}\"\n]++|" + string + r")*+\}"
    for _ in range(depth - 1):
        braced = r"\{(?:[^{}\"\n]++|" + string + "|" + braced + r")*+\}"
    return r"(?:[^,{}()\[\]\"\s]++|" + string + "|" + braced + r"|\[[^\[\]{}\"\n]*+\]|\([^(){}\"\n]*+\))++"


# One attribute `, key=value` in the forms XLA prints (JSON backend configs nest
# a few levels); anything else goes through the scanner's token loop
# (``scanner.split_attributes``).
ATTRIBUTE = re.compile(r",[ \t]*([A-Za-z_][\w\-]*)[ \t]*=[ \t]*(" + value_pattern(4) + ")")


def split_raw_attributes(raw: str) -> dict[str, str | None]:
    """The attribute dict of a raw tail the scanner already validated (the IR
    keeps a tail raw until a pass reads an attribute)."""
    out: dict[str, str | None] = {}
    for m in ATTRIBUTE.finditer(raw):
        key = m.group(1)
        if key in out:
            raise IrError(f"attribute '{key}' is given twice in {raw[:80]!r}")
        out[key] = m.group(2)
    return out
