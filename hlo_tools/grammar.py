"""The lark grammar (``hlo.lark``) and the walk from its tree to parser records.

The grammar parses everything XLA prints; it is the reference the fast scanner is
tested against, and it produces every syntax error message.
"""

from __future__ import annotations

from functools import lru_cache
from importlib import resources

import lark

from .records import CompRecord, InstrRecord, Locator, ModuleRecord
from .scanner import join_mesh_device_ids
from .relayout import relayout


@lru_cache(maxsize=None)
def _parser(start: str) -> lark.Lark:
    grammar = resources.files(__package__).joinpath("hlo.lark").read_text()
    return lark.Lark(grammar, parser="lalr", lexer="contextual", start=start, propagate_positions=True, maybe_placeholders=False)


_TOKEN_NAMES = {
    "_NL": "newline",
    "NAME": "name",
    "INT": "integer",
    "WORD": "value",
    "STRING": "string",
    "LBRACE": "'{'",
    "RBRACE": "'}'",
    "LPAR": "'('",
    "RPAR": "')'",
    "LSQB": "'['",
    "RSQB": "']'",
    "COMMA": "','",
    "EQUAL": "'='",
    "COLON": "':'",
    "ENTRY": "ENTRY",
    "ROOT": "ROOT",
    "HLOMODULE": "HloModule",
    "LAYOUT": "layout",
    "BUFFER": "buffer shape b(...)",
    "SECTION": "stack frame section",
    "$END": "end of input",
}


def _friendly(names) -> tuple[str, ...]:
    out = set()
    for n in names:
        if n.startswith("__ANON"):
            continue
        out.add(_TOKEN_NAMES.get(n, n.lower() if n.isupper() else n))
    return tuple(sorted(out))


def _error(e: lark.exceptions.LarkError, loc: Locator, offset: int):
    """Maps a lark exception to HloParseError at the right place in the whole text."""
    if isinstance(e, lark.exceptions.UnexpectedToken):
        tok = e.token
        if tok.type == "$END":
            # lark places the end token on the last real token; the input ends after it
            end = tok.end_pos if tok.end_pos is not None else tok.start_pos
            pos = (end if end is not None else len(loc.text) - offset) + offset
        else:
            pos = (tok.start_pos if tok.start_pos is not None else len(loc.text) - offset) + offset
        what = "end of input" if tok.type == "$END" else f"{tok.value[:30]!r}"
        if tok.type == "_NL":
            what = "end of line"
        return loc.error(f"unexpected {what}", pos, _friendly(e.expected))
    if isinstance(e, lark.exceptions.UnexpectedCharacters):
        pos = e.pos_in_stream + offset
        if loc.text.startswith("/*", pos):  # a comment never closed: lark sees a stray '/'
            return loc.error("unterminated /* comment", pos, ("'*/'",))
        return loc.error(f"unexpected character {e.char!r}", pos, _friendly(e.allowed or ()))
    if isinstance(e, lark.exceptions.UnexpectedEOF):
        return loc.error("unexpected end of input", len(loc.text), _friendly(e.expected))
    return loc.error(str(e).splitlines()[0], offset)


