"""Turns parser records into IR, with the semantic checks (undefined names,
duplicates, unknown computations).  One builder for both parsers means the fast
scanner and the grammar give the same IR by construction."""

from __future__ import annotations

import re

from . import grammar
from .ir import COMPUTATION_ATTRS, Computation, Instruction, Module
from .literal import LiteralError, check_literal
from .opcode import OPCODES, HloOpcode, parse_opcode
from .printer import signature_text
from .records import CompRecord, InstrRecord, Locator, ModuleRecord
from .scanner import COMPILED, Unsupported, blank_comments, computation_header, parse_signature
from .shape import INT64_MAX, MAX_TUPLE_DEPTH, PrimitiveType, Shape, ShapeError, parse_shape, parse_shape_prefix
from .shape_inference import ShapeInferenceError, infer_shape
from .text import split_raw_attributes, split_top_level

_COMMENT_RE = re.compile(r"/\*.*?\*/|//[^\n]*", re.S)
_NAME_RE = re.compile(r"\s*%?([A-Za-z_][\w.\-]*)\s*$")


def _blank_comments(text: str) -> str:
    """Replaces /*...*/ and // comments with spaces so offsets stay valid."""
    return _COMMENT_RE.sub(lambda m: " " * len(m.group()), text)


class Builder:
    """Builds a Module from a ModuleRecord, reporting semantic errors with positions."""

    def __init__(self, loc: Locator, *, core=COMPILED):
        self.loc = loc
        self._core = core
        # the fast path below, compiled, with what it looks up and calls back
        self._linker = None if core is None else core.Linker(
            _SHAPES, _cached_shape, _FAST_OPCODES, HloOpcode.PARAMETER, HloOpcode.CONSTANT, _LITERALS_OK, self._literal_ok,
            Instruction, COMPUTATION_ATTRS, _strip_index_comments)
        self.saw_operand_shapes = False
        self._nesting = 0  # operands written as instructions, how deep (bounded)

    def build(self, rec: ModuleRecord) -> Module:
        """A Module from a complete record (the grammar's path)."""
        for crec in rec.computations:
            self.add(rec, crec)
        return self.finish(rec)

    def add(self, rec: ModuleRecord, crec: CompRecord) -> None:
        """Builds one computation as soon as it is scanned, so the scanner's
        records never pile up for a whole module (they cost more than the IR)."""
        if not hasattr(self, "module"):
            self._start(rec)
        if crec.name in self.comps:
            raise self.loc.error(f"computation %{crec.name} is already defined", crec.pos)
        if crec.name == "ENTRY" and self.loc.text[crec.pos - 1 : crec.pos] != "%":
            raise self.loc.error("expected a computation name after ENTRY", crec.pos, ("name",))
        if crec.is_entry:
            if self.entry_name is not None:
                raise self.loc.error(f"a module has one ENTRY computation; %{self.entry_name} is already the entry", crec.pos)
            self.entry_name = crec.name
        comp = self._computation(crec, self.pending_calls, self.comps)
        self.comps[crec.name] = comp
        comp.parent = self.module
        self.module.computations.append(comp)

    def whole_computations(self, text: str, off: int, rec: ModuleRecord) -> tuple[int, int, int]:
        """``add`` for whole computations as XLA prints them, scanned and built by the
        compiled core (scanner.scan_module's ``whole_computations``; only with a core)."""
        return self._core.build_computations(text, off, rec, self, computation_header, Computation, self._linker)

    def _start(self, rec: ModuleRecord) -> None:
        module = self.module = Module(rec.name or "")
        for key, value, pos in rec.attrs:
            if key in module.attributes:
                raise self.loc.error(f"duplicate module attribute '{key}'", pos)
            if key == "entry_computation_layout":
                self._check_entry_layout(value, self.loc.text.find(value, pos))
            module.attributes[key] = value
        module.stack_frames = rec.stack_frames
        self.comps: dict[str, Computation] = {}
        self.pending_calls: list[tuple[Instruction, str, str, int]] = []
        self.resolved_calls: list[tuple[Instruction, str, str, int]] = []  # by the compiled builder, while building
        self.entry_name: str | None = None

    def _check_entry_layout(self, value: str, pos: int) -> None:
        """``{(shape, ...)->shape}``: XLA's parser reads these shapes (it checks
        them against the entry only later, when compiling), so a malformed one
        is a syntax error here too."""
        m = _CANONICAL_ENTRY_LAYOUT.fullmatch(value)
        if m is not None:  # XLA's own form, flat: each array shape checked once per distinct text
            try:
                for shape_text in _ARRAY_SHAPE_TEXT.findall(value):
                    parse_shape(shape_text)
                return
            except ShapeError:
                pass  # the walk below says where
        n, i = len(value), 0

        def skip(i: int) -> int:
            while i < n and value[i] in " \t\r\n":
                i += 1
            return i

        def expect(i: int, token: str) -> int:
            i = skip(i)
            if not value.startswith(token, i):
                raise self.loc.error(f"entry_computation_layout: expected '{token}'", pos + i, (f"'{token}'",))
            return i + len(token)

        try:
            i = expect(i, "{")
            if not value.startswith("(", skip(i)):
                raise self.loc.error("entry_computation_layout: expected '(' before the parameter shapes", pos + skip(i), ("'('",))
            _, i = parse_shape_prefix(value, i)  # the parameter list reads as a tuple of shapes
            i = expect(i, "->")
            _, i = parse_shape_prefix(value, i)
            i = expect(i, "}")
        except ShapeError as e:
            raise self.loc.error(f"entry_computation_layout: {e}", pos + e.offset) from None
        if skip(i) != n:
            raise self.loc.error("entry_computation_layout: unexpected text after '}'", pos + skip(i))

    def finish(self, rec: ModuleRecord) -> Module:
        if not hasattr(self, "module"):
            raise self.loc.error("expected at least one computation in the module", len(self.loc.text))
        module, comps = self.module, self.comps
        entry = comps[self.entry_name] if self.entry_name is not None else module.computations[-1]
        entry.is_entry = True
        module.entry = entry
        if rec.name is None:
            module.name = "module_" + entry.name  # what XLA's parser does
        for instr, key, text, pos in self.pending_calls:
            instr._called[key] = self._resolve_computations(text, pos, comps)
        self._reject_call_cycles()
        module.print_operand_shapes = self.saw_operand_shapes
        return module

    def _reject_call_cycles(self) -> None:
        """XLA's parser resolves a called computation only once it is defined,
        so a recursive call graph cannot be written; we also take callees
        defined later, so a cycle is looked for here (iteratively: a long call
        chain must not exhaust Python's stack).  Nothing downstream terminates
        on a recursive module (inlining, cost analysis, printing).  Calls that all
        go to computations defined before their caller (XLA's order; those the
        compiled builder resolved while building, ``resolved_calls``, do) need no walk."""
        order = {c: i for i, c in enumerate(self.module.computations)}
        if all(callee in order and order[callee] < order.get(instr._parent, -1)
               for instr, key, _, _ in self.pending_calls for callee in instr._called[key]):
            return
        calls: dict[Computation, list[tuple[Computation, int]]] = {}
        for instr, key, _, pos in self.pending_calls + self.resolved_calls:
            edges = calls.setdefault(instr.parent, [])
            edges.extend((callee, pos) for callee in instr._called[key])
        for edges in calls.values():
            edges.sort(key=lambda edge: edge[1])  # text order, whichever path resolved them
        state: dict[Computation, int] = {}  # 1: on the current path, 2: done
        for start in self.module.computations:
            if start in state:
                continue
            path = [start]
            stack = [iter(calls.get(start, ()))]
            state[start] = 1
            while stack:
                nxt = next(stack[-1], None)
                if nxt is None:
                    state[path.pop()] = 2
                    stack.pop()
                    continue
                callee, pos = nxt
                seen = state.get(callee)
                if seen == 1:
                    cycle = path[path.index(callee):] + [callee]
                    what = "calls itself" if len(cycle) == 2 else "is part of a call cycle"
                    chain = " -> ".join("%" + c.name for c in cycle)
                    raise self.loc.error(
                        f"computation %{callee.name} {what} ({chain}); XLA rejects recursive call graphs "
                        "(a computation can only call computations defined before it)", pos)
                if seen is None:
                    state[callee] = 1
                    path.append(callee)
                    stack.append(iter(calls.get(callee, ())))

    def _resolve_computations(self, text: str, pos: int, comps: dict[str, Computation]) -> tuple[Computation, ...]:
        if text[:1] == "%":  # `calls=%fused_computation`, as XLA prints it
            comp = comps.get(text[1:])
            if comp is not None:
                return (comp,)
        if "/" in text:  # `body=while_body  // 25`: XLA skips the comment
            text = _blank_comments(text)
        body = text.strip()
        inner_pos = pos + (len(text) - len(text.lstrip()))
        if body.startswith("{") and body.endswith("}"):
            body, inner_pos = body[1:-1], inner_pos + 1
        out = []
        for piece, off in split_top_level(body):
            if not piece.strip() and body.strip() == "":
                continue
            m = _NAME_RE.fullmatch(piece)
            if not m:
                raise self.loc.error(f"expected a computation name, got {piece.strip()!r}", inner_pos + off)
            comp = comps.get(m.group(1))
            if comp is None:
                raise self.loc.error(f"unknown computation %{m.group(1)}", inner_pos + off + piece.index(m.group(1)))
            out.append(comp)
        return tuple(out)

    def _computation(self, crec: CompRecord, pending_calls: list, comps: dict[str, Computation]) -> Computation:
        comp = Computation(crec.name, is_entry=crec.is_entry)
        self._comp, self._comps = comp, comps
        self._sugar: dict[tuple[Instruction, int], Instruction] = {}
        for key, value, pos in crec.attrs:
            if key in comp.attributes:
                raise self.loc.error(f"attribute '{key}' of computation %{crec.name} is given twice", pos)
            comp.attributes[key] = value
        names = comp._names
        root: Instruction | None = None
        pending_ctrl: list[tuple[Instruction, str, int]] = []
        loc = self.loc
        shapes_get = _SHAPES.get
        opcodes_get = _FAST_OPCODES.get
        link = comp._link
        new_instruction = Instruction._from_parser
        PARAMETER, CONSTANT = HloOpcode.PARAMETER, HloOpcode.CONSTANT
        numbers: list[int] = []
        self._numbers = numbers
        self._nested_params: dict[str, int] = {}  # name -> offset of its number
        linker, literal_ok = self._linker, self._literal_ok
        records = crec.instrs
        k, n = 0, len(records)
        while k < n:
            if linker is not None:  # the fast path below, compiled: up to the first record it leaves here
                k, root = self._core.link_fast(records, k, comp, names, numbers, root, pending_calls, linker)
                if k == n:
                    break
            r = records[k]
            k += 1
            # Fast path: the common canonical line (cached shape, plain opcode,
            # `%a, %b` operands, attributes kept raw).  Anything else, and every
            # error, takes the general path below.
            name, shape_text, opcode_text, operand_text, attrs_rec = r[2], r[3], r[5], r[7], r[9]
            shape = shapes_get(shape_text)
            opcode = opcodes_get(opcode_text)
            if shape is not None and opcode is not None and (attrs_rec.__class__ is str or not attrs_rec) and name not in names:
                operands = ()
                param_no = literal = None
                ok = True
                if opcode is PARAMETER:
                    if operand_text.isascii() and operand_text.isdigit() and len(operand_text) < 19:
                        param_no = int(operand_text)
                        numbers.append(param_no)
                    else:
                        ok = False
                elif opcode is CONSTANT:
                    literal = operand_text.strip()
                    ok = bool(literal) and literal_ok(literal, shape, shape_text)
                elif operand_text:
                    if "[" in operand_text:
                        ok = False
                    else:
                        if "/*" in operand_text:
                            operand_text = _strip_index_comments(operand_text)
                        try:
                            operands = tuple([names[o.strip().lstrip("%")] for o in operand_text.split(",")])
                        except KeyError:
                            ok = False
                if ok:
                    instr = new_instruction(name, opcode, shape, operands, attrs_rec, param_no, literal)
                    if r[1]:
                        if root is not None:
                            raise loc.error(f"computation %{crec.name} already has a ROOT (%{root.name})", r.pos)
                        root = instr
                    link(instr)
                    continue
            if r.name in names and names[r.name].tuple_sugar:
                self._rename_sugar(r.name, names)
            if r.name in names:
                raise loc.error(f"instruction %{r.name} is already defined in computation %{crec.name}", r.pos)
            shape = _SHAPES.get(r.shape_text)
            if shape is None and r.shape_text:
                try:
                    shape = _parse_and_cache_shape(r.shape_text)
                except ShapeError as e:
                    raise loc.error(str(e), r.shape_pos + e.offset) from None
            try:
                opcode, wrapped = parse_opcode(r.opcode)
            except KeyError:
                raise loc.error(f"unknown opcode '{r.opcode}'", r.opcode_pos) from None
            param_no = literal = None
            operands: tuple[Instruction, ...] = ()
            if opcode is HloOpcode.PARAMETER:
                param_no = self._parameter_number(r.operand_text, r.operand_pos)
                numbers.append(param_no)
            elif opcode is HloOpcode.CONSTANT:
                literal = r.operand_text.strip()
                if not literal:
                    raise loc.error("constant needs a literal", r.operand_pos, ("literal",))
                if shape is not None:
                    self._check_literal(r, literal, shape)
            else:
                operands = self._operands(r.operand_text, r.operand_pos, r.name, names)
            if opcode in _XLA_BUILT_SHAPES:
                shape = _xla_built_shape(opcode, shape, operands)
            raw_attrs = r.attrs
            if raw_attrs.__class__ is str:  # raw tail from the scanner, nothing to resolve
                if shape is None:
                    shape = self._infer(r, opcode, operands, split_raw_attributes(raw_attrs))
                instr = Instruction(r.name, opcode, shape, operands, None, None, param_no, literal, wrapped)
                instr._attributes = None
                instr._raw_attributes = raw_attrs
                if r.is_root:
                    if root is not None:
                        raise loc.error(f"computation %{crec.name} already has a ROOT (%{root.name})", r.pos)
                    root = instr
                comp._link(instr)
                continue
            attrs: dict[str, str | None] = {}
            called_keys = []
            for key, value, pos in r.attrs:
                if key in attrs:
                    raise loc.error(f"attribute '{key}' is given twice", pos)
                if key in COMPUTATION_ATTRS:
                    attrs[key] = None
                    if _INLINE_BODY.match(value):
                        value = self._inline_computation(value, pos)
                    called_keys.append((key, value, pos))
                elif key == "control-predecessors":
                    attrs[key] = None
                else:
                    attrs[key] = value
            if shape is None:
                shape = self._infer(r, opcode, operands, attrs, called_keys)
            instr = Instruction(r.name, opcode, shape, operands, attrs, None, param_no, literal, wrapped)
            for key, value, pos in called_keys:
                pending_calls.append((instr, key, value, pos + len(key) + 1))
            if "control-predecessors" in attrs:
                value, pos = next((v, p) for k, v, p in r.attrs if k == "control-predecessors")
                pending_ctrl.append((instr, value, pos + len("control-predecessors") + 1))
            if r.is_root:
                if root is not None:
                    raise loc.error(f"computation %{crec.name} already has a ROOT (%{root.name})", r.pos)
                root = instr
            comp._link(instr)
        for instr, value, pos in pending_ctrl:
            body = value.strip()
            if body.startswith("{"):
                body = body[1:-1]
            for piece, off in split_top_level(body):
                if not piece.strip():
                    continue
                m = _NAME_RE.fullmatch(piece)
                pred = names.get(m.group(1)) if m else None
                if pred is None:
                    raise loc.error(f"control predecessor {piece.strip()!r} is not an instruction of %{crec.name}", pos + 1 + off)
                instr._control_predecessors += (pred,)
                pred._control_successors[instr] = None
        if comp._count == 0:
            raise loc.error(f"computation %{crec.name} has no instructions", crec.pos)
        comp.root = root if root is not None else comp._tail
        self._check_signature(crec, comp)
        numbers.sort()
        if numbers and numbers[-1] != len(numbers) - 1 or len(set(numbers)) != len(numbers):
            params = [i for i in comp if i.opcode is HloOpcode.PARAMETER]
            p = max(params, key=lambda p: p.parameter_number)
            where = next((x.operand_pos for x in crec.instrs if x.name == p.name), None)
            if where is None:  # an operand written as `f32[] parameter(5)`
                where = self._nested_params.get(p.name, crec.pos)
            shown = numbers if len(numbers) <= 20 else numbers[:10] + ["..."] + numbers[-5:]
            raise loc.error(f"parameter numbers of %{crec.name} must be 0..{len(numbers) - 1} without gaps or repeats, got {shown}", where)
        return comp

    def _parameter_number(self, text: str, pos: int) -> int:
        """``parameter(N)``: N in ASCII digits within int64, as XLA reads it
        (Python's isdigit() also takes '²', and int() refuses 5,000 digits)."""
        t = text.strip()
        where = pos + len(text) - len(text.lstrip())
        if not (t.isascii() and t.isdigit()):
            raise self.loc.error(f"parameter needs a parameter number, got {t[:30]!r}", where, ("integer",))
        if len(t.lstrip("0")) > 19 or int(t) > INT64_MAX:
            shown = t if len(t) <= 24 else t[:20] + f"... ({len(t)} digits)"
            raise self.loc.error(f"parameter number {shown} is past the int64 range XLA reads", where, ("integer",))
        return int(t)

    _LITERAL_CHECK_LIMIT = 200_000  # characters; longer literals are kept unchecked

    @staticmethod
    def _literal_ok(literal: str, shape, shape_text: str) -> bool:
        """``check_literal`` passes; remembered per (literal, shape as written), which
        the compiled fast path asks first (`constant(0)` comes back thousands of times).
        Static: the core's Linker holds it, and a bound method would tie the builder
        (and every instruction it made) into a cycle that only a collection frees."""
        if len(literal) > Builder._LITERAL_CHECK_LIMIT:
            return True
        short = len(literal) <= 32
        if short and (literal, shape_text) in _LITERALS_OK:
            return True
        try:
            check_literal(literal, shape)
        except LiteralError:
            return False  # the general path reports it with its position
        if short:
            if len(_LITERALS_OK) > 4096:
                _LITERALS_OK.clear()
            _LITERALS_OK.add((literal, shape_text))
        return True

    def _check_literal(self, r: InstrRecord, literal: str, shape) -> None:
        if len(literal) > self._LITERAL_CHECK_LIMIT:
            return
        try:
            check_literal(literal, shape)
        except LiteralError as e:
            lead = len(r.operand_text) - len(r.operand_text.lstrip())
            raise self.loc.error(f"constant %{r.name}: {e}", r.operand_pos + lead + e.offset) from None

    def _check_signature(self, crec: CompRecord, comp: Computation) -> None:
        """The header's result shape must match the root (XLA checks the same).
        XLA's own header is exactly what we print: compared as text first,
        parsed only when it differs."""
        if crec.signature is None or crec.signature == signature_text(comp):
            return
        signature = blank_comments(crec.signature) if "/" in crec.signature else crec.signature  # XLA's lexer skips them
        try:
            params, result_text = parse_signature(signature, crec.signature_pos)
        except Unsupported:
            return  # older forms such as `(input f32[2])`: XLA reads past them too
        # XLA ignores what the declared parameters say (its tests declare stale
        # ones) but reads their shapes; only the result must match the root.
        for _, shape_text, off in params:
            try:
                parse_shape(shape_text)
            except ShapeError as e:
                raise self.loc.error(str(e), off + len(self.loc.text[off:off + 64]) - len(self.loc.text[off:off + 64].lstrip()) + e.offset) from None
        result_pos = crec.signature_pos + signature.rfind(result_text)
        try:
            want = parse_shape(result_text)
        except ShapeError as e:
            raise self.loc.error(str(e), result_pos + e.offset) from None
        if not want.compatible(comp.root.shape):
            raise self.loc.error(
                f"computation %{crec.name} is declared to return {result_text}, its root %{comp.root.name} is {comp.root.shape.to_text(False)}", crec.pos)

    def _infer(self, r: InstrRecord, opcode, operands, attrs, called=()):
        raw = attrs if r.attrs.__class__ is str else {k: v for k, v, _ in r.attrs}
        raw.update((k, v) for k, v, _ in called)  # inline computations, by their new names
        return self._infer_shape(r.name, r.opcode_pos, opcode, operands, attrs, raw)

    def _inline_computation(self, value: str, key_pos: int) -> str:
        """A computation written as the attribute's value (``to_apply={ p = ...
        }``): XLA adds it to the module as ``_`` (``_.1``, ...), before the
        computation that calls it.  Returns the name the attribute now holds."""
        # the value follows `key=` (the record's value text may be the relaid one)
        m = _VALUE_START.match(self.loc.text, key_pos)
        start = m.end() if m else key_pos
        depth = getattr(self, "_inline_depth", 0)
        if depth >= _MAX_INLINE_DEPTH:
            raise self.loc.error(f"computations written inside attributes nest deeper than {_MAX_INLINE_DEPTH} levels", start)
        crec = grammar.parse_inline_computation_record(value, start, self.loc)
        outer = {a: getattr(self, a) for a in _PER_COMPUTATION if hasattr(self, a)}
        self._inline_depth = depth + 1
        try:
            comp = self._computation(crec, self.pending_calls, self.comps)
        finally:
            self._inline_depth = depth
            for a, v in outer.items():
                setattr(self, a, v)
        name, k = "_", 0  # named once built, so computations nested in it come first
        while name in self.comps:
            k += 1
            name = f"_.{k}"
        comp.name = name
        self.comps[name] = comp
        comp.parent = self.module
        self.module.computations.append(comp)
        return "%" + name

    def _infer_shape(self, name, pos, opcode, operands, attrs, raw_attrs):
        if opcode is HloOpcode.WHILE and len(operands) == 1:
            return operands[0].shape  # XLA gives a loop its init's shape, layouts included
        called_key = {HloOpcode.CALL: "to_apply", HloOpcode.WHILE: "body", HloOpcode.FUSION: "calls", HloOpcode.CONDITIONAL: None}.get(opcode, "")
        if called_key != "":
            keys = [called_key] if called_key else ["true_computation", "branch_computations"]
            for key in keys:
                ref = raw_attrs.get(key)
                if ref:
                    first = ref.strip().strip("{}").split(",")[0].strip().lstrip("%")
                    callee = self._comps.get(first)
                    if callee is not None and callee.root is not None:
                        return callee.root.shape
        try:
            shape = infer_shape(opcode, [o.shape for o in operands], attrs)
        except (ShapeInferenceError, ValueError, IndexError, TypeError) as e:  # malformed attributes too
            raise self.loc.error(f"cannot infer the shape of %{name}: {e}", pos) from None
        if shape is None:
            raise self.loc.error(f"%{name} needs a result shape (XLA cannot infer the shape of {opcode.value})", pos, ("shape",))
        return shape

    def _nested(self, text: str, pos: int, shape_text: str, names: dict[str, Instruction]) -> Instruction:
        """An operand written as an instruction (``add(f32[] parameter(0), ...)``):
        XLA creates it under the name ``<opcode>.anon``."""
        m = re.match(r"\s*([a-z][a-z0-9\-]*)\(", text)
        if self._nesting >= MAX_TUPLE_DEPTH:
            raise self.loc.error(f"operands written as instructions nest deeper than {MAX_TUPLE_DEPTH} levels", pos + m.start(1))
        self._nesting += 1
        opcode_text = m.group(1)
        try:
            opcode, wrapped = parse_opcode(opcode_text)
        except KeyError:
            raise self.loc.error(f"unknown opcode '{opcode_text}'", pos + m.start(1)) from None
        inner = text[m.end() : text.rstrip().rindex(")")]
        inner_pos = pos + m.end()
        name = self._comp.unique_name(opcode_text + ".anon") if self._comp._names else opcode_text + ".anon"
        param_no = literal = None
        operands: tuple[Instruction, ...] = ()
        attrs: dict[str, str | None] = {}
        if opcode is HloOpcode.PARAMETER:
            param_no = self._parameter_number(inner, inner_pos)
            self._numbers.append(param_no)
            self._nested_params[name] = inner_pos
        elif opcode is HloOpcode.CONSTANT:
            literal = inner.strip()
            if not literal:
                raise self.loc.error("constant needs a literal", inner_pos, ("literal",))
        else:
            operands = self._operands(inner, inner_pos, name, names)
            # XLA names the nested operands first, so `add(add(..), ..)` gives
            # the inner one `add.anon` and this one `add.anon.1`.
            name = self._comp.unique_name(opcode_text + ".anon")
        if opcode is HloOpcode.BROADCAST and operands and operands[0].shape.is_scalar:
            attrs["dimensions"] = "{}"
        if shape_text:
            try:
                shape = parse_shape(shape_text)
            except ShapeError as e:
                raise self.loc.error(str(e), pos + e.offset) from None
        else:
            shape = self._infer_shape(name, pos, opcode, operands, attrs, {})
        if literal is not None and len(literal) <= self._LITERAL_CHECK_LIMIT:
            try:
                check_literal(literal, shape)
            except LiteralError as e:
                lead = len(inner) - len(inner.lstrip())
                raise self.loc.error(f"constant %{name}: {e}", inner_pos + lead + e.offset) from None
        instr = Instruction(name, opcode, shape, operands, attrs, None, param_no, literal, wrapped)
        self._comp._link(instr)
        self._nesting -= 1
        return instr

    def _operands(self, text: str, base: int, user: str, names: dict[str, Instruction]) -> tuple[Instruction, ...]:
        if "/" in text:
            text = _blank_comments(text)
        if not text.strip():
            return ()
        out = []
        if "[" not in text and "(" not in text:
            start = 0
            for piece in text.split(","):
                name = piece.strip()
                if name.startswith("%"):
                    name = name[1:]
                op = names.get(name)
                if op is None:
                    if "#" in name:
                        op = self._tuple_element(name, base + start + (len(piece) - len(piece.lstrip())), user, names)
                    else:
                        self._bad_operand(base, user, piece, start, name)
                out.append(op)
                start += len(piece) + 1
            return tuple(out)
        for piece, off in split_top_level(text):
            s = piece.lstrip()
            lead = len(piece) - len(s)
            shape_text = ""
            declared = None
            if s[:1] == "(" or _OPERAND_SHAPE_START.match(s):
                shape_pos = base + off + lead
                try:
                    declared, end = parse_shape_prefix(piece, lead)
                except ShapeError as e:
                    raise self.loc.error(str(e), base + off + e.offset) from None
                self.saw_operand_shapes = True
                shape_text = piece[lead:end]
                rest = piece[end:]
                name = rest.strip()
                off += end
                piece = rest
            else:
                name = s.strip()
            if re.match(r"[a-z][a-z0-9\-]*\(", name) and name.endswith(")"):
                out.append(self._nested(piece, base + off, shape_text, names))
                continue
            if name.startswith("%"):
                name = name[1:]
            op = names.get(name)
            if op is None:
                if "#" in name:
                    op = self._tuple_element(name, base + off + (len(piece) - len(piece.lstrip())), user, names)
                else:
                    self._bad_operand(base, user, piece, off, name)
            if declared is not None and not declared.compatible(op.shape):
                # XLA's parser: ShapeUtil::Compatible (layouts, `<=` marks and `?` sizes aside)
                raise self.loc.error(
                    f"the declared operand shape {declared.to_text()} of %{user} is not compatible with "
                    f"the shape of the operand instruction %{name}, {op.shape.to_text()}",
                    shape_pos,
                )
            out.append(op)
        return tuple(out)

    def _tuple_element(self, ref: str, pos: int, user: str, names: dict[str, Instruction]) -> Instruction:
        """``%x#N`` (and ``%x#N#M``): XLA's sugar for a get-tuple-element of ``x``,
        which dumps print instead of the GTE's own line.  Like XLA's parser, one
        GTE per (tuple, index) in a computation, named ``x_N``; it keeps the
        sugar mark so the printer writes it back the same way."""
        pieces = ref.split("#")
        op = names.get(pieces[0].strip())
        if op is None:
            self._bad_operand(pos, user, "%" + pieces[0], 0, pieces[0].strip())
        at = pos + 2 + len(pieces[0])  # the first index, after "%x#"
        for text in pieces[1:]:
            digits = text.strip()
            if not (digits.isascii() and digits.isdigit()) or len(digits) > 18:
                raise self.loc.error(f"expected a tuple index after '#', got {digits!r}", at, ("integer",))
            index = int(digits)
            shape = op.shape
            if not shape.is_tuple:
                raise self.loc.error(f"%{op.name}#{index}: get-tuple-element needs a tuple operand, %{op.name} is {shape.to_text()}", at)
            if index >= len(shape.tuple_shapes):
                raise self.loc.error(f"%{op.name}#{index}: tuple index {index} out of range for {shape.to_text()}", at)
            gte = self._sugar.get((op, index))
            if gte is None:
                name = f"{op.name}_{index}"
                k = 0
                while name in names or name == user:  # `user` is the line being defined
                    k += 1
                    name = f"{op.name}_{index}.{k}"
                gte = Instruction(name, HloOpcode.GET_TUPLE_ELEMENT, shape.tuple_shapes[index], (op,), {"index": str(index)})
                gte.tuple_sugar = True
                self._comp._link(gte)
                self._sugar[(op, index)] = gte
            op = gte
            at += len(text) + 1
        return op

    def _rename_sugar(self, name: str, names: dict[str, Instruction]) -> None:
        """A line defines ``name`` that an earlier ``%x#N`` GTE took: the GTE has
        no line in the text, so it is the one that moves aside."""
        gte = names.pop(name)
        k = 1
        while f"{name}.{k}" in names:
            k += 1
        gte.name = f"{name}.{k}"
        names[gte.name] = gte

    def _bad_operand(self, base: int, user: str, piece: str, off: int, name: str):
        where = base + off + (len(piece) - len(piece.lstrip()))
        if not name or not re.fullmatch(r"[A-Za-z_][\w.\-]*", name):
            raise self.loc.error(f"expected an operand name, got {piece.strip()!r}", where, ("%name",))
        raise self.loc.error(f"operand %{name} of %{user} is not defined before use in this computation", where)


