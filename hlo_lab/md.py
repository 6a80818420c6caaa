"""Markdown for untrusted text: file names, labels and error messages in reports.

A file name is chosen by whoever made the folder, so in ``report.md`` it must
stay text: no links, images, emphasis or HTML made out of it, no table cell or
code span it can break out of.
"""

from __future__ import annotations

import re

_PUNCT = re.compile(r"([\\`*_{}\[\]()#+\-.!|<>~&\"'=:])")
_LINE_BREAKS = re.compile(r"[\r\n\u2028\u2029\x00-\x08\x0b-\x1f\x7f]")


def md_escape(text: str) -> str:
    """Plain Markdown text showing ``text`` literally: ASCII punctuation
    backslash-escaped (CommonMark allows it before any of them), control
    characters and line breaks shown as spaces (one line, one table cell)."""
    return _PUNCT.sub(r"\\\1", _LINE_BREAKS.sub(" ", str(text)))


def _longest_backtick_run(text: str) -> int:
    return max((len(m) for m in re.findall(r"`+", text)), default=0)


def md_code(text: str) -> str:
    """An inline code span holding ``text`` (one line): fenced by more
    backticks than any run inside it, padded so edge backticks stay content."""
    one_line = _LINE_BREAKS.sub(" ", str(text))
    fence = "`" * (_longest_backtick_run(one_line) + 1)
    pad = " " if one_line.startswith("`") or one_line.endswith("`") or not one_line.strip() else ""
    return f"{fence}{pad}{one_line}{pad}{fence}"


def md_block(text: str) -> str:
    """A fenced code block holding ``text`` as is (many lines): the fence is
    longer than any backtick run inside, so no line of it can close the block."""
    body = re.sub(r"[\x00-\x08\x0b-\x1f\x7f]", " ", str(text).replace("\r\n", "\n")).replace("\r", "\n")
    fence = "`" * max(3, _longest_backtick_run(body) + 1)
    return f"{fence}text\n{body}\n{fence}"
