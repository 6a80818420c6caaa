"""``hlo analyze``, ``hlo scan``, ``hlo passes-dump`` and ``hlo fusion-log``: thin
layers over ``hlo_lab.scan``, ``hlo_lab.pass_dumps`` and
``hlo_lab.measured.xla_fusion_log``.  Those are imported inside the commands:
with the visualize package (``cli.visualize``) they would add about 65 ms, a
quarter, to the start-up of every ``hlo`` command, ``hlo --help`` included
(measured: 270 ms without them)."""

from __future__ import annotations

import contextlib
import json
import os
import sys

from hlo_tools.errors import HloParseError
from hlo_tools.fileio import check_writable
from xla_bridge import jax_internals
from hlo_analysis.units import fmt_bytes, fmt_seconds

from ..console import stdout_console
from .inputs import load_verified, note_skipped


def _cmd_analyze(args) -> int:
    from hlo_analysis import devices  # lazy: start-up (module docstring)
    from hlo_lab.scan import analyze_module, platform_of  # lazy: start-up

    why = "--device"
    if args.device is None:  # an optimized stage names its platform, as in `hlo scan`
        stage = platform_of(os.path.basename(args.file))
        args.device = stage or "h100"
        why = "from the file's stage" if stage else "no stage in the file name: the default GPU"
    try:
        devices.load(args.device)  # an unknown device is an error before any parsing
        module = load_verified(args.file)
        text = module.to_text()
        r = analyze_module(module, label=args.file, device=args.device)
    except HloParseError as e:
        print(e.format(), file=sys.stderr)
        return 1
    except (OSError, ValueError) as e:
        print(f"hlo analyze: {e}", file=sys.stderr)
        return 1
    if args.compare_xla:
        x = jax_internals.cost_analysis_of_text(text, contained=True)
        r["xla_cost"] = {k: x.get(k) for k in r["cost"]}
    if args.json:
        print(json.dumps(r, indent=1))
        return 0
    from rich.table import Table

    con = stdout_console()
    narrow = con.width < 120
    c = r["cost"]
    # One fact per line, each under 80 columns: a pipe gets no mid-phrase wraps.
    con.print(f"[bold]{r['module']}[/]: {r['instructions']} instructions, {r['kernels']} kernels")
    con.print(f"device model {args.device} ({why})")
    con.print(f"flops {c['flops']:.4g}  transcendentals {c['transcendentals']:.4g}  bytes accessed {fmt_bytes(c['bytes accessed'])}")
    if "xla_cost" in r:
        x = r["xla_cost"]
        if x.get("bytes accessed") is None:
            con.print("XLA's HloCostAnalysis: not available for this module (XLA could not parse or analyse it)")
        else:
            con.print("XLA's HloCostAnalysis: " + "  ".join(
                f"{k} {x[k] or 0:.4g} ({100 * (c[k] - (x[k] or 0)) / max(abs(x[k] or 0), 1):+.3f}%)" for k in c))
    if r.get("loops"):
        p = r["per_run"]
        con.print(f"per run: flops {p['flops']:.4g}  bytes accessed {fmt_bytes(p['bytes accessed'])} ({r['loops']})")
    con.print(f"roofline time {fmt_seconds(r['time_s'])} per run, headroom {fmt_seconds(r['headroom_s'])}")
    con.print(bounds_words(r["bounds"]))
    t = Table(title="per category")
    for col in ("category", "kernels", "time", "headroom", "bytes", "flops"):
        t.add_column(col, no_wrap=True, justify="left" if col == "category" else "right")
    for cat, s in r["categories"].items():
        t.add_row(cat, str(s["kernels"]), fmt_seconds(s["time_s"]), fmt_seconds(s["headroom_s"]),
                  fmt_bytes(s["bytes_accessed"]), f"{s['flops']:.3g}")
    con.print(t)
    # At a narrow terminal (80 columns) the signature and example columns go (--json has them):
    # every other column keeps at least its header's width, so none wraps into one letter a line.
    t = Table(title=f"top {args.top} opportunities" + (" (signatures and examples: --json, or 120+ columns)"
                                                       if narrow else ""))
    text_cols = () if narrow else ("signature",)
    tail = ("example",) if text_cols else ()
    for col in (*text_cols, "kind", "pattern", "n", "legal", "bytes saved", "time saved", *tail):
        if col in ("signature", "example"):
            t.add_column(col, overflow="fold", min_width=12, max_width=48)
        else:
            t.add_column(col, no_wrap=True, min_width=len(col), overflow="ellipsis",
                         justify="right" if col in ("n", "legal", "bytes saved", "time saved") else "left")
    for g in r["opportunities"]["groups"][: args.top]:
        cells = [g["kind"], g["pattern"] or "", str(g["count"]), str(g["legal"]), fmt_bytes(g["bytes_saved"]),
                 fmt_seconds(g["time_saved_s"])]
        if text_cols:
            cells = [g["signature"], *cells, g["examples"][0] if g["examples"] else ""]
        t.add_row(*cells)
    con.print(t)
    return 0