_SHAPES: dict[str, object] = {}
_ARRAY_SHAPE_TEXT = re.compile(r"[a-z][a-z0-9]*\[[0-9,]*\](?:\{[0-9,]*\})?")
_ELEMENT = r"(?:/\*index=\d+\*/)?" + _ARRAY_SHAPE_TEXT.pattern
_ARRAYS = f"(?:{_ELEMENT}(?:, {_ELEMENT})*)?"
#: ``{(f32[2]{0}, /*index=1*/s32[])->(f32[2]{0})}`` as XLA prints it, arrays only.
_CANONICAL_ENTRY_LAYOUT = re.compile(rf"\{{\({_ARRAYS}\)->(?:{_ARRAY_SHAPE_TEXT.pattern}|\({_ARRAYS}\))\}}")


def _parse_and_cache_shape(text: str) -> Shape:
    """An instruction's shape as written (comments are whitespace), kept in ``_SHAPES``."""
    shape = _SHAPES[text] = parse_shape(_blank_comments(text) if "/" in text else text)
    return shape


def _cached_shape(text: str) -> Shape | None:
    """``_parse_and_cache_shape`` for the compiled fast path: None where the text is
    no shape (none written, or an error the general path then reports)."""
    if not text:
        return None
    try:
        return _parse_and_cache_shape(text)
    except ShapeError:
        return None


