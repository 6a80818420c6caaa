"""The scan report for people: Markdown and one self-contained HTML page (tables
plus a roofline scatter plot drawn as inline SVG; no scripts, no external files)."""

from __future__ import annotations

import html
import json
import math
from pathlib import Path
from typing import Any

from hlo_tools.fileio import make_dirs, write_output

from .md import md_block, md_code, md_escape

CATEGORY_COLORS = {"matmul": "#1f77b4", "attention": "#9467bd", "memory-bound fusion": "#ff7f0e",
                   "collective": "#2ca02c", "copy": "#8c564b", "other": "#7f7f7f"}


def fmt_bytes(b: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(b) < 1000 or unit == "TB":
            return f"{b:.3g} {unit}"
        b /= 1000
    return f"{b:.3g} TB"


def fmt_time(s: float) -> str:
    if s >= 1:
        return f"{s:.3g} s"
    if s >= 1e-3:
        return f"{s * 1e3:.3g} ms"
    return f"{s * 1e6:.3g} us"


def write_reports(report: dict[str, Any], out_dir: str | Path) -> None:
    """report.json, report.md and report.html in ``out_dir``, each written atomically
    (``fileio.write_output``: a failed report never leaves a half-written file)."""
    out = make_dirs(out_dir)
    write_output(out / "report.json", json.dumps(report, indent=1))
    write_output(out / "report.md", markdown(report))
    write_output(out / "report.html", html_page(report))


def _headroom_rows(report: dict[str, Any]) -> list[list[str]]:
    rows = []
    for m in report["modules"]:
        cats = m["categories"]
        top = max(cats.items(), key=lambda kv: kv[1]["headroom_s"])[0] if cats else "-"
        rows.append([m["label"], str(m["kernels"]), fmt_time(m["time_s"]), fmt_time(m["headroom_s"]),
                     f"{100 * m['headroom_s'] / m['time_s']:.0f}%" if m["time_s"] else "-", top,
                     fmt_bytes(m["opportunities"]["bytes_saved_legal"]), str(m["opportunities"]["legal"])])
    return rows


HEADROOM_COLUMNS = ["module", "kernels", "roofline time", "headroom", "headroom %", "most headroom in",
                    "legal fusion bytes saved", "legal opportunities"]
OPP_COLUMNS = ["signature", "kind", "pattern", "count", "legal", "modules", "bytes saved", "time saved", "example"]


def _opp_rows(report: dict[str, Any], n: int = 25) -> list[list[str]]:
    return [[g["signature"], g["kind"], g["pattern"] or "", str(g["count"]), str(g["legal"]), str(g["modules"]),
             fmt_bytes(g["bytes_saved"]), fmt_time(g["time_saved_s"]), (g["examples"] or [""])[0]]
            for g in report["top_opportunities"][:n]]


def _pattern_rows(report: dict[str, Any]) -> list[list[str]]:
    return [[name, str(p["count"]), str(p["modules"]), fmt_bytes(p["bytes_saved"]), fmt_time(p["time_saved_s"])]
            for name, p in sorted(report["patterns"].items(), key=lambda kv: -kv[1]["bytes_saved"])]


def _md_table(cols: list[str], rows: list[list[str]]) -> str:
    esc = [[md_escape(c) for c in r] for r in rows]  # names come from the scanned folder: text, never markup
    return "\n".join(["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)] + ["| " + " | ".join(r) + " |" for r in esc])


def markdown(report: dict[str, Any]) -> str:
    lines = [
        f"# Fusion analysis: {md_escape(report['source'])}",
        "",
        f"Device `{report['device']}`; {report['modules_scanned']} modules scanned ({report['cached']} from cache), "
        f"{len(report['errors'])} errors; {report['seconds']:.1f} s on {report['jobs']} workers ({report['engine']}).",
        "",
        "## Known patterns (legal producer-consumer and sibling edges)",
        "",
        _md_table(["pattern", "edges", "modules", "bytes saved", "time saved"], _pattern_rows(report)),
        "",
        "## Top opportunities across the corpus",
        "",
        _md_table(OPP_COLUMNS, _opp_rows(report)),
        "",
        "## Headroom per module",
        "",
        _md_table(HEADROOM_COLUMNS, _headroom_rows(report)),
        "",
        "## Errors",
        "",
    ]
    if report["errors"]:
        lines.append(_md_table(["file", "error"], [[e["file"], (e["error"].splitlines() or [""])[0]] for e in report["errors"]]))
        for e in report["errors"]:
            lines += ["", f"{md_code(e['file'])}:", "", md_block(e["error"])]
    else:
        lines.append("None.")
    if report.get("skipped"):
        lines += ["", "## Skipped (not read)", "", _md_table(["file", "reason"], [[x["file"], x["reason"]] for x in report["skipped"]])]
    return "\n".join(lines) + "\n"


def scatter_svg(report: dict[str, Any], width: int = 760, height: int = 440) -> str:
    """Kernels as points: arithmetic intensity (flop/byte) vs attained flop/s at
    the roofline prediction, log-log, coloured by category."""
    pts = [(p[0], p[1], p[2]) for m in report["modules"] for p in m["points"] if p[0] > 0 and p[1] > 0]
    pad_l, pad_b, pad_t, pad_r = 60, 40, 20, 150
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" role="img" aria-label="roofline scatter">',
           f'<rect width="{width}" height="{height}" fill="white"/>']
    if not pts:
        out.append(f'<text x="{width / 2}" y="{height / 2}" text-anchor="middle">no kernels</text></svg>')
        return "\n".join(out)
    xs = [math.log10(p[0]) for p in pts]
    ys = [math.log10(p[1]) for p in pts]
    x0, x1 = math.floor(min(xs)), math.ceil(max(xs)) + (1 if math.ceil(max(xs)) == math.floor(min(xs)) else 0)
    y0, y1 = math.floor(min(ys)), math.ceil(max(ys)) + (1 if math.ceil(max(ys)) == math.floor(min(ys)) else 0)
    pw, ph = width - pad_l - pad_r, height - pad_t - pad_b

    def sx(v: float) -> float:
        return pad_l + (v - x0) / (x1 - x0) * pw

    def sy(v: float) -> float:
        return pad_t + ph - (v - y0) / (y1 - y0) * ph

    out.append(f'<rect x="{pad_l}" y="{pad_t}" width="{pw}" height="{ph}" fill="none" stroke="#444"/>')
    for d in range(x0, x1 + 1):
        out.append(f'<line x1="{sx(d):.1f}" y1="{pad_t + ph}" x2="{sx(d):.1f}" y2="{pad_t + ph + 4}" stroke="#444"/>'
                   f'<text x="{sx(d):.1f}" y="{pad_t + ph + 16}" font-size="11" text-anchor="middle">1e{d}</text>')
    for d in range(y0, y1 + 1):
        out.append(f'<line x1="{pad_l - 4}" y1="{sy(d):.1f}" x2="{pad_l}" y2="{sy(d):.1f}" stroke="#444"/>'
                   f'<text x="{pad_l - 6}" y="{sy(d) + 4:.1f}" font-size="11" text-anchor="end">1e{d}</text>')
    out.append(f'<text x="{pad_l + pw / 2}" y="{height - 6}" font-size="12" text-anchor="middle">arithmetic intensity (flop/byte)</text>')
    out.append(f'<text x="14" y="{pad_t + ph / 2}" font-size="12" text-anchor="middle" '
               f'transform="rotate(-90 14 {pad_t + ph / 2})">predicted flop/s</text>')
    step = max(1, len(pts) // 4000)  # keep the page light: at most ~4000 dots
    for (x, y, cat), lx, ly in list(zip(pts, xs, ys))[::step]:
        out.append(f'<circle cx="{sx(lx):.1f}" cy="{sy(ly):.1f}" r="2.2" fill="{CATEGORY_COLORS.get(cat, "#000")}" '
                   f'fill-opacity="0.55"><title>{html.escape(cat)}: {x:.3g} flop/B, {y:.3g} flop/s</title></circle>')
    for i, (cat, color) in enumerate(CATEGORY_COLORS.items()):
        y = pad_t + 14 + 18 * i
        out.append(f'<circle cx="{pad_l + pw + 14}" cy="{y}" r="5" fill="{color}"/>'
                   f'<text x="{pad_l + pw + 24}" y="{y + 4}" font-size="12">{html.escape(cat)}</text>')
    out.append("</svg>")
    return "\n".join(out)


def _html_skipped(report: dict[str, Any]) -> str:
    if not report.get("skipped"):
        return ""
    return '<h2 id="skipped">Skipped (not read)</h2>\n' + _html_table(["file", "reason"], [[x["file"], x["reason"]] for x in report["skipped"]])


def _html_table(cols: list[str], rows: list[list[str]]) -> str:
    head = "".join(f"<th>{html.escape(c)}</th>" for c in cols)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def html_page(report: dict[str, Any]) -> str:
    errors = (_html_table(["file", "error"], [[e["file"], e["error"]] for e in report["errors"]])
              if report["errors"] else "<p>None.</p>")
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>Fusion analysis: {html.escape(report['source'])}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2em; color: #222; }}
table {{ border-collapse: collapse; margin: 1em 0; font-size: 13px; }}
th, td {{ border: 1px solid #ccc; padding: 3px 8px; text-align: left; vertical-align: top; }}
th {{ background: #f0f0f0; }}
td {{ white-space: pre-wrap; font-family: ui-monospace, monospace; }}
</style></head><body>
<h1>Fusion analysis: {html.escape(report['source'])}</h1>
<p>Device <b>{html.escape(report['device'])}</b>; {report['modules_scanned']} modules scanned
({report['cached']} from cache), {len(report['errors'])} errors; {report['seconds']:.1f} s on {report['jobs']}
workers ({html.escape(report['engine'])}).</p>
<h2>Roofline: kernels</h2>
{scatter_svg(report)}
<h2>Known patterns</h2>
{_html_table(["pattern", "edges", "modules", "bytes saved", "time saved"], _pattern_rows(report))}
<h2>Top opportunities across the corpus</h2>
{_html_table(OPP_COLUMNS, _opp_rows(report))}
<h2>Headroom per module</h2>
{_html_table(HEADROOM_COLUMNS, _headroom_rows(report))}
<h2 id="errors">Errors</h2>
{errors}
{_html_skipped(report)}
</body></html>
"""
