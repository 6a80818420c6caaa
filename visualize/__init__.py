"""Pictures of HLO modules: DOT/SVG/PNG of a module or a focused part of it, and
a self-contained before/after HTML page of a pass.

    import hlo_tools, visualize
    before, after = hlo_tools.load("before.hlo"), hlo_tools.load("after.hlo")
    dot = visualize.to_dot(before, visualize.FocusOptions(around="add.3", radius=2))
    visualize.write_graph(dot, "add3.svg")
    print(visualize.format_diff(visualize.diff_modules(before, after)))
    html = visualize.before_after_html(before, after, visualize.FocusOptions(max_nodes=300))

``visualize.dot`` uses the graphviz package (a dependency); rendering needs Graphviz's ``dot``.
"""

from .diff import ModuleDiff, diff_modules, format_diff, match
from .dot import to_dot, to_graph
from .page import before_after_html, single_html
from .render import render, svg_text, write_graph
from .view import FocusOptions, View, VisualizeError, select

__all__ = ["FocusOptions", "ModuleDiff", "View", "VisualizeError", "before_after_html", "diff_modules", "format_diff",
           "match", "render", "select", "single_html", "svg_text", "to_dot", "to_graph", "write_graph"]
