"""The scan report for people: Markdown and one self-contained HTML page (tables
plus a roofline scatter plot drawn as inline SVG; no scripts, no external files)."""

from __future__ import annotations

import html
import math
from pathlib import Path
from typing import Any

from hlo_analysis.units import fmt_bytes, fmt_seconds

from .md import md_block, md_code, md_escape

CATEGORY_COLORS = {"matmul": "#1f77b4", "attention": "#9467bd", "memory-bound fusion": "#ff7f0e",
                   "collective": "#2ca02c", "copy": "#8c564b", "other": "#7f7f7f"}


def fmt_rate(x: float, unit: str) -> str:
    """``989 TFLOP/s``, ``3.35 TB/s``: a rate with an SI prefix."""
    for prefix in ("", "K", "M", "G", "T", "P"):
        if abs(x) < 1000 or prefix == "P":
            return f"{x:.3g} {prefix}{unit}"
        x /= 1000
    return f"{x:.3g} P{unit}"


def _file(m: dict[str, Any]) -> str:
    return Path(m.get("path") or m["label"]).name


def split_modules(report: dict[str, Any]) -> list[tuple[str, list[dict[str, Any]], list[dict[str, Any]]]]:
    """``[(device, shown, hidden)]``: per device model (times on two devices do
    not compare), its modules slowest first, those under ``min_share`` of that
    device's slowest module hidden (jax's helper jits, a seed or a convert, must
    not bury the train step)."""
    order = [d["name"] for d in report.get("devices", [])]
    by_dev: dict[str, list[dict[str, Any]]] = {}
    for m in report["modules"]:
        by_dev.setdefault(m.get("device") or report["device"], []).append(m)
    share = report.get("min_share", 0.0) or 0.0
    out = []
    for dev in sorted(by_dev, key=lambda d: order.index(d) if d in order else len(order)):
        mods = sorted(by_dev[dev], key=lambda m: (-m["time_s"], m["label"]))
        threshold = share * mods[0]["time_s"]
        shown = [m for m in mods if threshold <= 0 or m["time_s"] >= threshold]
        out.append((dev, shown, mods[len(shown):]))
    return out


def _module_row(m: dict[str, Any], slowest: float) -> list[str]:
    cats = m["categories"]
    top = max(cats.items(), key=lambda kv: kv[1]["headroom_s"])[0] if cats else "-"
    o = m["opportunities"]
    return [m.get("module", ""), m.get("module_key", m["label"]), m.get("stage", ""), _file(m), str(m["kernels"]), fmt_seconds(m["time_s"]), f"{100 * m['time_s'] / slowest:.0f}%" if slowest else "-",
            fmt_seconds(m["headroom_s"]), f"{100 * m['headroom_s'] / m['time_s']:.0f}%" if m["time_s"] else "-", top,
            fmt_seconds(o.get("time_saved_s_legal", 0.0)), fmt_bytes(o["bytes_saved_legal"]), str(o["legal"]),
            _quantization_headroom(m)]


def _quantization_headroom(m: dict[str, Any]) -> str:
    """``fmt_seconds (share of the module)``; "-" where the device has no fp8 peak."""
    q = m.get("quantization_headroom_s")
    if q is None:
        return "-"
    return f"{fmt_seconds(q)} ({100 * q / m['time_s']:.0f}%)" if m["time_s"] else fmt_seconds(q)


MODULE_COLUMNS = ["module", "id", "stage", "file", "kernels", "predicted time", "of slowest", "headroom",
                  "headroom %", "most headroom in", "legal fusion time saved", "legal fusion bytes saved",
                  "legal opportunities", "quantization headroom"]
OPP_COLUMNS = ["signature", "kind", "pattern", "count", "legal", "modules", "time saved", "bytes saved", "example"]
PATTERN_COLUMNS = ["pattern", "edges", "modules", "time saved", "bytes saved"]
COMM_COLUMNS = ["module", "stage", "mesh", "collectives (kind: n)", "bytes/device", "bytes per axis",
                "comm time", "exposed", "peak memory/device"]


