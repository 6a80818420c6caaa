"""The main job of ``make demo``: every bundled module, parsed, verified, printed
and re-read by XLA's own parser, with a report."""

from __future__ import annotations

import time
from pathlib import Path

from .parser import parse
from .stats import module_stats
from .verifier import verify


def run_demo(report_path: str) -> int:
    import corpus
    from rich.console import Console
    from rich.progress import Progress
    from rich.table import Table

    from .cli import write_atomic
    from .fidelity import fidelity_problem

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
    lines = ["# Demo report: bundled corpus through our parser, verifier and printer, re-read by XLA", "",
             f"{len(rows)} module stages, {failures} failing.", "",
             "| module | stage | instructions | computations | fusions | KB | parse MB/s | status |",
             "|---|---|---|---|---|---|---|---|"]
    for name, stage, st, size, t, status in rows:
        cells = [name, stage, str(st.instructions) if st else "-", str(st.computations) if st else "-",
                 str(st.fusions) if st else "-", f"{size / 1024:.0f}", f"{size / 1e6 / t:.1f}" if t else "-", status]
        table.add_row(*cells)
        lines.append("| " + " | ".join(cells) + " |")
    Console(width=170).print(table)
    write_atomic(report_path, "\n".join(lines) + "\n")
    print(f"report: {Path(report_path).resolve()}  ({len(rows)} stages, {failures} failing)")
    return 1 if failures else 0
