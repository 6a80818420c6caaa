"""``hlo profile``: measured time per instruction next to the roofline, from a
run under XLA's profiler or from a trace the user brings
(``xla_bridge.trace`` reads it, ``hlo_analysis.profiles`` joins it)."""

from __future__ import annotations

import json
import sys

from hlo_tools.errors import HloError, HloParseError
from hlo_tools.fileio import check_writable, write_output
from hlo_tools.ir import Module
from hlo_tools.parser import parse
from hlo_tools.written import Written, WrittenNames, stamp_names, twins
from xla_bridge.compiler import compile as xla_compile
from xla_bridge.errors import XlaCompileError
from xla_bridge.trace import TraceUnavailable, profile_module, read_trace
from hlo_analysis.units import finite, fmt_seconds

from .. import progress
from ..console import stdout_console
from .args import at_least_one, seed
from .inputs import load_verified


def _device_for(events, asked: str | None) -> tuple[str, str]:
    """The device model for a trace: ``--device``, else the host for a trace of
    XLA:CPU (its events on the host plane), h100 for a GPU's."""
    if asked:
        return asked, "--device"
    if any(e.plane.startswith("/device:GPU") for e in events):
        return "h100", "a GPU trace and no --device: the default GPU"
    return "host", "XLA:CPU events: the host CPU model"


def _as_written(user: Module, optimized: Module) -> dict[tuple[str, str], Written | None]:
    """Each instruction of XLA's ``optimized`` module of ``user`` as the user's file
    has it (``hlo_tools.written``; None: XLA made it): XLA renames what it compiles,
    so the user's module is compiled once more with its names stamped into the
    metadata and the two optimized modules are paired.  Empty when they do not pair."""
    stamped = xla_compile(stamp_names(user.clone()), "cpu", contained=True).optimized_text
    pairs = twins(optimized, parse(stamped, source=f"<{user.name} stamped, optimized by XLA:cpu>"))
    if pairs is None:
        return {}
    written = WrittenNames(user)
    return {key: written.find(ins, stamped=True) for key, ins in pairs.items()}


