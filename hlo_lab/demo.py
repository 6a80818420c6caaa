"""The main job of ``make demo``, end to end on the bundled corpus:

1. every stage of every module parsed, verified, printed and re-read by XLA;
2. a fusion-opportunity scan of the corpus (``hlo_lab.scan``), report in
   ``results/scan/report.{json,md,html}``;
3. the best Python fusion pipeline (``passes.registry.BEST``) on one decode
   and one train module: outputs compared with stock XLA:CPU, both timed, and
   the same modules compiled for an H100 without a GPU, ``GPU_BEST`` on top of
   XLA:GPU's fusions, for the predicted columns;
4. a before/after HTML page per module in ``results/pages/``;
5. a summary, and the report ``results/demo_report.md``.
"""

from __future__ import annotations

import time
from pathlib import Path

from rich.console import Console
from rich.progress import Progress
from rich.table import Table

import corpus
from hlo_lab.scan import scan
from hlo_tools.fileio import write_output
from hlo_tools.parser import parse
from hlo_tools.stats import module_stats
from hlo_tools.verifier import verify
from passes.registry import BEST, GPU_BEST
from visualize.page import before_after_html
from visualize.view import FocusOptions
from xla_bridge import jax_internals
from xla_bridge.errors import XlaCompileError
from xla_bridge.fidelity import fidelity_problem

from .study import cpu_study, gpu_study


def fidelity(report_lines: list[str]) -> int:
    """Step 1; appends its Markdown to ``report_lines``, returns the failures."""
    entries = list(corpus.load())
    jobs = [(e, stage) for e in entries for stage in e.files]
    rows, failures = [], 0
    with Progress(transient=True) as progress:
        task = progress.add_task("parse + verify + XLA round-trip", total=len(jobs))
        for entry, stage in jobs:
            text = entry.text(stage)
            t0 = time.perf_counter()
            status = "ok"
            try:
                module = parse(text, source=f"{entry.name}:{stage}")
                t_parse = time.perf_counter() - t0
                problems = verify(module, raise_on_error=False)
                problem = fidelity_problem(text, f"{entry.name}:{stage}")
                if problems:
                    status = f"verifier: {problems[0][:60]}"
                elif problem:
                    status = problem[:60]
                st = module_stats(module)
            except Exception as e:  # report, keep going: the demo shows every module
                status, t_parse, st = f"error: {str(e).splitlines()[0][:60]}", time.perf_counter() - t0, None
            failures += status != "ok"
            rows.append((entry.name, stage, st, len(text), t_parse, status))
            progress.advance(task)
    table = Table("module", "stage", "instructions", "computations", "fusions", "KB", "parse MB/s", "status")
    lines = report_lines
    lines += ["## 1. Parse, verify, print, re-read by XLA", "",
             f"{len(rows)} module stages, {failures} failing.", "",
             "| module | stage | instructions | computations | fusions | KB | parse MB/s | status |",
             "|---|---|---|---|---|---|---|---|"]
    for name, stage, st, size, t, status in rows:
        cells = [name, stage, str(st.instructions) if st else "-", str(st.computations) if st else "-",
                 str(st.fusions) if st else "-", f"{size / 1024:.0f}", f"{size / 1e6 / t:.1f}" if t else "-", status]
        if status != "ok":
            table.add_row(*cells)
        lines.append("| " + " | ".join(cells) + " |")
    if failures:
        Console(width=170).print(table)
    print(f"step 1: {len(rows)} stages parsed, verified and re-read by XLA, {failures} failing")
    return failures


#: The modules of step 3: one decode step and one train step.
FUSION_MODULES = ("llama3-tiny-decode-f32", "llama3-tiny-train-f32")


def scan_step(out_dir: Path, lines: list[str]) -> dict:
    """Step 2: the corpus-wide fusion-opportunity scan."""
    report = scan(None, out_dir, device="h100")
    lines += ["", "## 2. Fusion opportunities across the corpus (H100 roofline)", "",
              f"{report['modules_scanned']} module stages scanned in {report['seconds']:.0f} s, "
              f"{len(report['errors'])} errors; report: `{out_dir}/report.html`.", "",
              "| pattern | edges | bytes saved | modules |", "|---|---|---|---|"]
    top = sorted(report["patterns"].items(), key=lambda kv: -kv[1]["bytes_saved"])[:8]
    for name, p in top:
        lines.append(f"| {name} | {p['count']} | {p['bytes_saved'] / 1e6:.1f} MB | {p['modules']} |")
    print(f"step 2: scanned {report['modules_scanned']} stages in {report['seconds']:.0f} s -> {out_dir}/report.html")
    return report