def bounds_words(bounds: dict) -> str:
    """``{'launch': 142, 'memory': 2}`` as words: ``142 kernels launch-bound, 2 memory-bound``."""
    parts = [f"{n} {k}-bound" for k, n in sorted(bounds.items(), key=lambda kv: -kv[1]) if n]
    if not parts:
        return "no kernels bound"
    parts[0] = parts[0].replace(" ", " kernels ", 1)
    return ", ".join(parts)


def _cmd_scan(args) -> int:
    from hlo_lab.scan import scan  # lazy: start-up (module docstring)

    check_writable(args.output, directory=True)  # before the scan, not after it
    try:
        report = scan(args.dir, args.output, device=args.device, jobs=args.jobs, use_ray=args.ray,
                      ray_address=args.ray_address, stages=args.stage or None, progress=not args.quiet,
                      cache=not args.no_cache, min_share=args.min_share / 100)
    except (FileNotFoundError, ValueError, RuntimeError) as e:  # NoModulesError too: nothing scanned is a failure
        print(f"hlo scan: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"hlo scan: interrupted; {args.output}/report.json records the run as interrupted",
              file=sys.stderr)
        return 130
    n, files = report["modules_analysed"], report["modules_scanned"]
    line = (f"{n} modules" + (f" ({files} files)" if files != n else "") + f", {len(report['errors'])} errors"
            + (f", {len(report['skipped'])} skipped" if report["skipped"] else "")
            + f", {report['seconds']:.1f} s -> {args.output}/report.{{json,md,html}}\n"
            + ("device model (from each file's stage; --device overrides):" if report["device_requested"] == "auto"
               else "device model (--device):")
            + "".join(f"\n  {d['name']}: " + "; ".join(f"{w['files']} files: {w['reason']}" for w in d["why"])
                      for d in report["devices"]))
    if args.json:
        keys = ("run_id", "status", "source", "kind", "modules_found", "modules_analysed", "files", "modules_scanned",
                "cached", "skipped", "seconds", "device", "device_requested")
        print(json.dumps({**{k: report[k] for k in keys},
                          "errors": [{**e, "error": (e["error"].splitlines() or [""])[0]} for e in report["errors"]],
                          "report": [f"{args.output}/report.{x}" for x in ("json", "md", "html")]}, indent=1))
    else:
        print(line)
    for e in report["errors"]:
        print(f"error: {e['file']}: {(e['error'].splitlines() or [''])[0]}", file=sys.stderr)
    for x in report["skipped"]:
        print(f"skipped: {x['file']}: {x['reason']}", file=sys.stderr)
    return 1 if report["errors"] else 0


