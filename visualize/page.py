"""The before/after HTML page: both graphs side by side as inline SVG, changed
nodes highlighted, pan and zoom, search by instruction name, summary tables.
One self-contained file: no server, no network."""

from __future__ import annotations

import concurrent.futures
import dataclasses
import html
import json
from typing import Any, Mapping, Sequence

from hlo_analysis import devices
from hlo_analysis.cost import analyze
from hlo_analysis.units import fmt_bytes, fmt_seconds
from hlo_analysis.roofline import roofline
from hlo_tools.ir import Module

from . import _assets
from .diff import ModuleDiff, diff_modules
from .dot import to_graph
from .render import svg_text
from .style import COLORS, Category
from .view import FocusOptions, View, VisualizeError, select

_LEGEND_STATUS = {"removed": "#d62728", "added": "#2ca02c", "changed": "#ff7f0e", "fused": "#6a3d9a"}


def after_options(d: ModuleDiff, options: FocusOptions, before_view: View) -> FocusOptions:
    """The focus options for the after module that show the counterpart of what
    the before view shows: ``--around`` maps through the matching (to the
    fusion that now holds it, if it was fused)."""
    after_names = {i.name for i in d.after.instructions()}
    if options.around:
        name = options.around.lstrip("%")
        target = name if name in after_names else d.counterpart.get(name)
        if target is None:  # removed: centre on the nearest matched neighbour
            target = next((d.counterpart[i.name] for i in before_view.instructions if i.name in d.counterpart), None)
        if target is None:
            return dataclasses.replace(options, around=None, computation=None)
        return dataclasses.replace(options, around=target)
    if options.computation and d.after.get_computation(options.computation.lstrip("%")) is None:
        return dataclasses.replace(options, computation=None)
    return options


def _counterparts(d: ModuleDiff, before_view: View, after_view: View) -> dict[str, dict[str, list[str]]]:
    """Click-to-find maps between drawn nodes, both ways (anchored at top-level fusions)."""
    after_drawn = {i.name for i in after_view.drawn_instructions()}
    anchor: dict[str, str] = {}
    for fusion in after_view.instructions:
        if fusion.fused_computation is not None and fusion.name not in after_view.expanded:
            anchor.update({i.name: fusion.name for i in fusion.fused_computation})
    fwd: dict[str, list[str]] = {}
    back: dict[str, list[str]] = {}
    for b in before_view.drawn_instructions():
        a = d.counterpart.get(b.name)
        a = a if a in after_drawn else anchor.get(a) if a else None
        if a:
            fwd[b.name] = [a]
            back.setdefault(a, []).append(b.name)
    return {"before_counterparts": fwd, "after_counterparts": back}


def _focus(*views: View) -> dict[str, str | None]:
    """The node each pane opens on, at a readable zoom: the ``--around`` centre, else
    the computation's root (what a reader of a dump looks for first)."""
    out: dict[str, str | None] = {}
    for side, view in zip(("before", "after"), views):
        drawn = {i.name for i in view.drawn_instructions()} | view.names
        name = view.center
        if name not in drawn:
            roots = [i.name for i in view.instructions if i.is_root and i.name in drawn]
            name = roots[0] if roots else None
        out[side] = name
    return out


def _table(caption: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in columns)
    body = []
    for r in rows:
        cells = "".join(
            f'<td class="num">{v:,}</td>' if isinstance(v, int) and not isinstance(v, bool) else f"<td>{html.escape(str(v))}</td>"
            for v in r)
        body.append(f"<tr>{cells}</tr>")
    return f"<table><caption>{html.escape(caption)}</caption><tr>{head}</tr>{''.join(body)}</table>"


#: The rows of the before/after totals table, in order.
TOTAL_ROWS = ("kernels", "flops", "bytes", "time")