def fusion_step(pages: Path, lines: list[str], reps: int) -> tuple[list, list, int]:
    """Steps 3 and 4: the best pipeline against stock XLA on two modules."""
    entries = {e.name: e for e in corpus.load()}
    cpu_rows, gpu_rows, errors = [], [], []
    failures = 0
    for name in FUSION_MODULES:
        text = entries[name].text("before_optimizations")
        try:  # in the XLA worker: an abort costs this module's row, never the others'
            row = cpu_study(name, text, BEST, reps=reps)
        except XlaCompileError as e:
            errors.append((name, "XLA:CPU", str(e)))
            failures += 1
            print(f"step 3: {name}: {e}")
            continue
        cpu_rows.append(row)
        failures += row.outputs not in ("exact", "close") or not row.kept
        if row.before and row.after is not None:
            page = before_after_html(parse(row.before, source=f"{name} (XLA, unfused)"), row.after,
                                     FocusOptions(collapse_fusions=True),
                                     title=f"{name}: XLA's unfused module / after {BEST}")
            write_output(pages / f"{name}.html", page)
        print(f"step 3: {name}: outputs {row.outputs}, kernels {row.kernels_stock} -> {row.kernels_ours}, "
              f"speedup vs stock XLA:CPU {row.speedup:.3f}")
        if jax_internals.cuda_plugin_available():
            try:
                g = gpu_study(name, text, GPU_BEST, "h100", mode="on-top")
            except XlaCompileError as e:
                errors.append((name, "XLA:GPU h100", str(e)))
                failures += 1
                print(f"step 3: {name} (XLA:GPU): {e}")
                continue
            gpu_rows.append(g)
            failures += not g.kept
    lines += ["", f"## 3. Best fusion pipeline vs stock XLA:CPU (`{BEST}`)", "",
              "| module | kernels stock/ours | MB stock/ours | ms stock | ms ours | speedup (p10-p90) | outputs | fusions kept |",
              "|---|---|---|---|---|---|---|---|"]
    for r in cpu_rows:
        lines.append(f"| {r.module} | {r.kernels_stock}/{r.kernels_ours} | {r.bytes_stock / 1e6:.2f}/{r.bytes_ours / 1e6:.2f} "
                     f"| {r.ms_stock:.3f} | {r.ms_ours:.3f} | {r.speedup:.3f} ({r.speedup_p10:.2f}-{r.speedup_p90:.2f}) "
                     f"| {r.outputs} | {'yes' if r.kept else 'no'} |")
    if gpu_rows:
        lines += ["", f"XLA:GPU H100 compiled here without a GPU: stock vs `{GPU_BEST}` on top of XLA's fusions "
                  "(post-scheduler hook; docs/xla_gpu_modes.md). Bytes: our cost model on both sides; time: our GPU "
                  "roofline and XLA's own GPU model (its estimates for the kernels it priced).", "",
                  "| module | kernels stock/ours | MB stock/ours | predicted us stock/ours | XLA-where-priced us stock/ours "
                  "| predicted speedup | fusions kept |",
                  "|---|---|---|---|---|---|---|"]
        for g in gpu_rows:
            lines.append(f"| {g.module} | {g.stock.kernels}/{g.ours.kernels} | {g.stock.bytes / 1e6:.2f}/{g.ours.bytes / 1e6:.2f} "
                         f"| {g.stock.predicted_us:.1f}/{g.ours.predicted_us:.1f} "
                         f"| {g.stock.xla_where_priced_us:.1f}/{g.ours.xla_where_priced_us:.1f} | {g.predicted_speedup:.3f} "
                         f"| {'yes' if g.kept else 'no'} |")
    else:
        lines += ["", "XLA:GPU columns skipped: the CUDA plugin is not installed."]
    if errors:
        lines += ["", "Modules XLA refused or aborted on (each in its own worker call; the others are above):", ""]
        lines += [f"- {name} ({where}): {msg}" for name, where, msg in errors]
    lines += ["", "## 4. Before/after pages", ""] + [f"- `{pages / (r.module + '.html')}`" for r in cpu_rows]
    return cpu_rows, gpu_rows, failures


def run_demo(report_path: str, *, reps: int = 30) -> int:
    """Runs steps 1-5; the report and pages go beside ``report_path``."""
    t0 = time.perf_counter()
    out = Path(report_path).resolve().parent
    lines = ["# Demo report: the bundled corpus end to end", ""]
    failures = fidelity(lines)
    report = scan_step(out / "scan", lines)
    cpu_rows, gpu_rows, fusion_failures = fusion_step(out / "pages", lines, reps)
    failures += fusion_failures + len(report["errors"])
    minutes = (time.perf_counter() - t0) / 60
    lines += ["", f"Finished in {minutes:.1f} min, {failures} failures."]
    write_output(report_path, "\n".join(lines) + "\n")

    table = Table("module", "kernels stock/ours", "XLA:CPU speedup", "outputs", "H100 predicted speedup", title="summary")
    predicted = {g.module: g.predicted_speedup for g in gpu_rows}
    for r in cpu_rows:
        g = predicted.get(r.module)
        table.add_row(r.module, f"{r.kernels_stock}/{r.kernels_ours}", f"{r.speedup:.3f}", r.outputs,
                      f"{g:.3f}" if g is not None else "-")
    Console(width=120).print(table)
    print(f"report: {Path(report_path).resolve()}")
    print(f"scan:   {out / 'scan' / 'report.html'}")
    print(f"pages:  {out / 'pages'}/")
    print(f"{minutes:.1f} min, {failures} failures")
    return 1 if failures else 0