def _cmd_passes_dump(args) -> int:
    """``hlo passes-dump``: one module's per-pass dumps in order (hlo_lab.pass_dumps)."""
    from hlo_lab import pass_dumps  # lazy: start-up (module docstring)
    from visualize.diff import format_diff  # lazy: start-up (pass_dumps imports it anyway)

    note_skipped("passes-dump", args.dir)
    try:
        if args.module is None and len(mods := pass_dumps.modules_with_passes(args.dir)) > 1:
            return _list_pass_modules(mods, args.json)
        module = pass_dumps.find_module(args.dir, args.module)
    except (LookupError, NotADirectoryError) as e:
        print(f"hlo passes-dump: {str(e).strip(chr(39))}", file=sys.stderr)
        return 2
    with _progress(not args.json and sys.stderr.isatty(), "parsing pass dumps") as tick:
        w = pass_dumps.walk(module, find=args.find or (), progress=tick)
    diffs: list[tuple[int, object]] = []
    try:
        for spec in args.diff or ():
            diffs += [(i, pass_dumps.diff_steps(w, i)) for i in w.select(spec)]
    except KeyError as e:
        print(f"hlo passes-dump: {str(e).strip(chr(39))}", file=sys.stderr)
        return 2
    except Exception as e:  # noqa: BLE001 - a dump the diff cannot read: one line, not a traceback
        print(f"hlo passes-dump: cannot diff: {(str(e).splitlines() or [type(e).__name__])[0]}", file=sys.stderr)
        return 1
    finds = {n: pass_dumps.first_changes(w, n) for n in args.find or ()}
    failed = [s for s in w.steps if s.error]
    if args.json:
        print(json.dumps({"module": {"id": module.module_id, "name": module.name},
                          "steps": [{**s.as_dict(), "opcode_delta": dict(w.opcode_delta(i, top=None))} for i, s in enumerate(w.steps)],
                          "find": {n: [{"step": w.steps[k].label, "seq": w.steps[k].seq, "from": a, "to": b}
                                       for k, a, b in ch] for n, ch in finds.items()},
                          "diffs": [{"step": w.steps[i].label, "seq": w.steps[i].seq, **d.as_dict()} for i, d in diffs]},
                         indent=1))
        return 1 if failed else 0
    from rich.table import Table

    con = stdout_console()
    t = Table(title=f"module_{module.module_id:04d}.{module.name}: {len(w.steps)} dumps "
                    f"({len(module.passes)} after passes that changed it)")
    for col, just in (("#", "right"), ("pipeline", "left"), ("after pass", "left"), ("instr", "right"),
                      ("d instr", "right"), ("fusions", "right"), ("d fus", "right"), ("opcodes changed (outside fusion bodies)", "left")):
        t.add_column(col, justify=just, overflow="fold")
    prev = None
    for i, s in enumerate(w.steps):
        if s.error:
            t.add_row("-" if s.seq is None else f"{s.seq:04d}", s.pipeline, s.pass_name, "-", "", "-", "",
                      f"[red]does not parse: {s.error}[/]")
            continue
        d_i = "" if prev is None else f"{s.instructions - prev.instructions:+d}" if s.instructions != prev.instructions else ""
        d_f = "" if prev is None else f"{s.fusions - prev.fusions:+d}" if s.fusions != prev.fusions else ""
        ops = ", ".join(f"{op} {d:+d}" for op, d in w.opcode_delta(i))
        t.add_row("-" if s.seq is None else f"{s.seq:04d}", s.pipeline, s.pass_name, str(s.instructions), d_i,
                  str(s.fusions), d_f, ops)
        prev = s
    con.print(t)
    for name, ch in finds.items():
        if not ch:
            con.print(f"%{name}: in none of the {len(w.steps)} dumps")
        for k, a, b in ch:
            step = w.steps[k].label
            if a is None:
                con.print(f"%{name}: appears in {step} (in {b})" if k else f"%{name}: present from the start (in {b})")
            elif b is None:
                con.print(f"%{name}: disappears in {step} (was in {a})")
            else:
                con.print(f"%{name}: moves in {step}: {a} -> {b}")
    if diffs:
        for i, d in diffs:
            con.print(f"\n[bold]what {w.steps[i].label} changed[/] (against {w.previous(i).label})")
            sys.stdout.write(format_diff(d, limit=args.limit))
    if failed:
        print(f"hlo passes-dump: {len(failed)} of {len(w.steps)} dumps do not parse (rows marked)", file=sys.stderr)
    return 1 if failed else 0