def _cmd_profile(args) -> int:
    from hlo_analysis import devices, profiles  # lazy: start-up (cli.analysis' docstring)

    if args.pgle:
        check_writable(args.pgle)  # before any run: a bad path fails at once
    if args.model_explorer:
        check_writable(args.model_explorer, directory=True)
    as_written: dict[tuple[str, str], Written | None] = {}  # none with --trace: FILE is the module that ran, its names the user's
    try:
        module = load_verified(args.file)
        if args.trace:
            events = read_trace(args.trace)
            how = f"trace {args.trace}"
        else:
            with progress.status(f"profiling {module.name}: {args.reps} runs", progress.wanted(args)):
                text, events = profile_module(module.to_text(), reps=args.reps, warmup=args.warmup, seed=args.seed,
                                              name=module.name)
            user, module = module, parse(text, source=f"<{module.name} optimized by XLA:cpu stock>")
            how = f"{args.reps} runs on XLA:CPU (stock pipeline)"
            as_written = _as_written(user, module)
        device, why = _device_for(events, args.device)
        model = devices.load(device)
        joined = profiles.join(module, events, model, program_id=args.program_id)
        if args.pgle:
            write_output(args.pgle, profiles.pgle_text(profiles.pgle_costs(module, events, program_id=joined.program_id)))
        explorer = None
        if args.model_explorer:
            from visualize.model_explorer.graphs import command_line, write_files  # lazy: start-up

            explorer = command_line(write_files(args.model_explorer, module, model, joined))
    except HloParseError as e:
        print(e.format(), file=sys.stderr)
        return 1
    except (TraceUnavailable, profiles.ProfileJoinError, OSError) as e:
        print(f"hlo profile: {e}", file=sys.stderr)
        return 1
    except (XlaCompileError, HloError, ValueError) as e:
        print(f"hlo profile: {e}", file=sys.stderr)
        return 2
    d = joined.as_dict(top=None if args.json else args.top)
    for k in d["kernels"]:
        w = as_written.get((k["computation"], k["name"]))
        k["as_written"] = w.as_dict() if w is not None else None
    if args.json:
        print(json.dumps(finite({**d, "source": how, "device_why": why,
                                 **({"model_explorer": explorer} if explorer else {})}), indent=1))
        return 0
    from rich.table import Table

    from ..scan_report import fmt_rate  # lazy: start-up (cli.analysis' docstring)

    con = stdout_console()
    on = f" on {joined.devices} devices (times per device)" if joined.devices > 1 else ""
    con.print(f"[bold]{joined.module}[/] (program {joined.program_id}): {how}, {joined.runs} runs in the trace{on}")
    con.print(f"device model {device} ({why})")
    con.print(f"measured {fmt_seconds(joined.device_s)} per run, {100 * joined.joined_share:.2f}% of it joined to "
              f"{len(joined.kernels)} instructions; predicted {fmt_seconds(joined.predicted_s)}; "
              f"rank correlation measured vs model {d['rho_measured_vs_model'] or float('nan'):.3f}")
    if joined.unjoined:
        con.print("not in the module: " + ", ".join(f"{n} ({fmt_seconds(s)})" for n, s in list(d["unjoined"].items())[:5]))
    if explorer:
        con.print(f"Model Explorer, with measured time, predicted time, roofline and bytes per node: {explorer}",
                  soft_wrap=True)
    if args.pgle:
        con.print(f"wrote {args.pgle}: XLA's profile-guided latency estimator input (mean event time per instruction)")
    if joined.others:
        con.print(f"the trace also holds {len(joined.others)} other program(s): "
                  + ", ".join(f"{m} ({p})" for m, p in list(joined.others)[:5]))
    t = Table(title=f"top {args.top} instructions by measured time (per run)")
    written_col = ("as written",) if as_written else ()
    for col in ("instruction", *written_col, "pattern", "calls", "measured", "predicted", "roofline", "bandwidth",
                "flop rate", "bound"):
        t.add_column(col, no_wrap=True, overflow="ellipsis", justify="left" if col in ("instruction", "as written",
                     "pattern", "bound") else "right", max_width=40 if col in ("instruction", "as written") else None)
    for k in d["kernels"]:
        pct = k["roofline_pct"]
        w = as_written.get((k["computation"], k["name"]))
        said = (str(w) if w is not None else "-",) if as_written else ()
        t.add_row(k["name"], *said, k["label"], f"{k['executions']:g}", fmt_seconds(k["measured_s"]),
                  fmt_seconds(k["predicted_s"]), "-" if pct is None else f"{pct:.0f}%",
                  fmt_rate(k["bytes_per_s"], "B/s") if k["bytes_per_s"] else "-",
                  fmt_rate(k["flops_per_s"], "FLOP/s") if k["flops_per_s"] else "-", k["bound"])
    con.print(t)
    return 0


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "profile", help="measured time per instruction next to the roofline (a run under XLA's profiler, or a trace)",
        description="Runs FILE on XLA:CPU under XLA's profiler (or reads --trace, a jax.profiler.trace folder or "
                    ".xplane.pb from any machine, with FILE the optimized module that ran), joins every event to "
                    "its instruction by XLA's hlo_op/hlo_module/program_id keys, and prints per instruction: "
                    "measured time per run, the cost model's prediction on the device, achieved bandwidth and "
                    "flop rate, percent of roofline, and the pattern label.")
    p.add_argument("file", help="HLO text, .hlo.pb or .mlir (optionally .gz); with --trace, the optimized module "
                                "that ran (an after_optimizations dump)")
    p.add_argument("--trace", default=None, metavar="DIR", help="read this trace instead of running FILE")
    p.add_argument("--reps", type=at_least_one, default=10, help="traced runs (default 10)")
    p.add_argument("--warmup", type=at_least_one, default=2, help="untraced runs first (default 2)")
    p.add_argument("--device", default=None, help="device model for the predictions (default: host for XLA:CPU "
                                                  "events, h100 for a GPU trace)")
    p.add_argument("--program-id", type=int, default=None, help="which program of the module, when the trace "
                                                                "holds several (default: the one with most events)")
    p.add_argument("--pgle", default=None, metavar="OUT.pbtxt",
                   help="also write the profile as XLA's PGLE input (ProfiledInstructionsProto text, keyed as XLA "
                        "keys it), for --xla_gpu_pgle_profile_file_or_directory_path")
    p.add_argument("--model-explorer", default=None, metavar="DIR",
                   help="write the module and per-node data (measured, predicted, roofline %%, bytes) for Model "
                        "Explorer into DIR, and print the command that opens them")
    p.add_argument("--top", type=int, default=15, help="instructions to show (--json has all)")
    p.add_argument("--json", action="store_true", help="print the join as JSON")
    p.add_argument("--seed", type=seed, default=0, help="input seed (default 0)")
    p.set_defaults(func=_cmd_profile)