def before_after_totals(before: Module, after: Module, device: str | devices.Device = "h100") -> dict[str, dict]:
    """What the engineer asks of a change, before vs after: kernels launched, flops,
    bytes accessed and predicted time (the one cost model, ``hlo_analysis.cost``,
    and its roofline on ``device``)."""
    dev = devices.load(device)
    out: dict[str, dict] = {}
    for side, module in (("before", before), ("after", after)):
        cost = analyze(module)
        roof = roofline(module, dev, cost)
        out[side] = {"kernels": len(roof.kernels), "flops": cost.flops, "bytes": cost.bytes_accessed,
                     "time": roof.time_s}
    out["device"] = {"name": dev.name}
    return out


def _change(b: float, a: float) -> str:
    if b == a:
        return "="
    return f"{a / b:.2f}x" if b else "new"


def totals_table(totals: dict[str, dict]) -> str:
    """The before/after totals as an HTML table (id ``totals``), one row per figure."""
    fmt = {"kernels": lambda v: f"{v:,}", "flops": lambda v: f"{v:.3g}", "bytes": fmt_bytes, "time": fmt_seconds}
    label = {"kernels": "kernels", "flops": "flops", "bytes": "bytes accessed",
             "time": f"predicted time ({totals['device']['name']} roofline)"}
    rows = []
    for key in TOTAL_ROWS:
        b, a = totals["before"][key], totals["after"][key]
        rows.append(f'<tr data-row="{key}"><th>{html.escape(label[key])}</th><td class="num">{fmt[key](b)}</td>'
                    f'<td class="num">{fmt[key](a)}</td><td class="num">{_change(b, a)}</td></tr>')
    return ('<table id="totals"><caption>before / after totals (hlo_analysis cost model)</caption>'
            f'<tr><th></th><th>before</th><th>after</th><th>after / before</th></tr>{"".join(rows)}</table>')


def pass_table(summary: Sequence[dict[str, Any]]) -> str:
    """A table of pass results: one row per dict, columns in first-seen key order."""
    columns: list[str] = []
    for row in summary:
        columns += [k for k in row if k not in columns]
    return _table("passes", columns, [[row.get(c, "") for c in columns] for row in summary])


def _pane(side: str, module: Module, view: View, svg: str, pane_id: str | None = None) -> str:
    notice = f'<div class="notice">{html.escape(view.notice)}</div>' if view.notice else ""
    title = f"{side}: {module.name} — {module.instruction_count:,} instructions, showing {view.node_count:,} nodes"
    return (f'<div class="pane" id="pane-{pane_id or side}"><h2>{html.escape(title)}</h2>{notice}'
            f'<div class="viewport">{svg}</div></div>')


def _document(heading: str, panes: str, tables: Sequence[str], data: dict, legend_status: bool,
              top: str = "") -> str:
    legend = "".join(f'<span style="background:{COLORS[c]}">{c.value}</span>' for c in Category)
    if legend_status:
        legend += "".join(f'<span class="st" style="border-color:{col}">{s}</span>' for s, col in _LEGEND_STATUS.items())
    payload = json.dumps(data).replace("</", "<\\/")
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(heading)}</title>
<style>{_assets.CSS}</style></head>
<body>
<header><h1>{html.escape(heading)}</h1>
<label>search <input id="search" type="search" placeholder="instruction name, e.g. add.3" autocomplete="off"></label>
<span id="search-result"></span>
<span class="legend">{legend}</span>
<span>wheel: zoom · drag: pan · double-click: whole graph · click a node: its counterpart</span></header>
{f'<section class="totals">{top}</section>' if top else ''}
<div class="panes">{panes}</div>
<section class="tables">{''.join(tables)}</section>
<script type="application/json" id="hlo-data">{payload}</script>
<script>{_assets.JS}</script>
</body></html>
"""


def profile_notes(profile: Mapping[str, Any]) -> dict[str, str]:
    """Per instruction of a profile (``hlo profile --json``), the label line the
    graph shows: measured time per run and percent of roofline."""
    out = {}
    for k in profile.get("kernels", ()):
        pct = k.get("roofline_pct")
        out[k["name"]] = f"measured {fmt_seconds(k['measured_s'])}" + (f" · {pct:.0f}% of roofline" if pct else "")
    return out


def profile_table(profile: Mapping[str, Any], side: str = "", top: int = 15) -> str:
    """The profile's totals and its ``top`` instructions by measured time."""
    ks = sorted(profile.get("kernels", ()), key=lambda k: -k["measured_s"])[:top]
    caption = (f"{side + ': ' if side else ''}measured {fmt_seconds(profile['measured_s'])} per run "
               f"({100 * profile['joined_share']:.2f}% joined), predicted {fmt_seconds(profile['predicted_s'])} "
               f"on {profile['device']} — hlo profile")
    rows = [[k["name"], k.get("label") or "", fmt_seconds(k["measured_s"]), fmt_seconds(k.get("predicted_s")),
             f"{k['roofline_pct']:.0f}%" if k.get("roofline_pct") else "-"] for k in ks]
    return _table(caption, ["instruction", "pattern", "measured", "predicted", "roofline"], rows)


