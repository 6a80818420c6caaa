"""Pictures of HLO modules: DOT/SVG/PNG of a module or a focused part of it, and
a self-contained before/after HTML page of a pass.

    import hlo_tools, visualize
    before, after = hlo_tools.load("before.hlo"), hlo_tools.load("after.hlo")
    dot = visualize.to_dot(before, visualize.FocusOptions(around="add.3", radius=2))
    visualize.write_graph(dot, "add3.svg")
    print(visualize.format_diff(visualize.diff_modules(before, after)))
    html = visualize.before_after_html(before, after, visualize.FocusOptions(max_nodes=300))

``visualize.dot`` imports the graphviz package; rendering needs Graphviz's ``dot``.
"""

from .diff import ModuleDiff, diff_modules, format_diff, match
from .view import FocusOptions, View, VisualizeError, select


def __getattr__(name: str):
    """Lazy exports of what needs the graphviz package (DOT, rendering, the page)."""
    if name in ("to_dot", "to_graph"):
        from . import dot

        return getattr(dot, name)
    if name in ("render", "write_graph", "svg_text"):
        from . import render

        return getattr(render, name)
    if name in ("before_after_html", "single_html"):
        from . import page

        return getattr(page, name)
    raise AttributeError(f"module 'visualize' has no attribute {name!r}")


__all__ = ["FocusOptions", "ModuleDiff", "View", "VisualizeError", "before_after_html", "diff_modules", "format_diff",
           "match", "render", "select", "single_html", "svg_text", "to_dot", "to_graph", "write_graph"]