#: (literal, shape text) pairs check_literal accepted: a literal's check depends on nothing else.
_LITERALS_OK: set[tuple[str, str]] = set()
#: An operand's written shape: an array `f32[...` or a buffer `b(` (a tuple starts with `(`).
_OPERAND_SHAPE_START = re.compile(r"[a-z][a-z0-9]*\[|b[ \t\r\n]*\(")
#: A computation-valued attribute whose value is a body, not names: `{ p = ...`.
_INLINE_BODY = re.compile(r"\s*\{\s*(?:ROOT\s+)?%?[A-Za-z_][\w.\-]*\s*=")
_VALUE_START = re.compile(r"[\w.\-]+\s*=\s*")
#: Computations written inside attributes nest at most this deep (each level
#: is a Python call; real modules nest one or two).
_MAX_INLINE_DEPTH = 100
#: Builder state that belongs to the computation being built.
_PER_COMPUTATION = ("_comp", "_comps", "_sugar", "_numbers", "_nested_params")
_INDEX_COMMENT = re.compile(r"/\*index=\d+\*/")


def _strip_index_comments(text: str) -> str:
    """``%a, /*index=5*/%b`` -> ``%a, %b``: the comments XLA prints in long operand lists."""
    return _INDEX_COMMENT.sub("", text)

