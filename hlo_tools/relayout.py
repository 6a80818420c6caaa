"""A second reading for modules laid out freely.

XLA's lexer takes a newline as any other space, so XLA reads modules written on
one line, statements split over lines, two instructions on one line, a
computation's ``}`` right after its last instruction, and ``//`` comments after
a value.  The grammar reads statements one a line, as XLA prints them.  When it
rejects a module, ``relayout`` rewrites the module's whitespace into that shape
and the grammar tries once more: a newline inside a statement becomes a space,
the space before a statement becomes a newline, a ``//`` comment becomes spaces.
No other character changes and nothing moves, so every offset the parser reports
still points into the original text.  Other newlines stay: inside attribute
braces (values such as ``backend_config`` are kept verbatim), and wherever a
statement could end, so that the grammar, whose attribute values end at a
newline, never reads two lines as one value where XLA would not.
"""

from __future__ import annotations

import re

_TOKEN = re.compile(
    r"(?P<ws>[ \t\r\n]+)"
    r"|(?P<line_comment>//[^\n]*)"
    r"|(?P<block_comment>/\*.*?\*/)"
    r'|(?P<string>"(?:[^"\\]|\\.)*")'
    r"|(?P<punct><=|[{}()\[\],=:])"
    r"|(?P<word>(?:[^ \t\r\n{}()\[\],=:\"/<]|/(?![/*])|<(?!=))+)",
    re.S,
)
_NAME = re.compile(r"%?[A-Za-z_][\w.\-]*")
_STACK_FRAME_SECTION = re.compile(r"^[ \t]*(?:FileNames|FunctionNames|FileLocations|StackFrames)[ \t]*\r?$", re.M)
_CLOSER = {")": "(", "]": "["}


def relayout(text: str) -> str | None:
    """``text`` with one statement a line, or None where its structure is not
    clear enough to rewrite (unbalanced brackets, stack-frame tables, two
    statements with no space between them)."""
    if _STACK_FRAME_SECTION.search(text):
        return None
    toks = []
    pos, n = 0, len(text)
    while pos < n:
        m = _TOKEN.match(text, pos)
        if m is None:  # an unterminated string or comment
            return None
        toks.append((m.lastgroup, m.start(), m.end()))
        pos = m.end()
    out = list(text)
    sig = []  # the significant tokens: (start, end)
    for kind, s, e in toks:
        if kind == "line_comment":
            out[s:e] = " " * (e - s)
        elif kind not in ("ws", "block_comment"):
            sig.append((s, e))
    words = [text[s:e] for s, e in sig]
    modes = _gap_modes(words, sig)
    if modes is None:
        return None
    spaces = [(s, e) for kind, s, e in toks if kind == "ws"]
    j = 0
    for i in range(1, len(sig)):
        start, end = sig[i - 1][1], sig[i][0]
        mode = modes[i]
        if mode == "keep":
            continue
        gap = []
        while j < len(spaces) and spaces[j][0] < end:
            if spaces[j][0] >= start:
                gap.append(spaces[j])
            j += 1
        if mode == "join":
            for s, e in gap:
                for k in range(s, e):
                    if out[k] == "\n":
                        out[k] = " "
        elif not any("\n" in text[s:e] for s, e in gap):  # a boundary on one line
            if not gap:
                if words[i] == "}":
                    continue  # `...={0}}`: the grammar takes a `}` right after an instruction
                return None
            out[gap[-1][1] - 1] = "\n"
    return "".join(out)


def _gap_modes(words: list[str], sig: list[tuple[int, int]]) -> list[str] | None:
    """For each token, what the whitespace before it becomes: "boundary" (a
    statement starts or a body ends there: a newline), "join" (inside a
    statement: spaces) or "keep" (inside attribute braces)."""
    stack = ["module"]
    modes = ["keep"] * len(words)
    count = len(words)
    for i, t in enumerate(words):
        top = stack[-1]
        prev = words[i - 1] if i else None
        modes[i] = "join" if top in ("(", "[") else "keep"
        if top in ("module", "body"):
            if t == "}" and top == "body":
                modes[i] = "boundary"
                stack.pop()
                continue
            if _starts_statement(words, i, top):
                modes[i] = "boundary"
            elif t in (",", "->") or prev == "->" or (top == "module" and t == "("):
                # a statement that goes on: `\n  , window=...`, a header's `\n -> f32[]`
                modes[i] = "join"
            if t == "{":
                glued_layout = prev == "]" and sig[i - 1][1] == sig[i][0]
                if top == "module" and prev != "=" and not glued_layout:
                    modes[i] = "join"  # `comp\n{`: the body opens on the header's line
                    stack.append("body")
                else:
                    stack.append("body" if _inline_body(words, i) else "{")
                continue
        if t in ("(", "["):
            stack.append(t)
        elif t == "{":
            stack.append("body" if _inline_body(words, i) else "{")
        elif t in (")", "]"):
            if stack[-1] != _CLOSER[t]:
                return None
            stack.pop()
        elif t == "}":
            if stack[-1] != "{":
                return None
            stack.pop()
    if stack != ["module"] or count == 0:
        return None
    return modes


def _starts_statement(words: list[str], i: int, level: str) -> bool:
    t = words[i]
    prev = words[i - 1] if i else None
    nxt = words[i + 1] if i + 1 < len(words) else None
    if level == "body":
        return t == "ROOT" or (nxt == "=" and prev not in (",", "ROOT") and _NAME.fullmatch(t) is not None)
    if t in ("ENTRY", "HloModule"):
        return True
    return (
        prev is not None
        and prev not in (",", "=", ":", "ENTRY", "HloModule", "->")
        and nxt != "="
        and _NAME.fullmatch(t) is not None
    )


def _inline_body(words: list[str], i: int) -> bool:
    """``to_apply={ p = f32[] parameter(0) ... }``: a computation written as an
    attribute value (its first statement follows the brace)."""
    if i == 0 or words[i - 1] != "=":
        return False
    k = i + 1
    if k < len(words) and words[k] == "ROOT":
        k += 1
    if k + 2 >= len(words) or not _NAME.fullmatch(words[k]) or words[k + 1] != "=":
        return False
    after = words[k + 2]
    return after == "(" or (_NAME.fullmatch(after) is not None and k + 3 < len(words) and words[k + 3] in ("[", "("))
