"""How numbers read, in one place: times and sizes with units that scale, JSON without
non-finite floats, and the small HTML tables notebooks show (``_repr_html_``)."""

from __future__ import annotations

import html
import math
from typing import Iterable, Sequence


def fmt_seconds(s: float | None) -> str:
    """A duration with a unit that fits it: ``614 ps``, ``12.3 ns``, ``4.56 us``,
    ``7.89 ms``, ``1.23 s`` (three significant digits)."""
    if s is None or not math.isfinite(s):
        return "-"
    a = abs(s)
    for scale, unit in ((1.0, "s"), (1e-3, "ms"), (1e-6, "us"), (1e-9, "ns")):
        if a >= scale:
            return f"{s / scale:.3g} {unit}"
    return "0 s" if a == 0 else f"{s / 1e-12:.3g} ps"


def fmt_bytes(b: float) -> str:
    """A size in decimal units, three significant digits: ``315 KB``, ``1.32 MB``
    (the cost model's and XLA's ``bytes accessed`` are counts, not memory pages)."""
    for unit in ("B", "KB", "MB", "GB"):
        if abs(b) < 1000:
            return f"{b:.3g} {unit}"
        b /= 1000
    return f"{b:.3g} TB"


def fmt_us(us: float | None) -> str:
    """A time given in microseconds, as ``fmt_seconds`` writes it."""
    return fmt_seconds(None if us is None else us * 1e-6)


def finite(x):
    """``x`` with non-finite floats as None, so ``json.dumps`` writes valid JSON."""
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: finite(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [finite(v) for v in x]
    return x


def html_table(title: str, header: Sequence[str], rows: Iterable[Sequence[object]], notes: Sequence[str] = ()) -> str:
    """A small HTML table (a notebook's ``_repr_html_``): the title in bold, the
    rows, then one paragraph per note; every cell escaped."""
    esc = html.escape
    head = "".join(f"<th>{esc(str(h))}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{esc(str(c))}</td>" for c in r) + "</tr>" for r in rows)
    foot = "".join(f"<p>{esc(n)}</p>" for n in notes)
    return f"<div><b>{esc(title)}</b><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>{foot}</div>"
