"""``hlo quantize``: chosen dots rewritten to 8 bits, with what XLA:GPU made of each
(lowering), the outputs' error on XLA:CPU and the predicted speed
(``hlo_lab.quantize``)."""

from __future__ import annotations

import json
import sys

from hlo_tools.errors import HloError, HloParseError
from hlo_tools.fileio import check_writable, write_output
from xla_bridge.errors import XlaCompileError
from hlo_analysis.units import finite, fmt_seconds

from .. import progress
from .args import seed
from .inputs import load_verified


def _cmd_quantize(args) -> int:
    from hlo_lab.quantize import quantize  # lazy: start-up (cli.analysis' docstring)

    if args.output:
        check_writable(args.output)
    scope = tuple(s.strip() for s in args.scope.split(",") if s.strip())
    try:
        module = load_verified(args.file)
        with progress.status(f"quantize {module.name}: compiling for {args.target}, running on XLA:CPU",
                             progress.wanted(args)):
            quantized, report = quantize(module, form=args.dtype, scope=scope, min_flops=args.min_flops,
                                         skip=tuple(args.skip or ()), granularity=args.granularity or "",
                                         scales=args.scales, gradients=args.gradients, weights=args.weights, target=args.target,
                                         seed=args.seed, error="none" if args.no_error else args.error)
    except HloParseError as e:
        print(e.format(), file=sys.stderr)
        return 1
    except (XlaCompileError, HloError, ValueError) as e:
        print(f"hlo quantize: {e}", file=sys.stderr)
        return 2
    if args.output:
        write_output(args.output, quantized.to_text())
    for d in report.fallbacks:
        print(f"warning: {d['dot']} ({d['computation']}) does not run on 8 bits: XLA:GPU made it {d['gemm'] or 'no GEMM found'}"
              + (f" multiplying {'/'.join(d['types'])}" if d["types"] else ""), file=sys.stderr)
    if args.json:
        print(json.dumps(finite(report.as_dict()), indent=1))
        return 0
    s, e = report.speed, report.error
    o = report.options
    print(f"{report.module}: {len(report.dots)} dots rewritten to {report.form} ({o['granularity']} scales from "
          f"{'the amax in the module' if o['scales'] == 'amax' else 'parameters'}"
          + (", weights arriving quantized" if o['weights'] == 'parameter' else "")
          + (f", gradients {o['gradients']}" if o['gradients'] != 'e4m3' else "")
          + f"; {len(report.gemm_dots)} GEMMs at stock, the rest XLA turns into elementwise code)")
    tensor = [d for d in report.dots if o["granularity"] == "channel" and d.get("granularity") == "tensor"]
    if tensor:
        print(f"{len(tensor)} dots keep per-tensor scales (their batch dimensions are not in order in the output)")
    amax = [d for d in report.dots if o["scales"] == "parameter" and d.get("scales") == "amax"]
    if amax:
        print(f"{len(amax)} dots keep scales computed in the module (outside the entry computation, where no "
              f"parameter can reach)")
    merged = [d for d in report.dots if d.get("merged_with")]
    if merged:
        print(f"{len(merged)} dots share a GEMM with another (XLA's dot merger)")
    print(f"lowering on {report.target}: {100 * report.lowered_share:.1f}% of the GEMM flops run on 8 bits"
          + (f"; {len(report.fallbacks)} fall back (warnings above)" if report.fallbacks else ""))
    if s:
        print(f"predicted on {report.target}: GEMMs {fmt_seconds(s['gemm_before_s'])} -> {fmt_seconds(s['gemm_after_s'])} "
              f"({s['gemm_speedup']:.2f}x), module {fmt_seconds(s['module_before_s'])} -> "
              f"{fmt_seconds(s['module_after_s'])} ({s['module_speedup']:.2f}x, the quantize ops included)")
    if e:
        print(f"error on XLA:CPU ({e['on']}): max abs {e['max_abs']:.3g}, max rel {e['max_rel']:.3g}, "
              f"{100 * e['within_tolerance']:.2f}% of elements within 1e-2 (XLA's fp8 test tolerance)")
    if args.output:
        print(f"wrote {args.output}")
    return 0


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "quantize", help="rewrite dots to fp8/int8 and check lowering (deviceless GPU), error (XLA:CPU) and speed",
        description="Rewrites the chosen dots of FILE (passes.quantize) and reports, per dot and in total: what "
                    "XLA:GPU made of it on a deviceless compile (an 8-bit GEMM, or a fallback, named), the outputs' "
                    "error against the original on XLA:CPU, and the predicted time before and after.")
    p.add_argument("file", help="HLO text, .hlo.pb or .mlir (optionally .gz): a module before XLA's optimizations")
    p.add_argument("--dtype", default="fp8", help="fp8 (direct, epilogue scaling), fp8-qdq (quantize-dequantize), "
                                                  "int8 (s8 x s8 -> s32), int8w (weight-only, per channel)")
    p.add_argument("--scope", default="all", help="which dots: all, or a comma list of attn, mlp, logits, proj")
    p.add_argument("--min-flops", type=int, default=0, help="leave smaller dots alone")
    p.add_argument("--skip", action="append", metavar="NAME", help="a dot to leave alone (repeatable)")
    p.add_argument("--granularity", default=None,
                   help="one scale per tensor, or per channel (rows of the left operand, columns of the right); "
                        "default: channel for int8w, tensor otherwise")
    p.add_argument("--scales", default="amax",
                   help="amax: computed in the module (default); parameter: delayed scaling, each scale a new "
                        "entry parameter")
    p.add_argument("--weights", default="module",
                   help="module: weights quantized in the module (default); parameter: a weight that only chosen dots "
                        "read arrives 8-bit, its scale a parameter (pre-quantized weights)")
    p.add_argument("--gradients", default="e4m3",
                   help="fp8 type of gradient operands (those reading the logits dot's value; default e4m3)")
    p.add_argument("--target", default="h100", help="the GPU compiled for without a GPU (default h100)")
    p.add_argument("--error", default="auto",
                   help="measure the error on the whole module or on each distinct dot extracted; auto: the whole "
                        "module when it fits in 2 GiB")
    p.add_argument("--no-error", action="store_true", help="skip the run on XLA:CPU")
    p.add_argument("--seed", type=seed, default=0, help="input seed for the error run (default 0)")
    p.add_argument("-o", "--output", default=None, help="write the quantized module here")
    p.add_argument("--json", action="store_true", help="the report as JSON")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress line")
    p.set_defaults(func=_cmd_quantize)
