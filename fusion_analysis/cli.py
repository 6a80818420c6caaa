"""``hlo analyze`` and ``hlo scan``: thin layers over ``scan.analyze_text`` and
``scan.scan``. Heavy imports stay inside the commands so ``hlo --help`` is fast."""

from __future__ import annotations

import json
import sys


def _cmd_analyze(args) -> int:
    from hlo_tools.errors import HloParseError

    from . import devices
    from .report import fmt_bytes, fmt_time
    from hlo_tools.parser import read_text  # any module file: text, .hlo.pb, .mlir, gzip'd (bounded)

    from .scan import analyze_text

    try:
        devices.load(args.device)  # an unknown device is an error before any parsing
        text = read_text(args.file)
        r = analyze_text(text, label=args.file, device=args.device, source=args.file)
    except HloParseError as e:
        print(e.format(), file=sys.stderr)
        return 1
    except (OSError, ValueError) as e:
        print(f"hlo analyze: {e}", file=sys.stderr)
        return 1
    if args.compare_xla:
        from hlo_tools import xla

        x = xla.cost_analysis_of_text(text)
        r["xla_cost"] = {k: x.get(k) for k in r["cost"]}
    if args.json:
        print(json.dumps(r, indent=1))
        return 0
    from rich.console import Console
    from rich.table import Table

    con = Console()
    c = r["cost"]
    con.print(f"[bold]{r['module']}[/] on {args.device}: {r['instructions']} instructions, {r['kernels']} kernels")
    con.print(f"flops {c['flops']:.4g}  transcendentals {c['transcendentals']:.4g}  bytes accessed {c['bytes accessed']:.4g}")
    if "xla_cost" in r:
        x = r["xla_cost"]
        if x.get("bytes accessed") is None:
            con.print("XLA's HloCostAnalysis: not available for this module (XLA could not parse or analyse it)")
        else:
            con.print("XLA's HloCostAnalysis: " + "  ".join(
                f"{k} {x[k] or 0:.4g} ({100 * (c[k] - (x[k] or 0)) / max(abs(x[k] or 0), 1):+.3f}%)" for k in c))
    con.print(f"roofline time {fmt_time(r['time_s'])}, headroom {fmt_time(r['headroom_s'])}; bounds {r['bounds']}")
    t = Table(title="per category")
    for col in ("category", "kernels", "time", "headroom", "bytes", "flops"):
        t.add_column(col)
    for cat, s in r["categories"].items():
        t.add_row(cat, str(s["kernels"]), fmt_time(s["time_s"]), fmt_time(s["headroom_s"]), fmt_bytes(s["bytes_accessed"]),
                  f"{s['flops']:.3g}")
    con.print(t)
    t = Table(title=f"top {args.top} opportunities (by bytes saved)")
    for col in ("signature", "kind", "pattern", "count", "legal", "bytes saved", "time saved", "example"):
        t.add_column(col, overflow="fold")
    for g in r["opportunities"]["groups"][: args.top]:
        t.add_row(g["signature"], g["kind"], g["pattern"] or "", str(g["count"]), str(g["legal"]),
                  fmt_bytes(g["bytes_saved"]), fmt_time(g["time_saved_s"]), g["examples"][0] if g["examples"] else "")
    con.print(t)
    return 0


def _cmd_scan(args) -> int:
    from hlo_tools.fileio import check_writable

    from .scan import scan

    check_writable(args.output, directory=True)  # before the scan, not after it
    try:
        report = scan(args.dir, args.output, device=args.device, jobs=args.jobs, use_ray=args.ray,
                      ray_address=args.ray_address, stages=args.stage or None, progress=not args.quiet,
                      cache=not args.no_cache)
    except (FileNotFoundError, ValueError, RuntimeError) as e:
        print(f"hlo scan: {e}", file=sys.stderr)
        return 2
    print(f"{report['modules_scanned']} modules, {len(report['errors'])} errors, {report['seconds']:.1f} s -> "
          f"{args.output}/report.{{json,md,html}}")
    for e in report["errors"]:
        print(f"error: {e['file']}: {e['error'].splitlines()[0]}", file=sys.stderr)
    return 1 if report["errors"] else 0


def register(subparsers) -> None:
    a = subparsers.add_parser("analyze", help="cost, roofline and fusion opportunities of one module")
    a.add_argument("file", help="HLO text (optionally .gz)")
    a.add_argument("--device", default="h100", help="h100, h200, a100, b200, host, or a JSON spec file")
    a.add_argument("--top", type=int, default=10, help="opportunity groups to show")
    a.add_argument("--compare-xla", action="store_true", help="also run XLA's HloCostAnalysis and show the difference")
    a.add_argument("--json", action="store_true", help="print the analysis as JSON")
    a.set_defaults(func=_cmd_analyze)

    s = subparsers.add_parser("scan", help="analyse every module of a folder (or the bundled corpus) into a report")
    s.add_argument("dir", nargs="?", default=None, help="folder of HLO files, an --xla_dump_to folder, or a corpus root "
                                                        "(default: the bundled corpus)")
    s.add_argument("-o", "--output", required=True, help="report folder (report.json, report.md, report.html)")
    s.add_argument("--device", default="h100", help="h100, h200, a100, b200, host, or a JSON spec file")
    s.add_argument("--jobs", "-j", type=int, default=None, help="worker processes (default: CPU count)")
    s.add_argument("--ray", action="store_true", help="run the tasks on Ray (ray.init() locally unless --ray-address)")
    s.add_argument("--ray-address", default=None, help="Ray cluster address for --ray")
    s.add_argument("--stage", action="append", help="only this corpus stage (repeatable)")
    s.add_argument("--no-cache", action="store_true", help="analyse everything again (ignore .cache)")
    s.add_argument("--quiet", "-q", action="store_true", help="no progress bar")
    s.set_defaults(func=_cmd_scan)
