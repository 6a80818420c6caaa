"""Prints the IR as XLA's canonical HLO text (HloModule::ToString).

A module parsed from XLA's canonical print prints back byte-for-byte; anything
else prints to text that XLA's parser accepts and canonicalizes identically.
"""

from __future__ import annotations

from .attributes import printed_value
from .opcode import HloOpcode


def printed_as_operand(instr) -> bool:
    """A GTE the text wrote as ``%tuple#N`` prints that way again, unless it has
    become something that needs its own line (the root, an attribute, a control
    edge, a new index attribute form)."""
    if not instr.tuple_sugar or instr.opcode is not HloOpcode.GET_TUPLE_ELEMENT:
        return False
    comp = instr.parent
    if comp is None or comp.root is instr or instr._control_predecessors or instr._control_successors:
        return False
    attrs = instr.attributes
    return len(attrs) == 1 and "index" in attrs


def operand_ref(op, sugar: bool = True) -> str:
    """``%name``, or ``%tuple#N`` for a GTE printed as its users' operand."""
    if sugar and printed_as_operand(op):
        return f"{operand_ref(op._operands[0])}#{op.attributes['index']}"
    return "%" + op.name


def _operand_list(instr, with_shapes: bool, sugar: bool = True) -> str:
    if instr.opcode is HloOpcode.PARAMETER:
        return str(instr.parameter_number)
    if instr.opcode is HloOpcode.CONSTANT:
        return instr.literal or ""
    parts = []
    for i, op in enumerate(instr._operands):
        ref = operand_ref(op, sugar)
        text = f"{op.shape.to_text()} {ref}" if with_shapes else ref
        parts.append(f"/*index={i}*/{text}" if i and i % 5 == 0 else text)
    return ", ".join(parts)


def print_attributes(instr) -> str:
    if instr._attributes is None:  # never parsed: print exactly what was read
        return instr._raw_attributes
    out = []
    for key, raw in instr.attributes.items():
        value = raw if raw is not None else printed_value(instr, key)
        if value is not None:
            out.append(f", {key}={value}")
    return "".join(out)


def print_instruction(instr, with_shapes: bool = False, is_root: bool = False, sugar: bool = True) -> str:
    head = "  ROOT %" if is_root else "  %"
    return (
        f"{head}{instr.name} = {instr.shape.to_text()} {instr.opcode_text}({_operand_list(instr, with_shapes, sugar)})"
        f"{print_attributes(instr)}"
    )


def signature_text(comp) -> str:
    """``(p: f32[4]) -> f32[]``: what XLA prints after a computation's name."""
    params = ", ".join(f"{p.name}: {p.shape.to_text(False)}" for p in comp.parameters)
    root = comp.root.shape.to_text(False) if comp.root is not None else "()"
    return f"({params}) -> {root}"


def print_computation(comp, with_shapes: bool | None = None, sugar: bool = True) -> str:
    """``sugar=False`` prints every GTE as a line of its own (for XLA versions
    whose parser predates the ``%tuple#N`` operand syntax)."""
    if with_shapes is None:
        with_shapes = comp.parent.print_operand_shapes if comp.parent is not None else False
    order = comp.instructions if comp.is_topologically_ordered() else comp.post_order()
    root = comp.root
    lines = [f"{'ENTRY ' if comp.is_entry else ''}%{comp.name} {signature_text(comp)} {{"]
    lines.extend(print_instruction(i, with_shapes, i is root, sugar) for i in order if not (sugar and printed_as_operand(i)))
    tail = "".join(f", {k}={v}" for k, v in comp.attributes.items())
    lines.append("}" + tail)
    return "\n".join(lines)


def computation_print_order(module) -> list:
    """Module order, except that a callee always precedes its callers (XLA's
    parser resolves computation names in text order).  The entry keeps its
    place too: XLA prints it where the text had it, and the order decides
    which of two same-named instructions XLA renames."""
    placed: set[int] = set()
    out = []

    def place(root) -> None:
        # Depth-first with an explicit stack: call chains can be thousands deep.
        placed.add(id(root))
        stack = [(root, _callees(root))]
        while stack:
            comp, callees = stack[-1]
            for callee in callees:
                if id(callee) not in placed:
                    placed.add(id(callee))
                    stack.append((callee, _callees(callee)))
                    break
            else:
                stack.pop()
                out.append(comp)

    for comp in module.computations:
        if id(comp) not in placed:
            place(comp)
    if module.entry is not None and id(module.entry) not in placed:
        place(module.entry)
    return out


def _callees(comp):
    """The computations ``comp`` calls, in instruction order (an iterator, so
    the depth-first walk above resumes where it left off)."""
    return (callee for instr in comp for callee in instr.called_computations)


def print_module(module, *, print_operand_shapes: bool | None = None, tuple_sugar: bool = True) -> str:
    """The module as HLO text. ``print_operand_shapes`` defaults to the style of
    the text the module was parsed from; ``tuple_sugar=False`` writes every
    get-tuple-element as its own line, never as a ``%tuple#N`` operand."""
    with_shapes = module.print_operand_shapes if print_operand_shapes is None else print_operand_shapes
    header = "HloModule " + module.name + "".join(f", {k}={v}" for k, v in module.attributes.items())
    # XLA ends the multi-line origin_recovery_table value with its own newline.
    parts = [header, "\n\n\n" if "origin_recovery_table" in module.attributes else "\n\n"]
    if module.stack_frames:
        for name, lines in module.stack_frames:
            parts.append(name + "\n" + "".join(line + "\n" for line in lines) + "\n")
        parts.append("\n")
    for comp in computation_print_order(module):
        parts.append(print_computation(comp, with_shapes, tuple_sugar))
        parts.append("\n\n")
    return "".join(parts)