def _list_pass_modules(mods, as_json: bool) -> int:
    """Several modules have pass dumps: say which, so the user can pick one with --module."""
    rows = [{"id": m.module_id, "name": m.name, "pass_dumps": len(m.passes),
             "stages": sorted(k for k in m.stages if k.endswith("optimizations"))} for m in mods]
    if as_json:
        print(json.dumps({"modules": rows}, indent=1))
        return 0
    from rich.table import Table

    t = Table(title=f"{len(rows)} modules with pass dumps (pick one: --module ID or NAME)")
    for col in ("id", "name", "pass dumps", "stages"):
        t.add_column(col, overflow="fold")
    for r in rows:
        t.add_row(f"{r['id']:04d}", r["name"], str(r["pass_dumps"]), ", ".join(r["stages"]))
    stdout_console().print(t)
    return 0


def _cmd_fusion_log(args) -> int:
    """``hlo fusion-log``: XLA:GPU's priority-fusion decisions, step by step."""
    from hlo_lab.measured import xla_fusion_log as fl  # lazy: start-up (module docstring)

    note_skipped("fusion-log", args.path)
    try:
        logs = fl.dump_logs(args.path, args.module)
    except (LookupError, NotADirectoryError) as e:
        print(f"hlo fusion-log: {str(e).strip(chr(39))}", file=sys.stderr)
        return 2
    out = []
    for label, path in logs:
        try:
            with open(path, encoding="utf-8") as fh:
                log = fl.parse_dump(fh.read(), module_name=label)
        except (OSError, UnicodeDecodeError, LookupError, ValueError) as e:
            print(f"hlo fusion-log: {path}: cannot read the log: {e}", file=sys.stderr)
            return 1
        steps = [s for s in log.steps if (not args.kind or fl.step_kind(s) in args.kind)
                 and (not args.producer or fl.matches(s, args.producer))]
        out.append((label, path, log, steps))
    if args.json:
        print(json.dumps([{"module": label, "file": path, "summary": fl.summary(log),
                           "steps": [fl.step_dict(s) for s in steps]} for label, path, log, steps in out], indent=1))
        return 0
    from rich.table import Table

    con = stdout_console()
    for label, path, log, steps in out:
        sm = fl.summary(log)
        shown = steps if args.limit <= 0 else steps[: args.limit]
        t = Table(title=f"{label}: priority fusion, {sm['steps']} steps: {sm['fuse']} fusions, {sm['price']} "
                        f"priority updates, {sm['refuse']} refusals")
        for col in ("#", "event", "producer -> consumers", "outcome"):
            t.add_column(col, overflow="fold", justify="right" if col == "#" else "left")
        index = {id(s): k for k, s in enumerate(log.steps, 1)}
        for s in shown:
            kind, who, what = fl.describe_step(s)
            t.add_row(str(index[id(s)]), kind, who, what)
        con.print(t)
        if len(shown) < len(steps):
            con.print(f"... {len(steps) - len(shown)} more steps (--limit 0 shows all)")
    return 0


def _progress(enabled: bool, what: str):
    """A context giving ``tick(k, n, step)`` that drives a progress bar on stderr
    (a no-op when not a terminal)."""
    if not enabled:
        return contextlib.nullcontext(None)

    @contextlib.contextmanager
    def bar():
        from rich.console import Console
        from rich.progress import Progress

        with Progress(console=Console(stderr=True), transient=True) as p:
            tid = p.add_task(what, total=None)

            def tick(k: int, n: int, step) -> None:
                p.update(tid, total=n, completed=k, description=f"{what}: {getattr(step, 'label', '')}"[:80])

            yield tick

    return bar()