def _comm_rows(report: dict[str, Any]) -> list[list[str]]:
    """One row per sharded module (``scan.communication_summary``)."""
    rows = []
    for m in sorted(report["modules"], key=lambda m: (m.get("module_key", m["label"]), m.get("stage", ""))):
        c = m.get("collectives")
        if not c:
            continue
        rows.append([m.get("module_key", m["label"]), m.get("stage", ""), c["mesh"],
                     ", ".join(f"{k}: {n}" for k, n in c["counts"].items()),
                     fmt_bytes(sum(c["bytes"].values())),
                     ", ".join(f"{k}: {fmt_bytes(b)}" for k, b in c["bytes_by_axis"].items()),
                     f"{fmt_seconds(c['comm_s'])} ({c['target']})", f"{c['exposed_fraction']:.0%}",
                     fmt_bytes(c["peak_bytes"]) if c.get("peak_bytes") is not None else "-"])
    return rows


def _comm_note() -> str:
    return ("Collectives as XLA spells them (an async pair counted once, by its start); bytes are payload per "
            "device; time on the target's NVLink, exposed = not hidden behind compute by the module's schedule "
            "(`hlo collectives FILE` for the full inventory).")


def _opp_rows(report: dict[str, Any], n: int = 25) -> list[list[str]]:
    """Most predicted time saved first (bytes break ties): bytes a kernel does
    not move are worth what they cost in time, and some cost nothing."""
    groups = sorted(report["top_opportunities"], key=lambda g: (-g["time_saved_s"], -g["bytes_saved"]))
    return [[g["signature"], g["kind"], g["pattern"] or "", str(g["count"]), str(g["legal"]), str(g["modules"]),
             fmt_seconds(g["time_saved_s"]), fmt_bytes(g["bytes_saved"]), (g["examples"] or [""])[0]]
            for g in groups[:n]]


def _pattern_rows(report: dict[str, Any]) -> list[list[str]]:
    return [[name, str(p["count"]), str(p["modules"]), fmt_seconds(p["time_saved_s"]), fmt_bytes(p["bytes_saved"])]
            for name, p in sorted(report["patterns"].items(), key=lambda kv: (-kv[1]["time_saved_s"], -kv[1]["bytes_saved"]))]


def device_lines(report: dict[str, Any]) -> list[str]:
    """One sentence per device model used: which files, why, and its roofs."""
    out = []
    for d in report.get("devices", []):
        whys = "; ".join(f"{w['reason'] or 'as asked'} ({w['files']} files)" for w in d["why"])
        roofs = ", ".join([f"{k} {fmt_rate(v, 'B/s')}" for k, v in d["bandwidth"].items()]
                          + [f"{k} {fmt_rate(v, 'FLOP/s')}" for k, v in d["peak_flops"].items()])
        out.append(f"{d['name']} for {d['files']} files: {whys}. Roofs: {roofs} ({d['source']}).")
    return out