#: XLA's send/recv constructors build their own shapes (send: from its data
#: operand; recv: from the data shape the text declares; the -done halves from
#: their operand) and drop the rest of what the text declares.  The IR holds
#: what XLA holds, so shapes inferred from these agree with XLA's.  These
#: opcodes take the general path, which rebuilds the shape.
_XLA_BUILT_SHAPES = frozenset({HloOpcode.SEND, HloOpcode.SEND_DONE, HloOpcode.RECV, HloOpcode.RECV_DONE})
_FAST_OPCODES = {k: v for k, v in OPCODES.items() if v not in _XLA_BUILT_SHAPES}


def _xla_built_shape(opcode: HloOpcode, declared, operands):
    token = Shape.token()
    if opcode is HloOpcode.SEND_DONE:
        return token
    if opcode is HloOpcode.RECV_DONE:
        if operands and operands[0].shape.is_tuple and operands[0].shape.tuple_shapes:
            return Shape.tuple_of((operands[0].shape.tuple_shapes[0], token))
        return declared
    if opcode is HloOpcode.SEND and operands:
        data = operands[0].shape
    elif opcode is HloOpcode.RECV and declared is not None and declared.is_tuple and declared.tuple_shapes:
        data = declared.tuple_shapes[0]
    else:
        return declared
    return Shape.tuple_of((data, Shape.array(PrimitiveType.U32, ()), token))
