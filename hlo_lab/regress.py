"""``hlo regress``: what two XLA versions (or one with a pass disabled) decide on the
same pre-optimization modules, region by region, and what it costs.

For each module, each side (``sides.Side``: a version and extra flags)
compiles the stamped module (``hlo_tools.written.stamp_names``) for XLA:CPU, which is
run and timed here, and for a GPU without one (deviceless XLA:GPU).  The two
optimized modules of a backend are matched region by region
(``regions.match_regions``: kernels paired by the original instructions they
cover) and priced by the roofline on that backend's device (the measured host
for XLA:CPU, the target GPU for XLA:GPU).  Outputs of the two sides on the same
inputs are compared.  Modules are ranked by their largest change (predicted or
measured); each one that moved more than the threshold is explained by the
regions whose fusion changed, with their bytes, flops and predicted time.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import html
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from corpus import bundled
from corpus.dump import from_dump_dir
from hlo_analysis import devices
from hlo_lab.md import md_code, md_escape
from hlo_analysis.regions import Region, RegionDiff, match_regions
from hlo_tools.parser import parse
from hlo_tools.written import WrittenNames, stamp_names
from hlo_analysis.units import fmt_seconds, fmt_us
from xla_bridge.proto import read_text
from xla_bridge.results import record
from xla_bridge.runner import compare_outputs
from xla_bridge.sides import Side, SideRun, profile, time_sides

#: Parameters larger than this are not run by default (a real-shape module's
#: weights: gigabytes of inputs on a laptop); such modules are compiled and priced only.
MAX_RUN_BYTES = 256 << 20


@dataclass(frozen=True)
class Source:
    """One pre-optimization module to compare: its name, text, and whether to run it."""

    name: str
    text: str
    runnable: bool = True
    note: str = ""


def sources(path: str | None, only: str | None = None) -> list[Source]:
    """The modules of ``path``: the bundled corpus (None, "bundled", or a folder
    with ``manifest.json``), an XLA dump folder (each module's
    ``before_optimizations``) or one module file; ``only``: an fnmatch pattern."""
    if path in (None, "bundled") or (Path(path).is_dir() and (Path(path) / "manifest.json").exists()):
        root = None if path in (None, "bundled") else path
        return [Source(e.name, e.text("before_optimizations"), bool(e.runnable),
                       "" if e.runnable else (e.meta.get("run_note") or "not runnable (manifest)"))
                for e in bundled.load(only, root=root)]
    p = Path(path)
    if p.is_dir():
        out = []
        for m in from_dump_dir(p):
            name = f"module_{m.module_id:04d}.{m.name}"
            if m.before_optimizations is None or (only and not fnmatch.fnmatch(name, only)):
                continue
            text = m.text("before_optimizations")
            parse(text, source=str(m.before_optimizations))  # a bad file fails here, naming it, before any compile
            out.append(Source(name, text))
        if not out:
            raise FileNotFoundError(f"{path}: no before_optimizations module (an XLA dump folder, the corpus, "
                                    "or a module file)")
        return out
    text = read_text(p)
    parse(text, source=str(p))  # a bad file fails here, naming it, before any compile
    return [Source(p.name, text)]


def _rel(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None or not a else b / a - 1.0


@dataclass
class ModuleChange:
    """One module through both sides."""

    name: str
    a: SideRun
    b: SideRun
    cpu: RegionDiff | None
    gpu: RegionDiff | None
    outputs: str
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def measured_a_us(self) -> float | None:
        return self.a.bench.a.median_us if self.a.bench else None

    @property
    def measured_b_us(self) -> float | None:
        return self.b.bench.a.median_us if self.b.bench else None

    @property
    def measured_change(self) -> float | None:
        return _rel(self.measured_a_us, self.measured_b_us)

    @property
    def measured_noise(self) -> bool:
        """The two p10-p90 ranges overlap: the measured change is within noise."""
        if not (self.a.bench and self.b.bench):
            return True
        ta, tb = self.a.bench.a, self.b.bench.a
        return ta.p10_us <= tb.p90_us and tb.p10_us <= ta.p90_us

    @property
    def cpu_change(self) -> float | None:
        return _rel(self.cpu.time_a, self.cpu.time_b) if self.cpu else None

    @property
    def gpu_change(self) -> float | None:
        return _rel(self.gpu.time_a, self.gpu.time_b) if self.gpu else None

    @property
    def score(self) -> float:
        """The largest relative change, predicted or measured (what ranks modules)."""
        return max((abs(x) for x in (self.cpu_change, self.gpu_change, self.measured_change) if x is not None),
                   default=0.0)

    def moved(self, threshold: float) -> dict[str, float]:
        """Which figures moved more than ``threshold`` (a fraction): name -> change.
        A measured change within noise (the two p10-p90 ranges overlap) is not a move."""
        figures = {"predicted cpu": self.cpu_change, "measured cpu": None if self.measured_noise else self.measured_change,
                   "predicted gpu": self.gpu_change}
        return {k: v for k, v in figures.items() if v is not None and abs(v) > threshold}

    def as_dict(self) -> dict:
        def diff(d: RegionDiff | None) -> dict | None:
            if d is None:
                return None
            return {"device": d.device, "kernels_a": d.kernels_a, "kernels_b": d.kernels_b, "time_a_s": d.time_a,
                    "time_b_s": d.time_b, "bytes_a": sum(r.bytes_a for r in d.regions),
                    "bytes_b": sum(r.bytes_b for r in d.regions), "flops_a": sum(r.flops_a for r in d.regions),
                    "flops_b": sum(r.flops_b for r in d.regions), "counts": d.counts(),
                    "changed": [r.as_dict() for r in d.changed()]}

        def side(r: SideRun) -> dict:
            return {"side": r.side.label, "jax": r.jax, "jaxlib": r.jaxlib, "cpu_error": r.cpu_error,
                    "gpu_error": r.gpu_error, "compile_seconds": r.compile_seconds,
                    "measured": r.bench.as_dict()["a"] if r.bench else None}

        return {"module": self.name, "a": side(self.a), "b": side(self.b), "cpu": diff(self.cpu),
                "gpu": diff(self.gpu), "outputs": self.outputs, "predicted_cpu_change": self.cpu_change,
                "predicted_gpu_change": self.gpu_change, "measured_change": self.measured_change,
                "measured_within_noise": self.measured_noise, "score": self.score, "notes": self.notes,
                "seconds": self.seconds}


def compare_module(src: Source, a: Side, b: Side, *, target: str | None = "h100", measure: bool = True,
                   reps: int = 20, warmup: int = 3, host: devices.Device | None = None, cpu: bool = True) -> ModuleChange:
    """``src`` through both sides, matched region by region on each backend
    (XLA:CPU unless ``cpu`` is False; XLA:GPU for ``target`` unless it is None)."""
    t0 = time.perf_counter()
    original = parse(src.text, source=src.name)
    written = WrittenNames(original)
    text = stamp_names(original).to_text(tuple_sugar=False)
    run_it = measure and src.runnable and cpu
    notes = [] if run_it or not measure or not cpu else [f"not run: {src.note or 'not runnable'}"]
    hold = f"regress:{src.name}"
    ra, rb = (profile(text, s, cpu=cpu, target=target, measure=run_it, reps=reps, warmup=warmup, module=src.name, hold=hold)
              for s in (a, b))
    if run_it:
        ra, rb = time_sides([ra, rb], hold, reps=reps, module=src.name)
    cpu = gpu = None
    if ra.cpu_text and rb.cpu_text:
        host = host or devices.host()
        cpu = match_regions(parse(ra.cpu_text, source="A cpu"), parse(rb.cpu_text, source="B cpu"), host, written)
    if ra.gpu_text and rb.gpu_text:
        gpu = match_regions(parse(ra.gpu_text, source="A gpu"), parse(rb.gpu_text, source="B gpu"),
                            devices.load(target), written)
    for r, label in ((ra, "A"), (rb, "B")):
        for what, err in (("XLA:CPU", r.cpu_error), ("XLA:GPU", r.gpu_error), ("measuring", r.measure_note)):
            if err:
                notes.append(f"{label} {what}: {err}")
    outputs = "unchecked"
    if ra.outputs is not None and rb.outputs is not None:
        outputs = compare_outputs(ra.outputs, rb.outputs).verdict
    return ModuleChange(src.name, ra, rb, cpu, gpu, outputs, notes, time.perf_counter() - t0)


@dataclass
class RegressReport:
    """Every module through both sides, ranked by change."""

    a: Side
    b: Side
    target: str | None
    threshold: float
    modules: list[ModuleChange]
    command: str = ""

    def ranked(self) -> list[ModuleChange]:
        return sorted(self.modules, key=lambda m: (-m.score, m.name))

    def moved(self) -> list[ModuleChange]:
        return [m for m in self.ranked() if m.moved(self.threshold)]

    def noisy(self) -> list[ModuleChange]:
        """Modules not moved whose measured median moved more than the threshold
        within noise (the p10-p90 ranges overlap)."""
        return [m for m in self.ranked() if not m.moved(self.threshold) and m.measured_change is not None
                and abs(m.measured_change) > self.threshold]

    def as_dict(self) -> dict:
        return {"a": self.a.label, "b": self.b.label, "target": self.target, "threshold": self.threshold,
                "command": self.command, "modules": [m.as_dict() for m in self.ranked()]}

    # -- Markdown ---------------------------------------------------------------------------

    def markdown(self, regions: int = 6) -> str:
        lines = [f"# XLA regression report: A = jax {md_escape(self.a.label)}, B = jax {md_escape(self.b.label)}", ""]
        if self.command:
            lines += [f"Printed by {md_code(self.command)}.", ""]
        lines += [_LEGEND.format(target=self.target or "-", pct=f"{self.threshold:.0%}"), ""]
        lines += ["| module | CPU kernels A→B | predicted CPU | measured CPU | " + f"{self.target or 'GPU'} kernels A→B | "
                  f"predicted {self.target or 'GPU'} | outputs | changed regions (CPU/GPU) |",
                  "|---|---|---|---|---|---|---|---|"]
        for m in self.ranked():
            lines.append("| " + " | ".join([md_escape(m.name), _kernels(m.cpu), _pred(m.cpu, m.cpu_change),
                                              _measured(m), _kernels(m.gpu), _pred(m.gpu, m.gpu_change),
                                              m.outputs, f"{_nchanged(m.cpu)}/{_nchanged(m.gpu)}"]) + " |")
        moved = self.moved()
        lines += ["", f"## Modules that moved more than {self.threshold:.0%} ({len(moved)})", ""]
        if not moved:
            lines.append("None.")
        for m in moved:
            what = ", ".join(f"{k} {_pct(v)}" for k, v in m.moved(self.threshold).items())
            lines += [f"### {md_escape(m.name)}: {what}", ""]
            lines += _explain(m, regions)
        noisy = self.noisy()
        if noisy:
            lines += ["", f"## Measured changes over {self.threshold:.0%} within noise ({len(noisy)})", "",
                      "The two sides' p10-p90 ranges overlap: this machine cannot tell them apart. Each with the "
                      "XLA:CPU regions whose fusion changed (their predicted change), which would be the cause "
                      "if the change were real:", ""]
            lines += [f"- {md_escape(m.name)}: {_measured(m)}, p10-p90 {_spread(m.a)} vs {_spread(m.b)}; "
                      + _cpu_regions_line(m) for m in noisy]
        notes = [(m.name, n) for m in self.ranked() for n in m.notes]
        if notes:
            lines += ["", "## Notes", ""] + [f"- {md_escape(name)}: {md_escape(n)}" for name, n in notes]
        return "\n".join(lines) + "\n"

    # -- HTML -------------------------------------------------------------------------------

    def html(self, regions: int = 6) -> str:
        esc = html.escape
        out = ["<!doctype html><meta charset='utf-8'><title>XLA regression report</title>",
               "<style>body{font:14px sans-serif;margin:2em}table{border-collapse:collapse;margin:1em 0}"
               "td,th{border:1px solid #ccc;padding:2px 6px;text-align:right}td:first-child{text-align:left}"
               ".slower{color:#b00}.faster{color:#070}</style>",
               f"<h1>XLA regression report: A = jax {esc(self.a.label)}, B = jax {esc(self.b.label)}</h1>"]
        if self.command:
            out.append(f"<p>Printed by <code>{esc(self.command)}</code>.</p>")
        out.append(f"<p>{esc(_LEGEND.format(target=self.target or '-', pct=f'{self.threshold:.0%}'))}</p>")
        head = ["module", "CPU kernels A→B", "predicted CPU", "measured CPU", "GPU kernels A→B", "predicted GPU",
                "outputs", "changed regions"]
        out.append("<table><tr>" + "".join(f"<th>{esc(h)}</th>" for h in head) + "</tr>")
        for m in self.ranked():
            cells = [m.name, _kernels(m.cpu), _pred(m.cpu, m.cpu_change), _measured(m), _kernels(m.gpu),
                     _pred(m.gpu, m.gpu_change), m.outputs, f"{_nchanged(m.cpu)}/{_nchanged(m.gpu)}"]
            cls = "slower" if m.score and max(x or 0 for x in (m.cpu_change, m.gpu_change, m.measured_change)) > 0 \
                else "faster"
            out.append(f"<tr class='{cls if m.moved(self.threshold) else ''}'>"
                       + "".join(f"<td>{esc(str(c))}</td>" for c in cells) + "</tr>")
        out.append("</table>")
        for m in self.moved():
            what = ", ".join(f"{k} {_pct(v)}" for k, v in m.moved(self.threshold).items())
            out.append(f"<h2>{esc(m.name)}: {esc(what)}</h2>")
            for backend, d in (("CPU", m.cpu), (self.target or "GPU", m.gpu)):
                if d is None or not d.changed():
                    continue
                out.append(f"<h3>{esc(backend)} ({esc(d.device)})</h3><table><tr>" + "".join(
                    f"<th>{h}</th>" for h in _REGION_HEAD) + "</tr>")
                for r in d.changed()[:regions]:
                    out.append("<tr>" + "".join(f"<td>{esc(str(c))}</td>" for c in _region_cells(r)) + "</tr>")
                out.append("</table>")
                rest = _rest(d, regions)
                if rest:
                    out.append(f"<p>{esc(rest)}</p>")
        for m in self.ranked():
            for n in m.notes:
                out.append(f"<p>{esc(m.name)}: {esc(n)}</p>")
        return "\n".join(out) + "\n"


_LEGEND = ("Per module: kernels of each side; predicted time (roofline: the measured host for XLA:CPU, "
           "{target} for XLA:GPU compiled without a GPU) A → B and its change; measured XLA:CPU median A → B "
           "(~: the p10-p90 ranges overlap); outputs of B against A on the same inputs; regions whose fusion "
           "changed. Modules are ranked by their largest change; each whose predicted or measured time moved more "
           "than {pct} (measured: outside noise) is explained by its changed regions, largest predicted change first.")
_REGION_HEAD = ("region", "change", "A kernels", "B kernels", "bytes A→B", "flops A→B", "predicted A→B", "Δ")


def _pct(x: float | None) -> str:
    return "-" if x is None or not math.isfinite(x) else f"{x:+.1%}"


def _kernels(d: RegionDiff | None) -> str:
    return "-" if d is None else f"{d.kernels_a}→{d.kernels_b}"


def _pred(d: RegionDiff | None, change: float | None) -> str:
    return "-" if d is None else f"{fmt_seconds(d.time_a)}→{fmt_seconds(d.time_b)} ({_pct(change)})"


def _measured(m: ModuleChange) -> str:
    if m.measured_a_us is None or m.measured_b_us is None:
        return "-"
    return (f"{fmt_us(m.measured_a_us)}→{fmt_us(m.measured_b_us)} ({_pct(m.measured_change)}"
            f"{'~' if m.measured_noise else ''})")


def _spread(r: SideRun) -> str:
    return "-" if r.bench is None else f"{fmt_us(r.bench.a.p10_us)}-{fmt_us(r.bench.a.p90_us)}"


def _cpu_regions_line(m: ModuleChange, shown: int = 3) -> str:
    if m.cpu is None:
        return "no XLA:CPU regions (a side failed)"
    changed = m.cpu.changed()
    if not changed:
        return "no XLA:CPU fusion region changed"
    total = sum(r.delta_s for r in changed)
    named = ", ".join(f"{md_code(r.name)} ({r.change}, {'+' if r.delta_s >= 0 else '-'}{fmt_seconds(abs(r.delta_s))})"
                      for r in changed[:shown])
    more = f" and {len(changed) - shown} more" if len(changed) > shown else ""
    return (f"{len(changed)} XLA:CPU regions changed: {named}{more}; predicted "
            f"{'+' if total >= 0 else '-'}{fmt_seconds(abs(total))} in all")


def _nchanged(d: RegionDiff | None) -> str:
    return "-" if d is None else str(len(d.changed()))


def _bytes(x: float) -> str:
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(x) >= size:
            return f"{x / size:.3g} {unit}"
    return f"{x:.0f} B"


def _flops(x: float) -> str:
    for unit, size in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(x) >= size:
            return f"{x / size:.3g}{unit}"
    return f"{x:.0f}"


def _side_kernels(ks) -> str:
    if not ks:
        return "-"
    shown = ", ".join(k.label for k in ks[:3])
    return shown + (f" +{len(ks) - 3} more" if len(ks) > 3 else "")


def _region_cells(r: Region) -> list[str]:
    return [r.name, r.change, _side_kernels(r.a), _side_kernels(r.b), f"{_bytes(r.bytes_a)}→{_bytes(r.bytes_b)}",
            f"{_flops(r.flops_a)}→{_flops(r.flops_b)}", f"{fmt_seconds(r.time_a)}→{fmt_seconds(r.time_b)}",
            ("+" if r.delta_s >= 0 else "-") + fmt_seconds(abs(r.delta_s))]


def _rest(d: RegionDiff, shown: int) -> str:
    rest = d.changed()[shown:]
    if not rest:
        return ""
    delta = sum(r.delta_s for r in rest)
    return f"… and {len(rest)} more changed regions, together {'+' if delta >= 0 else '-'}{fmt_seconds(abs(delta))}"


def _explain(m: ModuleChange, regions: int) -> list[str]:
    lines: list[str] = []
    for backend, d in (("XLA:CPU", m.cpu), ("XLA:GPU", m.gpu)):
        if d is None:
            continue
        changed = d.changed()
        total = d.time_b - d.time_a
        lines.append(f"{backend} on {md_escape(d.device)}: {len(changed)} regions changed "
                     f"({', '.join(f'{k} {v}' for k, v in d.counts().items())}); predicted "
                     f"{'+' if total >= 0 else '-'}{fmt_seconds(abs(total))} in all.")
        lines.append("")
        if not changed:
            lines += ["No fusion region changed: the difference is inside kernels both sides fuse alike "
                      "(code generation, the runtime), not in fusion decisions.", ""]
            continue
        lines += ["| " + " | ".join(_REGION_HEAD) + " |", "|" + "---|" * len(_REGION_HEAD)]
        for r in changed[:regions]:
            lines.append("| " + " | ".join(md_escape(c) for c in _region_cells(r)) + " |")
        rest = _rest(d, regions)
        lines += ([md_escape(rest)] if rest else []) + [""]
    return lines


def regress(srcs: list[Source], a: Side, b: Side, *, target: str | None = "h100", measure: bool = True,
            reps: int = 20, warmup: int = 3, threshold: float = 0.05, db: str | None = None, store: bool = True,
            say: Callable[[str], None] = lambda _s: None, command: str = "", cpu: bool = True) -> RegressReport:
    """Every module of ``srcs`` through sides ``a`` and ``b``; each measured
    side is stored in the results database (keyed by its version and flags)."""
    host = devices.host() if cpu else None
    out = []
    for i, src in enumerate(srcs):
        say(f"[{i + 1}/{len(srcs)}] {src.name}")
        m = compare_module(src, a, b, target=target, measure=measure, reps=reps, warmup=warmup, host=host, cpu=cpu)
        out.append(m)
        if store:
            _store(m, src, db)
    return RegressReport(a, b, target, threshold, out, command)


def _store(m: ModuleChange, src: Source, db: str | None) -> None:
    for run, d_cpu, d_gpu, which in ((m.a, m.cpu, m.gpu, "a"), (m.b, m.cpu, m.gpu, "b")):
        if run.bench is None:
            continue
        pred = (d_cpu.time_a if which == "a" else d_cpu.time_b) * 1e6 if d_cpu else None
        gpu = (d_gpu.time_a if which == "a" else d_gpu.time_b) * 1e6 if d_gpu else None
        record(dataclasses.replace(run.bench, name_a=m.name), module_text=src.text, passes="", db=db, versions={"jax": run.jax, "jaxlib": run.jaxlib},
               side=run.side.label, predicted_us=pred,
               extra={"regress": True, "module": m.name, "flags": list(run.side.flags), "gpu_predicted_us": gpu,
                      "gpu_target": run.target, "outputs_vs_other_side": m.outputs})

