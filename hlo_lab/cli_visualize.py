"""``hlo viz`` and ``hlo diff``: thin layers over ``visualize`` functions.

Registered by ``hlo_lab.cli``.  The visualize package (graphviz, the page) is
imported inside the functions that use it: it adds about 22 ms to a start-up
of 270 ms, and with the analysis commands' imports (``cli_analysis``) about
65 ms, to every ``hlo`` command, ``hlo --help`` included (measured).
"""

from __future__ import annotations

import argparse
import json
import sys

from hlo_tools.errors import HloParseError
from hlo_tools.fileio import check_writable, write_output
from xla_bridge import load


def _add_focus_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("focus (graphs of real modules are huge)")
    g.add_argument("--computation", metavar="NAME", help="draw this computation (default: the entry)")
    g.add_argument("--whole-module", action="store_true", help="draw every non-fused computation, each as a cluster")
    g.add_argument("--around", metavar="NAME", help="draw the neighbourhood of this instruction")
    g.add_argument("--radius", type=int, default=2, metavar="K", help="hops from --around (default 2)")
    g.add_argument("--collapse-fusions", action="store_true", help="draw each fusion as one node")
    g.add_argument("--max-nodes", type=int, default=500, metavar="N", help="node budget; what is cut is said in the graph (default 500)")


def _focus(args: argparse.Namespace):
    from visualize import FocusOptions  # lazy: start-up (module docstring)

    if args.radius < 0 or args.max_nodes < 1:
        raise SystemExit("hlo viz: --radius must be >= 0 and --max-nodes >= 1")
    return FocusOptions(computation=args.computation, whole_module=args.whole_module, around=args.around,
                        radius=args.radius, collapse_fusions=args.collapse_fusions, max_nodes=args.max_nodes)


def _cmd_viz(args: argparse.Namespace) -> int:
    from visualize import VisualizeError  # lazy: start-up (module docstring)

    check_writable(args.output)  # before parsing and drawing: a bad -o fails at once
    try:
        before = load(args.file)
        after = load(args.after) if args.after else None
    except HloParseError as e:
        print(e.format(), file=sys.stderr)
        return 1
    try:
        return _write(args, before, after)
    except VisualizeError as e:
        print(f"hlo viz: {e}", file=sys.stderr)
        return 1


def _read_summary(path: str) -> list[dict]:
    """The ``--summary`` file: a JSON list of objects, one per pass (what the
    page's pass table shows); anything else is a VisualizeError saying so."""
    from visualize import VisualizeError  # lazy: start-up (module docstring)

    try:
        with open(path, encoding="utf-8") as f:
            summary = json.load(f)
    except OSError as e:
        raise VisualizeError(f"--summary {path}: {e.strerror or e}") from None
    except (ValueError, UnicodeDecodeError) as e:
        raise VisualizeError(f"--summary {path}: not JSON ({e})") from None
    if not isinstance(summary, list) or not all(isinstance(row, dict) for row in summary):
        raise VisualizeError(f"--summary {path}: expected a JSON list of objects, one per pass "
                             f'(e.g. [{{"pass": "dce", "changed": true}}]), got {type(summary).__name__}')
    return summary


def _write(args: argparse.Namespace, before, after) -> int:
    from visualize import VisualizeError, before_after_html, select, single_html, to_dot, write_graph  # lazy: start-up

    options = _focus(args)
    out: str = args.output
    if out.endswith(".html"):
        summary = _read_summary(args.summary) if args.summary else None
        text = before_after_html(before, after, options, summary=summary) if after is not None else single_html(before, options)
        write_output(out, text)
    else:
        if after is not None:
            raise VisualizeError("--after makes a before/after page: write it to a .html file")
        view = select(before, options)
        write_graph(to_dot(view), out)
        if view.notice:
            print(f"note: {view.notice}", file=sys.stderr)
    print(f"wrote {out}")
    return 0


def _cmd_diff(args: argparse.Namespace) -> int:
    from visualize import diff_modules, format_diff  # lazy: start-up (module docstring)

    try:
        d = diff_modules(load(args.before), load(args.after))
    except HloParseError as e:
        print(e.format(), file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(d.as_dict(), indent=2))
    else:
        sys.stdout.write(format_diff(d, limit=args.limit))
    return 0


def register(subparsers) -> None:
    """Adds ``viz`` and ``diff`` to the ``hlo`` command."""
    v = subparsers.add_parser("viz", help="draw a module (DOT/SVG/PNG/HTML), or a before/after page with --after",
                              description="Draw an HLO module: -o out.dot|out.svg|out.png|out.html; with --after B "
                                          "and -o out.html, a self-contained before/after page.")
    v.add_argument("file")
    v.add_argument("-o", "--output", required=True, help="output file; its suffix picks the format")
    v.add_argument("--after", metavar="FILE", help="the module after a pass: makes a before/after page (.html)")
    v.add_argument("--summary", metavar="JSON", help="pass summary for the page: a JSON list of objects, one per pass")
    _add_focus_arguments(v)
    v.set_defaults(func=_cmd_viz)
    d = subparsers.add_parser("diff", help="what changed between two modules: added, removed, fused, per-opcode counts")
    d.add_argument("before")
    d.add_argument("after")
    d.add_argument("--json", action="store_true", help="the diff as JSON")
    d.add_argument("--limit", type=int, default=20, help="names listed per section (default 20)")
    d.set_defaults(func=_cmd_diff)
