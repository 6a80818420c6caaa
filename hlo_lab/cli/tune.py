"""``hlo tune FILE``: search one module's fusion decisions against stock XLA
(``hlo_lab.tune``), print the tuned module's speedup next to BEST's and random
search's, and write the best decision set as a replayable pass."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from hlo_tools.fileio import check_writable, write_output
from xla_bridge.display import speedup_verdict

from .. import progress
from .args import at_least_one, positive_seconds, seed
from .inputs import load_verified


#: XLA's whole-module stage files: a dump's ``NAME.before_optimizations.txt``, the corpus's ``NAME/before_optimizations.hlo.txt.gz``.
_STAGES = ("before_optimizations", "after_optimizations")


def _label(path: str) -> str:
    """A module's name for reports: a dump stage file's module, a corpus stage
    file's folder, or any other file's name up to its first dot."""
    p = Path(path)
    for stage in _STAGES:
        if p.name.startswith(stage):
            return p.parent.name or stage
        if f".{stage}" in p.name:
            return p.name.split(f".{stage}")[0]
    return p.name.split(".")[0]


def _fmt(x) -> str:
    return f"{x:.3f}x" if isinstance(x, float) else "-"


def _report(d: dict, out: str | None) -> str:
    lines = [f"{d['module']}: {d['objective']}"]
    rows = [("", "speedup vs stock", "p10-p90")]
    spread = (f"{d['speedup_p10']:.3f}-{d['speedup_p90']:.3f}"
              if d["speedup_p10"] is not None and d["speedup_p90"] is not None else "-")
    rows.append((f"tuned ({d['strategy']}, {d['candidates']} candidates)", _fmt(d["speedup"]), spread))
    rows.append(("BEST (the start point)", _fmt(d["best_pass_speedup"]), ""))
    if d["random_candidates"]:
        rows.append((f"random search ({d['random_candidates']} candidates)", _fmt(d["random_best_speedup"]), ""))
    w = [max(len(r[i]) for r in rows) for i in range(3)]
    lines += ["  " + "  ".join(c.ljust(w[i]) if i == 0 else c.rjust(w[i]) for i, c in enumerate(r)) for r in rows]
    if d["stock_ms"] is not None and d["best_ms"] is not None:
        unit = "us (predicted)" if d["target"] else "ms"
        scale = 1e3 if d["target"] else 1.0
        lines.append(f"stock {d['stock_ms'] * scale:.4g} {unit}, tuned {d['best_ms'] * scale:.4g} {unit}; "
                     f"outputs: {d['outputs']}")
    if d["speedup_p10"] is not None and d["speedup_p90"] is not None:
        lines.append(f"tuned vs stock: {speedup_verdict(d['speedup_p10'], d['speedup_p90'])}")
    tau = d["kendall_tau_model_vs_measured"]
    lines.append(f"search: {d['compiles']} compiles in {d['search_seconds']} s"
                 + (f", random search {d['random_compiles']}" if d["random_candidates"] else "")
                 + f"; {d['unequal']} candidates with unequal outputs, {d['errors']} refused by XLA; "
                 + (f"model vs measured Kendall tau {tau:.2f}" if tau is not None else "too few candidates to rank"))
    if d["first_error"]:
        lines.append(f"first error: {d['first_error']}")
    if d.get("first_unequal"):
        lines.append(f"first unequal candidate: {d['first_unequal']}")
    if out:
        lines.append(f"decisions: {out} (replay: hlo bench FILE --passes replay:{out} --hook "
                     f"{'post-scheduler' if d['backend'] == 'gpu' else 'pre-scheduler'}; the module they apply to: "
                     f"{out}.hook_input.hlo, what they make: {out}.after.hlo)")
    return "\n".join(lines)


def _cmd_tune(args) -> int:
    from hlo_lab.tune.search import Tuner  # lazy: every pass module and the analyses they use, ~90 ms on each hlo start (measured)
    from passes.fusion.decisions import save  # lazy: as above

    for flag, spec in (("--target", args.target), ("--model", args.model)):
        if spec:
            from hlo_analysis import devices  # lazy: as above

            try:
                devices.load(spec)  # a bad name or spec file is one line, before anything compiles
            except (ValueError, OSError) as e:
                print(f"hlo tune: {flag} {spec}: {e}", file=sys.stderr)
                return 2
    module = load_verified(args.file)
    out = args.output or str(Path("results") / "tune" / f"{_label(args.file)}.json")
    for path in (out, out + ".hook_input.hlo", out + ".after.hlo"):
        check_writable(path)  # before anything compiles
    with progress.line("tune", progress.wanted(args), counts=True) as update:
        tuner = Tuner(_label(args.file), module.to_text(), budget=args.budget, seconds=args.seconds,
                      backend=args.backend, target=args.target, strategy=args.strategy, seed=args.seed,
                      workers=args.workers, db=args.db, reps=args.reps, final_reps=args.final_reps,
                      baseline=not args.no_baseline, progress=update, model=args.model)
        result = tuner.run()
    if result.main.best is not None:
        best = result.main.best
        save(out, best.proposal.decisions, target=tuner.model, module=result.module, module_hash=tuner.module_hash,
             backend=result.backend, measured=result.as_dict()["speedup"])
        write_output(out + ".hook_input.hlo", tuner.space.module.to_text())
        write_output(out + ".after.hlo", best.proposal.after_text)
        result.replay = out
    d = result.as_dict()
    print(json.dumps(d, indent=1) if args.json else _report(d, result.replay))
    return 0 if result.main.best is not None else 1




def register(subparsers) -> None:
    t = subparsers.add_parser("tune", help="search a module's fusion decisions against stock XLA (measured, outputs "
                                           "checked); write the best as a replayable pass")
    t.add_argument("file")
    t.add_argument("--budget", type=at_least_one, default=60, help="candidates to evaluate per search (default 60)")
    t.add_argument("--seconds", type=positive_seconds, help="stop each search (tuned, random) after this long as well")
    t.add_argument("--backend", default="cpu", choices=["cpu", "gpu"], help="where candidates run (gpu: a visible GPU)")
    t.add_argument("--target", help="no GPU here: compile XLA:GPU for this GPU (h100, h200...) and rank candidates "
                                    "by our GPU roofline (the output says so)")
    t.add_argument("--model", help="the GPU whose roofline prices candidates and the GPU passes' choices "
                                   "(default: --target, or h100 with --backend gpu)")
    t.add_argument("--strategy", default="hill", choices=["hill", "anneal", "random"])
    t.add_argument("--seed", type=seed, default=0)
    t.add_argument("--workers", type=at_least_one, default=2, help="XLA worker processes compiling candidates in parallel")
    t.add_argument("--reps", type=at_least_one, default=100, help="timed repetitions per candidate (ABBA with stock)")
    t.add_argument("--final-reps", type=at_least_one, default=400, help="repetitions of the final comparisons")
    t.add_argument("--no-baseline", action="store_true", help="skip random search at the same budget")
    t.add_argument("--db", help="results database (default ~/.cache/hlo-pass-lab/results.db); a search run again "
                                "with the same options resumes from it")
    t.add_argument("-o", "--output", help="the decisions file (default results/tune/MODULE.json)")
    t.add_argument("--json", action="store_true")
    t.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    t.set_defaults(func=_cmd_tune)
