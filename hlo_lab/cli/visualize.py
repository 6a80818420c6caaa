"""``hlo viz`` and ``hlo diff``: thin layers over ``visualize`` functions.

Registered by ``hlo_lab.cli``.  The visualize package (graphviz, the page) is
imported inside the functions that use it: it adds about 22 ms to a start-up
of 270 ms, and with the analysis commands' imports (``cli.analysis``) about
65 ms, to every ``hlo`` command, ``hlo --help`` included (measured).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys

from typing import TYPE_CHECKING

from hlo_tools.errors import HloParseError
from hlo_tools.fileio import check_writable, write_output

from .. import progress
from .inputs import load_verified

if TYPE_CHECKING:  # annotations only: visualize is imported lazily (start-up, above)
    from hlo_tools.ir import Module
    from visualize import FocusOptions, View


def _add_focus_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("focus (graphs of real modules are huge)")
    g.add_argument("--computation", metavar="NAME", help="draw this computation (default: the entry)")
    g.add_argument("--whole-module", action="store_true", help="draw every non-fused computation, each as a cluster")
    g.add_argument("--around", metavar="NAME", help="draw the neighbourhood of this instruction")
    g.add_argument("--radius", type=int, default=2, metavar="K", help="hops from --around (default 2)")
    g.add_argument("--collapse-fusions", action="store_true", help="draw each fusion as one node")
    g.add_argument("--max-nodes", type=int, default=500, metavar="N", help="node budget; what is cut is said in the graph (default 500)")
    g.add_argument("--max-edges", type=int, metavar="M",
                   help="edge budget: dot's time follows the edges (default 1.6 x --max-nodes: 800)")
    g.add_argument("--timeout", type=float, default=20.0, metavar="S",
                   help="seconds Graphviz may lay out; past it, dot is stopped and a view half the size is drawn (default 20)")


def _focus(args: argparse.Namespace):
    from visualize import FocusOptions  # lazy: start-up (module docstring)

    if args.radius < 0 or args.max_nodes < 1 or (args.max_edges is not None and args.max_edges < 1) or args.timeout <= 0:
        raise SystemExit("hlo viz: --radius must be >= 0, --max-nodes and --max-edges >= 1, --timeout > 0")
    return FocusOptions(computation=args.computation, whole_module=args.whole_module, around=args.around,
                        radius=args.radius, collapse_fusions=args.collapse_fusions, max_nodes=args.max_nodes,
                        max_edges=args.max_edges)


def _cmd_viz(args: argparse.Namespace) -> int:
    from visualize import VisualizeError  # lazy: start-up (module docstring)

    check_writable(args.output)  # before parsing and drawing: a bad -o fails at once
    try:
        before = load_verified(args.file)
        after = load_verified(args.after) if args.after else None
    except HloParseError as e:
        print(e.format(), file=sys.stderr)
        return 1
    try:
        return _write(args, before, after)
    except VisualizeError as e:
        print(f"hlo viz: {e}", file=sys.stderr)
        return 1


def _read_profile(path: str, module: Module) -> dict:
    """A ``--profile`` file: ``hlo profile --json`` of ``module`` (the module the
    instruction names belong to)."""
    from visualize import VisualizeError  # lazy: start-up (module docstring)

    try:
        with open(path, encoding="utf-8") as f:
            profile = json.load(f)
    except OSError as e:
        raise VisualizeError(f"--profile {path}: {e.strerror or e}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise VisualizeError(f"--profile {path}: not JSON ({e})") from None
    kernels = profile.get("kernels") if isinstance(profile, dict) else None
    if not isinstance(kernels, list) or not all(isinstance(k, dict) and "name" in k and "measured_s" in k
                                                for k in kernels):
        raise VisualizeError(f"--profile {path}: expected what `hlo profile --json` prints (an object whose "
                             f"\"kernels\" list names instructions and their measured_s)")
    if profile.get("module") != module.name:
        raise VisualizeError(f"--profile {path}: a profile of module {profile.get('module')!r}, not of "
                             f"{module.name!r}: profile the module drawn (its optimized form, as XLA ran it)")
    return profile


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
    from visualize import VisualizeError  # lazy: start-up (module docstring)
    from visualize.render import LayoutTimeout  # lazy: start-up (module docstring)

    options = _focus(args)
    out: str = args.output
    suffix = out.rsplit(".", 1)[-1].lower() if "." in out else ""
    if after is not None and suffix != "html":
        raise VisualizeError("--after makes a before/after page: write it to a .html file")
    summary = _read_summary(args.summary) if args.summary else None
    if args.after_profile and after is None:
        raise VisualizeError("--after-profile is the profile of the --after module: give --after too")
    profiles = (_read_profile(args.profile, before) if args.profile else None,
                _read_profile(args.after_profile, after) if args.after_profile else None)
    view = _select(before, options)
    _say_what_was_cut(view, options)
    try:
        data = _draw(args, before, after, options, view, summary, profiles)
    except LayoutTimeout:
        smaller = dataclasses.replace(options, max_nodes=max(1, min(options.max_nodes, view.node_count) // 2),
                                      max_edges=max(1, min(options.edge_budget, view.edge_count) // 2))
        print(f"hlo viz: Graphviz's dot did not finish within {args.timeout:g} s on {view.node_count} nodes and "
              f"{view.edge_count} edges (stopped); drawing a smaller view: --max-nodes {smaller.max_nodes} "
              f"--max-edges {smaller.max_edges}", file=sys.stderr)
        view = _select(before, smaller)
        _say_what_was_cut(view, smaller)
        data = _draw(args, before, after, smaller, view, summary, profiles)  # a second LayoutTimeout is the error
    write_output(out, data)
    print(f"wrote {out}")
    return 0


def _select(module: Module, options: FocusOptions) -> View:
    from visualize import select  # lazy: start-up (module docstring)

    return select(module, options)


def _say_what_was_cut(view: View, options: FocusOptions) -> None:
    """The view's notice on stderr (what was dropped), and, when the budget
    dropped something, the options that show more."""
    from visualize.view import suggest_focus  # lazy: start-up (module docstring)

    if not view.notice:
        return
    print(f"note: {view.notice}", file=sys.stderr)
    if "collapsed" not in view.notice and "within the budget" not in view.notice:
        return  # only the focus cut (--around): nothing the budget hid
    more = []
    if not options.around:
        focus = suggest_focus(view)
        more.append(f"--around {focus.name} --radius 3" if focus is not None else "--around NAME --radius K")
    if not options.collapse_fusions and "collapsed" not in view.notice:
        more.append("--collapse-fusions")
    more.append(f"--max-nodes {options.max_nodes * 2} --max-edges {options.edge_budget * 2} "
                f"(dot's time grows faster than the graph: add --timeout 60)")
    print(f"note: to see more: {'; '.join(more)}", file=sys.stderr)


def _draw(args: argparse.Namespace, before: Module, after: Module | None, options: FocusOptions, view: View,
          summary: list[dict] | None, profiles: tuple[dict | None, dict | None]) -> bytes | str:
    """The output file's content; the Graphviz layout runs under the timeout, with progress."""
    from visualize import VisualizeError, before_after_html, single_html, to_dot  # lazy: start-up (module docstring)
    from visualize.page import profile_notes  # lazy: start-up (module docstring)
    from visualize.render import RENDERED, render, time_limit  # lazy: start-up (module docstring)

    out: str = args.output
    suffix = out.rsplit(".", 1)[-1].lower() if "." in out else ""
    notes = profile_notes(profiles[0]) if profiles[0] else None
    if suffix in ("dot", "gv"):
        return to_dot(view, notes=notes)  # text: no layout
    if suffix != "html" and suffix not in RENDERED:
        raise VisualizeError(f"{out}: unknown output suffix {'.' + suffix if suffix else '(none)'!r}; "
                                        "use .dot, .svg, .png, .pdf or .html")
    what = f"laying out {view.node_count:,} nodes, {view.edge_count:,} edges with Graphviz (limit {args.timeout:g} s)"
    with progress.line(what, progress.wanted(args)), time_limit(args.timeout):
        if suffix != "html":
            return render(to_dot(view, notes=notes), suffix, timeout=args.timeout)
        if after is not None:
            return before_after_html(before, after, options, summary=summary, profiles=profiles)
        return single_html(before, options, profile=profiles[0])


def _cmd_diff(args: argparse.Namespace) -> int:
    from visualize import diff_modules, format_diff  # lazy: start-up (module docstring)

    try:
        d = diff_modules(load_verified(args.before), load_verified(args.after))
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
    v.add_argument("--profile", metavar="JSON", help="`hlo profile FILE --json` output: each node's measured time "
                                                     "and percent of roofline on the graph, a table of the slowest")
    v.add_argument("--after-profile", metavar="JSON", help="the same for the --after module (before/after page)")
    v.add_argument("-q", "--quiet", action="store_true", help="no progress while Graphviz lays out")
    _add_focus_arguments(v)
    v.set_defaults(func=_cmd_viz)
    d = subparsers.add_parser("diff", help="what changed between two modules: added, removed, fused, per-opcode counts")
    d.add_argument("before")
    d.add_argument("after")
    d.add_argument("--json", action="store_true", help="the diff as JSON")
    d.add_argument("--limit", type=int, default=20, help="names listed per section (default 20)")
    d.set_defaults(func=_cmd_diff)
