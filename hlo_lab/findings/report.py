"""``findings.md``: the rules as statements, their training evidence and their
held-out figures, from the data of ``findings.json``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from passes.fusion.rules import FUSE, base_name


def _x(v: float | None) -> str:
    return f"{v:.3f}x" if v is not None else "-"


def _range(t: dict[str, Any]) -> str:
    if t.get("error"):
        return f"error: {t['error']}"
    if t.get("xla") is not None:  # predicted: ours, then XLA's GPU model's
        return f"{_x(t['speedup'])} (XLA's model {_x(t['xla'])})"
    if t["p10"] == t["p90"]:  # predicted by our roofline alone (hlo tune's figures)
        return _x(t["speedup"])
    return f"{_x(t['speedup'])} ({_x(t['p10'])}-{_x(t['p90'])})"


def _lever(field: str, value: Any) -> str:
    """A lever as the table states it; an edge class: ``apart fusion(exp)->fusion(multiply) in softmax``."""
    if field != FUSE:
        return f"{field}={value}"
    producer, consumer, pattern, fuse = value
    return f"{'fuse' if fuse else 'apart'} {producer}->{consumer}" + (f" in {pattern}" if pattern else "")


def _how(data: dict[str, Any]) -> str:
    """How the figures were made: measured here, or predicted for a GPU."""
    s = data["settings"]
    if data.get("target"):
        return (f"XLA:GPU {data['target']}, predicted: compiled without a GPU (gpu-best's passes on top of stock's "
                f"fusions), priced by our roofline and, on the held-out modules, by XLA's own GPU model beside it; "
                f"outputs checked on XLA:CPU where the module runs here")
    return f"XLA:CPU, measured ({s['final_reps']} repetitions per timing)"


def markdown(data: dict[str, Any], path: Path) -> str:
    s = data["settings"]
    base = base_name(data.get("target"))
    lines = [
        "# Findings: rules from hlo tune's wins, validated on held-out families",
        "",
        f"{_how(data)}. Derived from {', '.join(s['train_families'])} "
        f"({len(data['train'])} modules, hlo tune budget {s['budget']}); validated on "
        f"{', '.join(s['held_out_families'])} ({len(data['held_out_modules'])} modules). "
        f"A rule is a pass: `--passes rule:{path}#NAME`; every rule that held: `--passes rule:{path}`.",
        "",
        "## Training: what hlo tune won",
        "",
        f"| module | tuned vs stock | {base} vs stock | beat {base} | levers | patterns |",
        "|---|---|---|---|---|---|",
    ]
    for e in data["train"]:
        if e["error"]:
            lines.append(f"| {e['name']} | error: {e['error']} | | | | |")
            continue
        levers = ", ".join(_lever(f, v) for f, v in e["levers"]) or f"({base}'s)"
        lines.append(f"| {e['name']} | {_range(e['tuned'])} | "
                     f"{_range(e['best'])} | {'yes' if e['won'] else 'no'} | {levers} | "
                     f"{', '.join(e['labels']) or '-'} |")
    lines += ["", "## Rules", ""]
    if not data["rules"]:
        lines.append(f"No lever was shared by {s['min_support']} or more winners: no rule.")
    for r in data["rules"]:
        verdict = "holds out" if r["held_out"] else "does not hold out"
        lines += [
            f"### `{r['rule']['name']}`: {verdict}",
            "",
            r["statement"],
            "",
            f"Derived from: {', '.join(r['support'])} (precision {r['precision']:.2f}, recall {r['recall']:.2f}). "
            f"Held out: geomean gain over {base} {_x(r['geomean_gain_over_best'])}"
            + (f" (XLA's model: {_x(r.get('xla_geomean_gain_over_best'))})" if data.get("target") else "")
            + f" on {len(r['trials'])} module(s); "
            f"hurts: {', '.join(r['hurts']) or 'none'}; does not apply to (condition false, or no edge of its class): "
            f"{', '.join(r['not_applicable']) or 'none'}.",
            "",
        ]
        if r["trials"]:
            lines += [f"| held-out module | with the rule vs stock | {base} vs stock | gain | verdict | outputs |",
                      "|---|---|---|---|---|---|"]
            lines += [f"| {t['module']} | {_range(t['rule'])} | {_range(t['best'])} | {_x(t['gain'])} | {t['verdict']} | "
                      f"{t['rule'].get('outputs') or '-'} |" for t in r["trials"]]
            lines.append("")
    c = data["combined"]
    lines += [
        "## Every rule that held, together, on the held-out modules",
        "",
        f"Rules: {', '.join(c['rules']) or 'none'}. Geomean vs stock: {_x(c['held_out_geomean'])} "
        f"({base} alone: {_x(c['best_geomean'])})"
        + (f"; by XLA's model {_x(c.get('xla_held_out_geomean'))} ({base} alone: {_x(c.get('xla_best_geomean'))})"
           if data.get("target") else "") + ".",
        "",
        f"| module | findings vs stock | {base} vs stock | rules applied |",
        "|---|---|---|---|",
    ]
    lines += [f"| {m['module']} | {_range(m['findings'])} | {_range(m['best'])} | {'yes' if m['decisions_changed'] else 'no'} |"
              for m in c["modules"]]
    return "\n".join(lines) + "\n"
