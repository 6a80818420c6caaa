"""``findings.md``: the rules as statements, their training evidence and their
held-out figures, from the data of ``findings.json``."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def _x(v: float | None) -> str:
    return f"{v:.3f}x" if v is not None else "-"


def _range(t: dict[str, Any]) -> str:
    if t.get("error"):
        return f"error: {t['error']}"
    return f"{_x(t['speedup'])} ({_x(t['p10'])}-{_x(t['p90'])})"


def markdown(data: dict[str, Any], path: Path) -> str:
    s = data["settings"]
    lines = [
        "# Findings: rules from hlo tune's wins, validated on held-out families",
        "",
        f"XLA:CPU, measured. Derived from {', '.join(s['train_families'])} "
        f"({len(data['train'])} modules, hlo tune budget {s['budget']}); validated on "
        f"{', '.join(s['held_out_families'])} ({len(data['held_out_modules'])} modules, "
        f"{s['final_reps']} repetitions per timing). A rule is a pass: `--passes rule:{path}#NAME`; "
        f"every rule that held: `--passes rule:{path}`.",
        "",
        "## Training: what hlo tune won",
        "",
        "| module | tuned vs stock | BEST vs stock | beat BEST | levers | patterns |",
        "|---|---|---|---|---|---|",
    ]
    for e in data["train"]:
        if e["error"]:
            lines.append(f"| {e['name']} | error: {e['error']} | | | | |")
            continue
        levers = ", ".join(f"{f}={v}" for f, v in e["levers"]) or "(BEST's)"
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
            f"Held out: geomean gain over BEST {_x(r['geomean_gain_over_best'])} on {len(r['trials'])} module(s); "
            f"hurts: {', '.join(r['hurts']) or 'none'}; condition false on: {', '.join(r['not_applicable']) or 'none'}.",
            "",
        ]
        if r["trials"]:
            lines += ["| held-out module | with the rule vs stock | BEST vs stock | gain | verdict |", "|---|---|---|---|---|"]
            lines += [f"| {t['module']} | {_range(t['rule'])} | {_range(t['best'])} | {_x(t['gain'])} | {t['verdict']} |"
                      for t in r["trials"]]
            lines.append("")
    c = data["combined"]
    lines += [
        "## Every rule that held, together, on the held-out modules",
        "",
        f"Rules: {', '.join(c['rules']) or 'none'}. Geomean vs stock: {_x(c['held_out_geomean'])} "
        f"(BEST alone: {_x(c['best_geomean'])}).",
        "",
        "| module | findings vs stock | BEST vs stock | rules applied |",
        "|---|---|---|---|",
    ]
    lines += [f"| {m['module']} | {_range(m['findings'])} | {_range(m['best'])} | {'yes' if m['decisions_changed'] else 'no'} |"
              for m in c["modules"]]
    return "\n".join(lines) + "\n"
