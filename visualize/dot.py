"""DOT text for a View: nodes labelled with opcode, shape and name, coloured by
category; expanded fusions as clusters; edges labelled with the bytes that flow."""

from __future__ import annotations

from typing import Mapping

import graphviz

from hlo_tools.ir import Instruction, Module
from hlo_tools.opcode import HloOpcode
from hlo_analysis.units import fmt_bytes

from .style import COLORS, Category, category, shorten
from .view import FocusOptions, View, select

#: dot's ``nslimit``: the x-coordinate network simplex stops after this many passes over the nodes.
NSLIMIT = 2
#: Literals longer than this are elided from constant labels.
MAX_LITERAL_CHARS = 24


def instruction_label(instr: Instruction, view: View, note: str | None = None) -> str:
    """Opcode, shape and name, one per line, plus what is hidden around it and a
    ``note`` (a profile's measured time)."""
    op = instr.opcode_text
    if instr.opcode is HloOpcode.FUSION:
        op = f"fusion {instr.fusion_kind or ''}".strip()
        body = instr.fused_computation
        if body is not None and instr.name not in view.expanded:
            ops = sorted({i.opcode_text for i in body if i.opcode is not HloOpcode.PARAMETER})
            op += f"\\n{len(body)} ops: " + shorten(", ".join(ops), 40)
    elif instr.opcode is HloOpcode.CONSTANT:
        literal = instr.literal or ""
        op = f"constant {literal}" if len(literal) <= MAX_LITERAL_CHARS else f"constant (elided, {fmt_bytes(instr.shape.byte_size)})"
    elif instr.opcode is HloOpcode.PARAMETER:
        op = f"parameter {instr.parameter_number}"
    elif instr.opcode is HloOpcode.CUSTOM_CALL and instr.custom_call_target:
        op = f"custom-call {shorten(instr.custom_call_target, 32)}"
    lines = [op, shorten(instr.shape.to_text(print_layout=False), 48), "%" + shorten(instr.name, 40)]
    callees = [c.name for k, cs in instr.called_computation_map.items() if k != "calls" for c in cs]
    if callees:
        lines.append("calls " + shorten(", ".join("%" + c for c in callees), 40))
    if view.instructions and instr.parent in view.computations:
        names = view.names
        hidden_in = sum(1 for o in instr.operands if o.name not in names)
        hidden_out = sum(1 for u in instr.users if u.name not in names)
        if hidden_in or hidden_out:
            lines.append(f"(+{hidden_in} operands, +{hidden_out} users not shown)")
    if note:
        lines.append(note)
    return "\\n".join(lines)


def _edge_bytes(operand: Instruction, user: Instruction) -> str:
    shape = user.shape if user.opcode is HloOpcode.GET_TUPLE_ELEMENT else operand.shape
    return fmt_bytes(shape.byte_size)


def to_graph(view: View, *, id_prefix: str = "", classes: Mapping[str, str] | None = None,
             notes: Mapping[str, str] | None = None) -> graphviz.Digraph:
    """The view as a ``graphviz.Digraph``. SVG element ids are ``id_prefix`` +
    instruction name; ``classes`` adds CSS classes per instruction name (the
    before/after page uses them to highlight changes); ``notes`` a last label line
    per instruction name (``hlo viz --profile``: measured time)."""
    classes = classes or {}
    notes = notes or {}
    g = graphviz.Digraph(name=view.module.name, strict=False)
    # Edge byte counts are xlabels: placed after layout, so dot stays fast (a real
    # label is a virtual node in the layout: 25x slower on a 441-node module).
    # nslimit caps dot's network simplex for x coordinates at 2 x nodes iterations: long
    # edges of train steps (parameters to the backward pass) add tens of thousands of
    # virtual nodes, and uncapped, 787 edges took over 40 s; capped, 3 s (bench/viz_speed.py --sweep).
    g.attr(rankdir="TB", fontname="Helvetica", fontsize="10", newrank="true", forcelabels="true", nslimit=str(NSLIMIT))
    g.attr("node", shape="box", style="rounded,filled", fontname="Helvetica", fontsize="9", margin="0.05,0.03")
    g.attr("edge", fontname="Helvetica", fontsize="8", color="#555555", arrowsize="0.6")
    if view.notice:
        g.attr(label=view.notice.replace('"', "'"), labelloc="t", labeljust="l")
    names = view.names

    def add_node(sub: graphviz.Digraph, instr: Instruction) -> None:
        cat = category(instr)
        attrs = {"id": id_prefix + instr.name, "fillcolor": COLORS[cat], "class": f"cat-{cat.name.lower()}"}
        if instr.name in classes:
            attrs["class"] += " " + classes[instr.name]
        if instr.name == view.center:
            attrs.update(penwidth="3", color="#1f78b4")
        if cat in (Category.PARAMETER, Category.CONSTANT):
            attrs["shape"] = "ellipse" if cat is Category.PARAMETER else "box"
        sub.node(instr.name, instruction_label(instr, view, notes.get(instr.name)), **attrs)

    def source(instr: Instruction) -> str:
        return instr.fused_computation.root.name if instr.name in view.expanded else instr.name

    def sink(user: Instruction, index: int) -> str:
        if user.name in view.expanded:
            return user.fused_computation.parameter(index).name
        return user.name

    def add_fusion(sub: graphviz.Digraph, fusion: Instruction) -> None:
        body = fusion.fused_computation
        with sub.subgraph(name="cluster_" + fusion.name) as c:
            cls = "fusion-cluster " + classes.get(fusion.name, "")
            note = notes.get(fusion.name)
            c.attr(id=id_prefix + fusion.name, label=f"%{fusion.name}  fusion {fusion.fusion_kind or ''}  "
                   f"{shorten(fusion.shape.to_text(print_layout=False), 48)}" + (f"  {note}" if note else ""),
                   style="rounded,filled", fillcolor="#f3eef8", color="#6a3d9a", fontsize="9",
                   **{"class": cls.strip()})
            for instr in body:
                add_node(c, instr)
                for i, operand in enumerate(instr.operands):
                    c.edge(operand.name, instr.name, xlabel=_edge_bytes(operand, instr))

    for comp in view.computations:
        members = [i for i in view.instructions if i.parent is comp]
        if len(view.computations) > 1:
            ctx = g.subgraph(name="cluster_comp_" + comp.name)
        else:
            ctx = _Same(g)
        with ctx as sub:
            if len(view.computations) > 1:
                sub.attr(label=("ENTRY " if comp is view.module.entry else "") + "%" + comp.name, style="dashed", color="#999999")
            for instr in members:
                if instr.name in view.expanded:
                    add_fusion(sub, instr)
                else:
                    add_node(sub, instr)
    for instr in view.instructions:
        for i, operand in enumerate(instr.operands):
            if operand.name in names:
                g.edge(source(operand), sink(instr, i), xlabel=_edge_bytes(operand, instr))
    return g


class _Same:
    """A context manager that yields the graph itself (no subgraph)."""

    def __init__(self, g: graphviz.Digraph):
        self.g = g

    def __enter__(self) -> graphviz.Digraph:
        return self.g

    def __exit__(self, *exc) -> None:
        return None


def to_dot(module_or_view: Module | View, options: FocusOptions = FocusOptions(), **kwargs) -> str:
    """DOT source for a module (after applying ``options``) or for a View."""
    view = module_or_view if isinstance(module_or_view, View) else select(module_or_view, options)
    return to_graph(view, **kwargs).source