def single_html(module: Module, options: FocusOptions = FocusOptions(), *,
                profile: Mapping[str, Any] | None = None) -> str:
    """A page with one graph (pan, zoom, search), for ``hlo viz FILE -o out.html``;
    with a ``profile`` (``hlo profile --json``), each profiled node's measured time
    and a table of the slowest."""
    view = select(module, options)
    svg = svg_text(to_graph(view, id_prefix="b-", notes=profile_notes(profile) if profile else None).source)
    return _document(module.name, _pane("module", module, view, svg, pane_id="before"),
                     [profile_table(profile)] if profile else [],
                     {"before_counterparts": {}, "after_counterparts": {}, "focus": _focus(view)}, False)


def before_after_html(before: Module, after: Module, options: FocusOptions = FocusOptions(), *,
                      summary: Sequence[dict[str, Any]] | None = None, title: str | None = None,
                      device: str | devices.Device = "h100",
                      profiles: tuple[Mapping[str, Any] | None, Mapping[str, Any] | None] = (None, None)) -> str:
    """The page, as text: the totals (kernels, flops, bytes, predicted time on
    ``device``) at the top, both graphs, the tables. ``summary`` is the pass
    summary (e.g. one dict per pass with its name, whether it changed the module, its time);
    ``profiles``: ``hlo profile --json`` of either side (measured time on the nodes, a table each)."""
    d = diff_modules(before, after)
    before_view = select(before, options)
    try:
        after_view = select(after, after_options(d, options, before_view))
    except VisualizeError:
        after_view = select(after, dataclasses.replace(options, around=None, computation=None))
    b_classes = {n: s for n, s in d.before_status.items() if s != "kept"}
    a_classes = {n: s for n, s in d.after_status.items() if s != "kept"}
    notes = [profile_notes(p) if p else None for p in profiles]
    sources = [to_graph(before_view, id_prefix="b-", classes=b_classes, notes=notes[0]).source,
               to_graph(after_view, id_prefix="a-", classes=a_classes, notes=notes[1]).source]
    with concurrent.futures.ThreadPoolExecutor(2) as pool:  # two `dot` processes at once
        b_svg, a_svg = pool.map(svg_text, sources)
    counts = d.counts()
    tables = [_table("top-level instructions", ["status", "count"], [[k, v] for k, v in counts.items()]),
              _table("opcode counts outside fusion bodies", ["opcode", "before", "after", "delta"],
                     [[o, b, a, f"{a - b:+d}"] for o, b, a in d.opcode_counts])]
    if summary:
        tables.insert(0, pass_table(summary))
    tables[:0] = [profile_table(p, side) for p, side in zip(profiles, ("before", "after")) if p]
    heading = title or f"{before.name}: before / after"
    panes = _pane("before", before, before_view, b_svg) + _pane("after", after, after_view, a_svg)
    top = totals_table(before_after_totals(before, after, device))
    data = {**_counterparts(d, before_view, after_view), "focus": _focus(before_view, after_view)}
    return _document(heading, panes, tables, data, True, top)
