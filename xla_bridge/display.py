"""How measurements read: what a speedup's p10-p90 range says (faster, slower or within
noise) and clean names for XLA's cost-analysis keys. Units and tables are
``hlo_analysis.units``."""

from __future__ import annotations

import re


NOISE = "within noise"


def within_noise(p10: float | None, p90: float | None) -> bool:
    """The p10-p90 range of a speedup spans 1.0: not a result (False when there is none)."""
    return p10 is not None and p90 is not None and p10 <= 1.0 <= p90


def speedup_verdict(p10: float | None, p90: float | None) -> str:
    """What a speedup's p10-p90 range says: faster, slower, or within noise (the
    range spans 1.0, so this machine cannot tell the two apart)."""
    if p10 is None or p90 is None:
        return "No speedup: only A was timed."
    if p10 > 1.0:
        return "Faster than stock: the whole p10-p90 range is above 1.0."
    if not within_noise(p10, p90):
        return "Slower than stock: the whole p10-p90 range is below 1.0."
    return "Within noise: the p10-p90 range spans 1.0."


def speedup_label(speedup: float | None, p10: float | None, p90: float | None) -> str:
    """``1.23x (p10-p90 1.10-1.35x)``, with ``within noise`` when the range spans 1.0."""
    if speedup is None:
        return "-"
    text = f"{speedup:.3f}x"
    if p10 is not None and p90 is not None:
        text += f" (p10-p90 {p10:.3f}-{p90:.3f}x)"
        if within_noise(p10, p90):
            text += f", {NOISE}"
    return text


#: XLA's cost-analysis totals -> readable names.  XLA adds per-operand and
#: per-output keys (``bytes accessed0{}``, ``bytes accessedout{}``,
#: ``utilization4{}``); ``clean_cost`` groups those.
_COST_NAMES = {"flops": "flops", "transcendentals": "transcendentals", "bytes accessed": "bytes_accessed",
               "optimal_seconds": "optimal_seconds", "utilization": "utilization"}
_PER_OPERAND = re.compile(r"^(bytes accessed|utilization)\s*(out|\d+)\s*\{([\d,\s]*)\}$")


def _name(key: str) -> str:
    return _COST_NAMES.get(key, re.sub(r"[^0-9a-zA-Z]+", "_", key).strip("_").lower())


def clean_cost(cost: dict | None) -> dict:
    """XLA's cost analysis with readable keys: the module totals (``bytes accessed``
    -> ``bytes_accessed``), then ``operands`` (operand number -> its
    ``bytes_accessed`` and ``utilization``; ``"0{1}"`` for a tuple operand's
    element) and ``outputs`` (``"root"`` for the whole output, else its shape index)."""
    if not cost:
        return {}
    totals: dict = {}
    operands: dict[str, dict] = {}
    outputs: dict[str, dict] = {}
    for key, value in cost.items():
        m = _PER_OPERAND.match(key.strip())
        if not m:
            totals[_name(key)] = value
            continue
        what, which, index = _name(m.group(1)), m.group(2), m.group(3).replace(" ", "")
        if which == "out":
            outputs.setdefault(index or "root", {})[what] = value
        else:
            operands.setdefault(which + (f"{{{index}}}" if index else ""), {})[what] = value
    out = dict(sorted(totals.items()))
    if operands:
        out["operands"] = dict(sorted(operands.items(), key=lambda kv: (int(re.match(r"\d+", kv[0]).group()), kv[0])))
    if outputs:
        out["outputs"] = outputs
    return out
