"""Each GPU kernel's device time against both models: our GPU roofline and XLA:GPU's
own performance model (its per-fusion estimates, ``hlo_lab.measured.xla_gpu_model``).

On a GPU: stock XLA:GPU compiles each module with XLA's estimates collected, runs
it on deterministic inputs under the profiler (``trace.device_kernel_times``:
CUPTI device time per kernel, named after its instruction), and every kernel XLA
priced is printed with its measured time, our prediction and XLA's (no launch
overhead on either side: it is not in a kernel's device time). Per module and
pooled: Spearman rho and the median ratio model/measured for each model.
The roofline's device is the visible GPU's (``--device``, default from its name).

Without a GPU (``--rehearse``): the same modules compiled for ``--device`` without
one, both models side by side, so that the script is checked where no GPU is.

    .venv/bin/python bench/gpu_kernels_vs_models.py [--only GLOB] [--reps N] [--device h200] [--rehearse]
"""

from __future__ import annotations

import argparse
import fnmatch
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402

import corpus  # noqa: E402
from hlo_analysis import devices  # noqa: E402
from hlo_lab.measured import xla_gpu_model  # noqa: E402
from hlo_analysis.rank_stats import spearman  # noqa: E402
from hlo_analysis.roofline import roofline  # noqa: E402
from xla_bridge import jax_internals  # noqa: E402
from xla_bridge.measure import STOCK, Measurement  # noqa: E402
from xla_bridge.inputs import make_inputs  # noqa: E402
from xla_bridge.trace import TraceUnavailable, device_kernel_times  # noqa: E402

DEFAULT_ONLY = "llama3-tiny-decode-f32,llama3-tiny-train-f32"


def _device_name() -> str:
    kind = jax_internals.get_client("gpu").local_devices()[0].device_kind.lower()
    return next((n for n in ("h200", "h100", "b200", "a100") if n in kind), "h100")


def _models(module, device) -> dict[str, tuple[float, float | None, str]]:
    """kernel name -> (our body time, XLA's estimate or None, kind), seconds."""
    xla_est = {i.name: (est.exec_s, i) for i, est in xla_gpu_model.priced(module)}
    out = {}
    for k in roofline(module, device).kernels:
        if k.computation != module.entry.name:
            continue
        est, instr = xla_est.get(k.name, (None, None))
        gemm = instr is not None and xla_gpu_model.is_gemm_fusion(instr)
        out[k.name] = (k.time_s - k.launch_s, None if gemm else est, "gemm" if gemm else "other")
    return out


def _line(label: str, a, b) -> str:
    a, b = np.asarray(a, float), np.asarray(b, float)
    if len(a) < 3:
        return f"{label}: {len(a)} kernels"
    return f"{label}: rho {spearman(a, b):.3f}, median ratio {np.median(a / b):.3f} over {len(a)} kernels"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default=DEFAULT_ONLY, help="comma-separated fnmatch patterns of corpus module names")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--device", default=None, help="the roofline's device (default: the visible GPU's, else h100)")
    ap.add_argument("--rehearse", action="store_true", help="no GPU: compile without one and print the models only")
    args = ap.parse_args(argv)

    on_gpu = not args.rehearse and jax_internals.backend_available("gpu")
    if not on_gpu and not args.rehearse:
        print("no GPU: run with --rehearse to check the script here")
        return 0
    name = args.device or (_device_name() if on_gpu else "h100")
    device = devices.load(name)
    patterns = [p for p in args.only.split(",") if p]
    entries = [e for e in corpus.load() if not e.sharded and any(fnmatch.fnmatch(e.name, p) for p in patterns)]
    if not entries:
        print(f"no unsharded corpus module matches {args.only!r}", file=sys.stderr)
        return 2
    measurement = Measurement("gpu", target=None if on_gpu else name, flags={xla_gpu_model.COLLECT_FLAG: True})
    print(f"{'measured on this GPU' if on_gpu else 'rehearsal without a GPU: models only'}; roofline device {name}")
    pooled: dict[str, list] = {"ours": [], "xla": [], "meas_o": [], "meas_x": []}
    for e in entries:
        text = e.text("before_optimizations")
        res = measurement.compile(text, STOCK)
        module = res.optimized_module
        models = _models(module, device)
        if on_gpu:
            try:
                times = device_kernel_times(res, make_inputs(module, sets=1), reps=args.reps)
            except TraceUnavailable as ex:
                print(f"{e.name}: {ex}")
                continue
            by_name = {n.replace(".", "_"): v for n, v in models.items()}
            rows = [(by_name[n], t * 1e-6) for n, t in times.items() if n in by_name]
            ours = [(m[0], t) for m, t in rows]
            xla_rows = [(m[1], t) for m, t in rows if m[1] is not None]
            pooled["ours"] += [o for o, _ in ours]
            pooled["meas_o"] += [t for _, t in ours]
            pooled["xla"] += [x for x, _ in xla_rows]
            pooled["meas_x"] += [t for _, t in xla_rows]
            print(f"{e.name}: {len(rows)} of {len(models)} kernels found in the trace; "
                  f"measured {sum(t for _, t in rows) * 1e6:.1f} us, ours {sum(o for o, _ in ours) * 1e6:.1f} us")
            print("  " + _line("ours/measured", [o for o, _ in ours], [t for _, t in ours]))
            print("  " + _line("XLA/measured ", [x for x, _ in xla_rows], [t for _, t in xla_rows]))
        else:
            both = [(o, x) for o, x, _ in models.values() if x is not None]
            print(f"{e.name}: {len(models)} kernels, XLA priced {len(both)} (GEMMs apart); "
                  + _line("ours/XLA", [o for o, _ in both], [x for _, x in both]))
    if on_gpu and pooled["ours"]:
        print(_line("all kernels, ours/measured", pooled["ours"], pooled["meas_o"]))
        print(_line("all kernels, XLA/measured ", pooled["xla"], pooled["meas_x"]))
        print(f"rho_ours_vs_measured={spearman(pooled['ours'], pooled['meas_o']):.3f}")
        print(f"rho_xla_vs_measured={spearman(pooled['xla'], pooled['meas_x']):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