class _Walker:
    def __init__(self, text: str, offset: int):
        self.text = text
        self.offset = offset

    def span(self, node) -> str:
        if isinstance(node, lark.Token):
            return node.value
        return self.text[node.meta.start_pos : node.meta.end_pos]

    def pos(self, node) -> int:
        start = node.start_pos if isinstance(node, lark.Token) else node.meta.start_pos
        return start + self.offset

    @staticmethod
    def name(tok) -> str:
        return tok.value[1:] if tok.value.startswith("%") else tok.value

    def attribute(self, node) -> tuple[str, str, int]:
        key, value = node.children
        return key.value, self.span(value), self.pos(key)

    def instruction(self, node) -> InstrRecord:
        kids = list(node.children)
        is_root = isinstance(kids[0], lark.Token) and kids[0].type == "ROOT"
        if is_root:
            kids = kids[1:]
        if isinstance(kids[1], lark.Tree) and kids[1].data == "shape":
            name, shape, opcode, operands, *attrs = kids
            shape_text, shape_pos = self.span(shape), self.pos(shape)
        else:
            name, opcode, operands, *attrs = kids
            shape_text, shape_pos = "", self.pos(opcode)
        if operands.children:
            first, last = operands.children[0], operands.children[-1]
            operand_text = self.text[first.meta.start_pos : last.meta.end_pos]
            operand_pos = self.pos(first)
        else:
            # "()" : the text between the parentheses (whitespace only)
            inner = self.span(operands)
            operand_text, operand_pos = inner[1:-1], operands.meta.start_pos + 1 + self.offset
        return InstrRecord(
            self.pos(name),
            is_root,
            self.name(name),
            shape_text,
            shape_pos,
            opcode.value,
            self.pos(opcode),
            operand_text,
            operand_pos,
            self.attributes(attrs),
        )

    def attributes(self, nodes: list) -> list[tuple[str, str, int]]:
        """The attribute records of an instruction (``scanner.join_mesh_device_ids``
        keeps a mesh's ``device_ids`` inside its ``replica_groups`` value)."""
        recs = [self.attribute(a) for a in nodes]
        spans = [(a.children[1].meta.start_pos, a.children[1].meta.end_pos) for a in nodes]
        return join_mesh_device_ids(self.text, recs, spans)

    def computation(self, node) -> CompRecord:
        kids = list(node.children)
        is_entry = isinstance(kids[0], lark.Token) and kids[0].type == "ENTRY"
        if is_entry:
            kids = kids[1:]
        name = kids[0]
        signature, signature_pos = None, 0
        rest = kids[1:]
        if rest and isinstance(rest[0], lark.Tree) and rest[0].data == "signature":
            sig = rest.pop(0)
            signature, signature_pos = self.span(sig), self.pos(sig)
        comp = CompRecord(self.name(name), self.pos(name), is_entry, signature, signature_pos)
        for child in rest:
            if child.data == "instruction":
                comp.instrs.append(self.instruction(child))
            elif child.data == "attribute":
                comp.attrs.append(self.attribute(child))
        return comp

    def module(self, node) -> ModuleRecord:
        rest = list(node.children)
        if rest[0].data == "header":
            name, *attrs = rest.pop(0).children
            rec = ModuleRecord(self.name(name), [self.attribute(a) for a in attrs])
        else:
            rec = ModuleRecord(None)
        for child in rest:
            if child.data == "stack_frames":
                for section in child.children:
                    title, *entries = section.children
                    lines = [self.span(e) for e in entries]
                    rec.stack_frames.append((title.value, lines))
            else:
                rec.computations.append(self.computation(child))
        return rec


def parse_module_records(text: str, loc: Locator) -> ModuleRecord:
    """Parses a whole module with the grammar.  A module it rejects gets a
    second reading with one statement a line (``relayout``: XLA reads newlines
    as spaces); if that fails too, the error is the first reading's."""
    try:
        tree = _parser("start").parse(text)
    except lark.exceptions.LarkError as e:
        error = _error(e, loc, 0)
        relaid = relayout(text)
        if relaid is None or relaid == text:
            raise error from None
        try:
            tree = _parser("start").parse(relaid)
        except lark.exceptions.LarkError:
            raise error from None
        text = relaid
    return _Walker(text, 0).module(tree.children[0])


def parse_instruction_record(text: str, start: int, end: int, loc: Locator) -> InstrRecord:
    """Parses one instruction line text[start:end] with the grammar."""
    line = text[start:end]
    try:
        tree = _parser("instruction").parse(line)
    except lark.exceptions.LarkError as e:
        raise _error(e, loc, start) from None
    walker = _Walker(line, start)
    rec = walker.instruction(tree)
    return rec


def parse_inline_computation_record(value: str, start: int, loc: Locator) -> CompRecord:
    """Parses a computation written as an attribute value (``to_apply={ p = ...
    ROOT r = ... }``, found at offset ``start``) as the body of one named ``_``,
    the name XLA gives it."""
    body = "_" + value
    try:
        tree = _parser("computation").parse(body)
    except lark.exceptions.LarkError as e:
        raise _error(e, loc, start - 1) from None
    return _Walker(body, start - 1).computation(tree)