def register(subparsers) -> None:
    a = subparsers.add_parser("analyze", help="cost, roofline and fusion opportunities of one module")
    a.add_argument("file", help="HLO text (optionally .gz)")
    a.add_argument("--device", default=None,
                   help="h100, h200, a100, b200, host, or a JSON spec file (default: from the file's stage: "
                        "cpu_after_optimizations -> host, gpu -> h100; h100 when it names none)")
    a.add_argument("--top", type=int, default=10, help="opportunity groups to show")
    a.add_argument("--compare-xla", action="store_true", help="also run XLA's HloCostAnalysis and show the difference")
    a.add_argument("--json", action="store_true", help="print the analysis as JSON")
    a.set_defaults(func=_cmd_analyze)

    s = subparsers.add_parser("scan", help="analyse every module of a folder (or the bundled corpus) into a report")
    s.add_argument("dir", nargs="?", default=None, help="folder of HLO files, an --xla_dump_to folder, or a corpus root "
                                                        "(default: the bundled corpus)")
    s.add_argument("-o", "--output", required=True, help="report folder (report.json, report.md, report.html)")
    s.add_argument("--device", default=None,
                   help="h100, h200, a100, b200, host, or a JSON spec file (default: from each file's stage: "
                        "cpu_after_optimizations -> host, gpu -> h100; the report says which and why)")
    s.add_argument("--min-share", type=float, default=1.0, metavar="PCT",
                   help="list modules whose predicted time is at least PCT%% of the slowest one's; the report "
                        "counts the rest (default 1; 0 lists all)")
    s.add_argument("--jobs", "-j", type=int, default=None, help="worker processes (default: CPU count)")
    s.add_argument("--ray", action="store_true", help="run the tasks on Ray (ray.init() locally unless --ray-address)")
    s.add_argument("--ray-address", default=None, help="Ray cluster address for --ray")
    s.add_argument("--stage", action="append", help="only this corpus stage (repeatable)")
    s.add_argument("--no-cache", action="store_true", help="analyse everything again (ignore .cache)")
    s.add_argument("--quiet", "-q", action="store_true", help="no progress bar")
    s.add_argument("--json", action="store_true", help="print the run's summary (counts, errors, skipped) as JSON")
    s.set_defaults(func=_cmd_scan)

    p = subparsers.add_parser("passes-dump", help="walk one module's per-pass XLA dumps: what each pass changed",
                              description="One module of an --xla_dump_to folder made with "
                                          "--xla_dump_hlo_pass_re=.*: its dumps in pipeline order with instruction "
                                          "and fusion counts before/after each pass, where named instructions "
                                          "appear or disappear, and a diff of the passes asked for.")
    p.add_argument("dir", help="the --xla_dump_to folder")
    p.add_argument("--module", "-m", default=None, help="module id (18 or 0018) or name (jit_train_step); "
                                                        "needed when several modules have pass dumps")
    p.add_argument("--find", action="append", metavar="NAME", help="the first pass where instruction NAME appears, "
                                                                    "disappears or moves (repeatable)")
    p.add_argument("--diff", action="append", metavar="PASS", help="what this pass changed: a dump number (47) or "
                                                                    "a pass name (every dump after it; repeatable)")
    p.add_argument("--limit", type=int, default=20, help="names listed per diff section (default 20)")
    p.add_argument("--json", action="store_true", help="steps, finds and diffs as JSON")
    p.set_defaults(func=_cmd_passes_dump)

    f = subparsers.add_parser("fusion-log", help="XLA:GPU's priority-fusion log of a dump folder, step by step",
                              description="Prints the *.priority_fusion_dump.txt XLA:GPU writes when the dump's "
                                          "--xla_dump_hlo_pass_re matches priority-fusion: each fusion, each "
                                          "priority estimate (fused vs unfused time) and each refusal, in order.")
    f.add_argument("path", help="an --xla_dump_to folder, or one *.priority_fusion_dump.txt")
    f.add_argument("--module", "-m", default=None, help="module id or name, when the folder has several logs")
    f.add_argument("--producer", metavar="NAME", help="only steps involving this instruction")
    f.add_argument("--kind", action="append", choices=("fuse", "price", "refuse"), help="only these events (repeatable)")
    f.add_argument("--limit", type=int, default=200, help="steps shown per module (0: all; default 200)")
    f.add_argument("--json", action="store_true", help="summary and steps as JSON")
    f.set_defaults(func=_cmd_fusion_log)