def _md_table(cols: list[str], rows: list[list[str]]) -> str:
    esc = [[md_escape(c) for c in r] for r in rows]  # names come from the scanned folder: text, never markup
    return "\n".join(["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)] + ["| " + " | ".join(r) + " |" for r in esc])


def _hidden_note(hidden: list[dict[str, Any]], report: dict[str, Any]) -> str:
    total = sum(m["time_s"] for m in hidden)
    return (f"{len(hidden)} modules under {100 * report.get('min_share', 0):g}% of the slowest one's predicted "
            f"time ({fmt_seconds(total)} together) are hidden")


def markdown(report: dict[str, Any]) -> str:
    n_err = len(report["errors"])
    lines = [
        f"# Fusion analysis: {md_escape(report['source'])}",
        "",
        f"{report['modules_scanned']} modules scanned ({report['cached']} from cache), "
        + (f"[{n_err} errors](#errors)" if n_err else "0 errors")
        + f"; {report['seconds']:.1f} s on {report['jobs']} workers ({report['engine']}).",
        "",
        "Device model" + (" (from each file's stage; `--device` overrides)" if report.get("device_requested") == "auto"
                          else " (`--device`)") + ":",
        "",
        *[f"- {md_escape(x)}" for x in device_lines(report)],
        "",
    ]
    if report["errors"]:
        lines += ["## Errors", "",
                  _md_table(["file", "error"], [[e["file"], (e["error"].splitlines() or [""])[0]] for e in report["errors"]])]
        for e in report["errors"]:
            lines += ["", f"{md_code(e['file'])}:", "", md_block(e["error"])]
        lines.append("")
    lines += ["## Headroom per module, slowest first (predicted time)", ""]
    groups = split_modules(report)
    for dev, shown, hidden in groups:
        if len(groups) > 1:
            lines += [f"### On {md_escape(dev)}", ""]
        lines += [_md_table(MODULE_COLUMNS, [_module_row(m, shown[0]["time_s"]) for m in shown]), ""]
        if hidden:
            lines += [_hidden_note(hidden, report) + ": scan with `--min-share 0` to list them (report.json has all).", ""]
    lines += [
        "## Top opportunities across the corpus (most predicted time saved first)",
        "",
        _md_table(OPP_COLUMNS, _opp_rows(report)),
        "",
        "## Known patterns (legal producer-consumer and sibling edges)",
        "",
        _md_table(PATTERN_COLUMNS, _pattern_rows(report)),
    ]
    comm = _comm_rows(report)
    if comm:
        lines += ["", "## Communication (sharded modules)", "", _comm_note(), "", _md_table(COMM_COLUMNS, comm)]
    if report.get("skipped"):
        lines += ["", "## Skipped (not read)", "", _md_table(["file", "reason"], [[x["file"], x["reason"]] for x in report["skipped"]])]
    return "\n".join(lines) + "\n"


def _points(report: dict[str, Any], device: str) -> list[tuple[float, float, str, str]]:
    """``(intensity, flop/s, category, hover title)`` of the kernels analysed on ``device``."""
    out = []
    for m in report["modules"]:
        if (m.get("device") or report["device"]) != device:
            continue
        for p in m["points"]:
            if p[0] <= 0 or p[1] <= 0:
                continue
            kernel, t = (p[4], p[5]) if len(p) >= 6 else ("?", 0.0)
            out.append((p[0], p[1], p[2], f"{kernel} in {m['label']} [{_file(m)}]: {p[2]}, {p[3]}-bound, "
                                          f"{fmt_seconds(t)}; {p[0]:.3g} flop/B, {fmt_rate(p[1], 'FLOP/s')}"))
    return out


def scatter_svg(report: dict[str, Any], device: dict[str, Any] | None = None, width: int = 760,
                height: int = 440) -> str:
    """Kernels as points: arithmetic intensity (flop/byte) vs attained flop/s at
    the roofline prediction, log-log, coloured by category, under the device's
    roofs: a diagonal per bandwidth (bytes/s x flop/byte) and a flat line per
    compute peak. Each point's title names the kernel, its module and file."""
    device = device or (report.get("devices") or [{"name": report["device"], "bandwidth": {}, "peak_flops": {}}])[0]
    pts = _points(report, device["name"])
    bws = {k: v for k, v in device.get("bandwidth", {}).items() if v > 0}
    peaks = {k: v for k, v in device.get("peak_flops", {}).items() if v > 0}
    pad_l, pad_b, pad_t, pad_r = 60, 40, 20, 175
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" role="img" aria-label="roofline {html.escape(device["name"])}">',
           f'<rect width="{width}" height="{height}" fill="white"/>']
    mem = bws.get("memory") or (max(bws.values()) if bws else 0.0)
    top = max(peaks.values()) if peaks else 0.0
    xs = [math.log10(p[0]) for p in pts]
    ys = [math.log10(p[1]) for p in pts]
    xr, yr = list(xs), list(ys)
    if mem and top:
        for b in bws.values():
            xr.append(math.log10(top / b))
        xr.append(math.log10(min(peaks.values()) / max(bws.values())))
        yr += [math.log10(v) for v in peaks.values()]
    if not xr:
        out.append(f'<text x="{width / 2}" y="{height / 2}" text-anchor="middle">no kernels</text></svg>')
        return "\n".join(out)
    x0, x1 = math.floor(min(xr)), math.ceil(max(xr))
    x1 += 1 if x1 == x0 else 0
    y0, y1 = math.floor(min(yr)), math.ceil(max(yr) + 0.05)
    y1 += 1 if y1 == y0 else 0
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
    if mem and top:
        fast = max(bws.values())
        for i, (name, b) in enumerate(bws.items()):  # y = log b + x, from the floor (or left edge) to the top peak
            lb = math.log10(b)
            a, e = max(x0, y0 - lb), min(x1, math.log10(top) - lb)
            if a < e:
                xa, ya, xe, ye = sx(a), sy(lb + a), sx(e), sy(lb + e)
                angle = math.degrees(math.atan2(ye - ya, xe - xa))
                xm, ym = xa + 0.6 * (xe - xa), ya + 0.6 * (ye - ya)  # the label along the line, short of the ridge
                out.append(f'<line class="roof roof-memory" x1="{xa:.1f}" y1="{ya:.1f}" x2="{xe:.1f}" y2="{ye:.1f}" '
                           f'stroke="#222" stroke-width="1.5"' + (' stroke-dasharray="5 3"' if b != mem else "")
                           + f'><title>{html.escape(name)} bandwidth {fmt_rate(b, "B/s")}</title></line>'
                           f'<text class="roof-label" x="{xm:.1f}" y="{ym:.1f}" dy="-4" font-size="11" '
                           f'text-anchor="middle" transform="rotate({angle:.1f} {xm:.1f} {ym:.1f})">'
                           f'{html.escape(name)} {fmt_rate(b, "B/s")}</text>')
        last_label = -1e9
        for name, v in sorted(peaks.items(), key=lambda kv: -kv[1]):  # flat, from the fastest diagonal to the edge
            lv = math.log10(v)
            a = max(x0, lv - math.log10(fast))
            label_y = sy(lv) - 4 if sy(lv) - 4 - last_label >= 12 else sy(lv) + 12  # close peaks: label below
            last_label = label_y
            if a < x1:
                out.append(f'<line class="roof roof-compute" x1="{sx(a):.1f}" y1="{sy(lv):.1f}" x2="{sx(x1):.1f}" '
                           f'y2="{sy(lv):.1f}" stroke="#222" stroke-width="1.5"><title>{html.escape(name)} peak '
                           f'{fmt_rate(v, "FLOP/s")}</title></line>'
                           f'<text class="roof-label" x="{sx(x1) - 4:.1f}" y="{label_y:.1f}" font-size="11" '
                           f'text-anchor="end">{html.escape(name)} {fmt_rate(v, "FLOP/s")}</text>')
    step = max(1, len(pts) // 4000)  # keep the page light: at most ~4000 dots
    for (x, y, cat, title), lx, ly in list(zip(pts, xs, ys))[::step]:
        out.append(f'<circle class="k" cx="{sx(lx):.1f}" cy="{sy(ly):.1f}" r="3" fill="{CATEGORY_COLORS.get(cat, "#000")}" '
                   f'fill-opacity="0.6"><title>{html.escape(title)}</title></circle>')
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


def _html_table(cols: list[str], rows: list[list[str]], row_attrs: list[str] | None = None, table_id: str = "") -> str:
    head = "".join(f"<th>{html.escape(c)}</th>" for c in cols)
    attrs = row_attrs or [""] * len(rows)
    body = "".join(f"<tr{a}>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>" for r, a in zip(rows, attrs))
    ident = f' id="{table_id}"' if table_id else ""
    return f"<table{ident}><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _html_modules(report: dict[str, Any]) -> str:
    groups = split_modules(report)
    out = []
    for dev, shown, hidden in groups:
        slowest = shown[0]["time_s"]
        ident = html.escape(dev).replace(" ", "_")

        def table(mods: list[dict[str, Any]], table_id: str) -> str:
            return _html_table(MODULE_COLUMNS, [_module_row(m, slowest) for m in mods],
                               [f' data-time-s="{m["time_s"]!r}" data-module="{html.escape(m["label"])}"' for m in mods],
                               table_id)

        if len(groups) > 1:
            out.append(f"<h3>On {html.escape(dev)}</h3>")
        out.append(table(shown, f"modules-{ident}"))
        if hidden:
            out.append(f'<details class="hidden-modules"><summary>{html.escape(_hidden_note(hidden, report))}: click '
                       f'to show them (or scan with <code>--min-share 0</code>)</summary>\n'
                       f'{table(hidden, f"modules-{ident}-hidden")}</details>')
    return "\n".join(out)


def _html_comm(report: dict[str, Any]) -> str:
    rows = _comm_rows(report)
    if not rows:
        return ""
    return (f'<h2 id="communication">Communication (sharded modules)</h2>\n<p>{html.escape(_comm_note())}</p>\n'
            + _html_table(COMM_COLUMNS, rows))


def html_page(report: dict[str, Any]) -> str:
    n_err = len(report["errors"])
    errors = (f'<h2 id="errors">Errors</h2>\n'
              + _html_table(["file", "error"], [[e["file"], e["error"]] for e in report["errors"]])) if n_err else ""
    err_count = f'<a href="#errors">{n_err} errors</a>' if n_err else "0 errors"
    how = ("from each file's stage; <code>--device</code> overrides" if report.get("device_requested") == "auto"
           else "<code>--device</code>")
    devs = "".join(f"<li>{html.escape(x)}</li>" for x in device_lines(report))
    plots = "\n".join(f'<h3>{html.escape(d["name"])}</h3>\n{scatter_svg(report, d)}' for d in report.get("devices", [])) \
        or scatter_svg(report)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>Fusion analysis: {html.escape(report['source'])}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2em; color: #222; }}
table {{ border-collapse: collapse; margin: 1em 0; font-size: 13px; }}
th, td {{ border: 1px solid #ccc; padding: 3px 8px; text-align: left; vertical-align: top; }}
th {{ background: #f0f0f0; }}
td {{ white-space: pre-wrap; font-family: ui-monospace, monospace; }}
circle.k:hover {{ stroke: #000; stroke-width: 2; fill-opacity: 1; }}
details summary {{ cursor: pointer; color: #036; }}
</style></head><body>
<h1>Fusion analysis: {html.escape(report['source'])}</h1>
<p>{report['modules_scanned']} modules scanned ({report['cached']} from cache), {err_count};
{report['seconds']:.1f} s on {report['jobs']} workers ({html.escape(report['engine'])}).</p>
<p id="device">Device model ({how}):</p>
<ul>{devs}</ul>
{errors}
<h2>Headroom per module, slowest first (predicted time)</h2>
{_html_modules(report)}
<h2>Roofline: kernels (hover a point: kernel, module, file)</h2>
{plots}
<h2>Top opportunities across the corpus (most predicted time saved first)</h2>
{_html_table(OPP_COLUMNS, _opp_rows(report))}
<h2>Known patterns</h2>
{_html_table(PATTERN_COLUMNS, _pattern_rows(report))}
{_html_comm(report)}
{_html_skipped(report)}
</body></html>
"""
