"""Our GPU roofline per kernel vs XLA:GPU's own analytical model (no GPU needed).

XLA:GPU compiled deviceless with ``--xla_gpu_collect_cost_model_stats`` writes its
``GpuPerformanceModel`` estimate into every fusion it keeps
(``hlo_lab.measured.xla_gpu_model``). For each such kernel this compares
``roofline(module, device)``'s time less its launch (XLA's estimate has no
launch) with XLA's ``exec_time``: Spearman rho and the ratio ours/XLA, per module
and by kernel kind (loop, input = reductions and transposes, triton = Triton
non-GEMM fusions, gemm = fusions holding a dot).

GEMM fusions are reported apart and left out of the headline: XLA's model prices
a Triton GEMM at the CUDA-core FMA rate, our roofline at the tensor-core peak
(the honest rate); their XLA GEMM-specific entry (``experimental-gemm-cost-model``)
is shown beside them for reference.

    JAX_PLATFORMS=cpu .venv/bin/python bench/gpu_cost_vs_xla.py [FILES|DIRS] [--target h100] [--json] [--cache DIR]

FILES are pre-optimization modules (compiled here with ``compile_priced`` for
``--target``) or XLA-optimized modules that already carry the estimates (used
as they are); DIRS are searched for module files (``*.txt``, ``*.hlo.txt``,
``.gz``...). With no argument: every unsharded corpus module (about 6 minutes of
compiles; ``--cache DIR`` keeps the optimized modules and reuses them). The last
two lines are ``median_ratio_vs_xla_model=...`` and ``rho_vs_xla_model=...``
(``--json``: one JSON document with ``median_ratio``, ``rho`` and every kernel).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

os.environ.setdefault("JAX_PLATFORMS", "cpu")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402

import corpus  # noqa: E402

from hlo_analysis import devices  # noqa: E402
from hlo_lab.measured import xla_gpu_model  # noqa: E402
from hlo_analysis.rank_stats import spearman  # noqa: E402
from hlo_analysis.roofline import roofline  # noqa: E402
from hlo_tools import parse  # noqa: E402
from hlo_tools.fileio import write_output  # noqa: E402
from hlo_tools.formats import is_module_file  # noqa: E402
from hlo_tools.ir import Instruction, Module  # noqa: E402
from hlo_tools.opcode import HloOpcode  # noqa: E402

KINDS = ("loop", "input", "triton", "gemm")
HEADLINE = ("loop", "input", "triton")
GEMM_REASON = ("gemm kernels left out of the headline: XLA prices a Triton GEMM at the CUDA-core FMA rate, "
               "our roofline at the tensor-core peak")


@dataclass(frozen=True)
class Pair:
    module: str
    name: str
    kind: str
    ours_s: float
    xla_s: float
    xla_gemm_s: float | None  # XLA's experimental-gemm-cost-model entry, when present

    @property
    def ratio(self) -> float:
        return self.ours_s / self.xla_s


def kernel_kind(instr: Instruction) -> str:
    body = instr.fused_computation
    if body is not None and any(i.opcode in (HloOpcode.DOT, HloOpcode.SCALED_DOT) for i in body):
        return "gemm"
    return {"kLoop": "loop", "kInput": "input"}.get(instr.fusion_kind or "", "triton")


def named_entry_s(instr: Instruction, name: str) -> float | None:
    """The exec time of XLA's reification_cost entry called ``name`` (seconds).
    ``xla_gpu_model.estimate_of`` reads the unnamed entry, GpuPerformanceModel's,
    which XLA writes for every fusion: the one model for all kernels."""
    config = instr.backend_config
    for entry in (config.get("reification_cost") or ()) if isinstance(config, dict) else ():
        if entry.get("name") == name and "exec_time_us" in entry:
            return float(entry["exec_time_us"]) * 1e-6
    return None


def pairs_of(label: str, module: Module, device) -> tuple[list[Pair], int]:
    """Every kernel XLA priced, with our time; and how many priced kernels we lack."""
    ours = {(k.computation, k.name): k for k in roofline(module, device).kernels}
    out, missing = [], 0
    for instr, est in xla_gpu_model.priced(module):
        k = ours.get((instr.parent.name, instr.name))
        if k is None or est.exec_s <= 0:
            missing += 1
            continue
        out.append(Pair(label, instr.name, kernel_kind(instr), k.time_s - k.launch_s, est.exec_s,
                        named_entry_s(instr, "experimental-gemm-cost-model")))
    return out, missing


def _files(paths: list[str]) -> list[Path]:
    out = []
    for p in map(Path, paths):
        if p.is_dir():
            # an XLA dump folder: each module's pre-optimization stage (its optimized
            # stages are XLA:CPU's or another target's, not what we compile); any
            # other folder: every module file in it
            dumped = [m.before_optimizations for m in corpus.from_dump_dir(p) if m.before_optimizations]
            out += dumped or sorted(f for f in p.rglob("*") if f.is_file() and is_module_file(f))
        else:
            out.append(p)
    return out


def _priced_text(text: str, target: str, cache: Path | None, label: str) -> str:
    if "reification_cost" in text:
        return text  # already optimized by XLA:GPU with the estimates in
    # keyed by target and by the text itself: another target or another file never hits
    key = f"{label}.{target}.{hashlib.sha256(text.encode()).hexdigest()[:12]}.hlo.txt"
    if cache is not None and (cache / key).is_file():
        return (cache / key).read_text()
    priced = xla_gpu_model.compile_priced(text, target).optimized_text
    if cache is not None:
        write_output(cache / key, priced)
    return priced


def sources(args) -> list[tuple[str, Callable[[], str]]]:
    if args.paths:
        from xla_bridge import read_text
        return [(f.name.split(".")[0] if not f.name.startswith("module_") else f.name, lambda f=f: read_text(f))
                for f in _files(args.paths)]
    return [(e.name, lambda e=e: e.text("before_optimizations")) for e in corpus.load() if not e.sharded]


def dist(rs) -> dict[str, float]:
    r = np.asarray(rs, float)
    if not len(r):
        return {"n": 0}
    return {"n": int(len(r)), "p10": float(np.percentile(r, 10)), "p50": float(np.median(r)),
            "p90": float(np.percentile(r, 90))}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("paths", nargs="*")
    ap.add_argument("--target", default="h100")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--cache", type=Path, default=None, help="keep / reuse the XLA-optimized modules here")
    args = ap.parse_args(argv)
    device = devices.load(args.target)
    allp: list[Pair] = []
    rows, errors = [], []
    for label, read in sources(args):
        try:
            module = parse(_priced_text(read(), args.target, args.cache, label))
        except Exception as ex:  # one bad module is one error line
            errors.append((label, f"{type(ex).__name__}: {str(ex)[:200]}"))
            continue
        ps, missing = pairs_of(label, module, device)
        allp += ps
        head = [p for p in ps if p.kind in HEADLINE]
        rows.append({"module": label, "priced": len(ps) + missing, "compared": len(head), "gemm": len(ps) - len(head),
                     "missing": missing,
                     "rho": spearman([p.ours_s for p in head], [p.xla_s for p in head]) if len(head) > 2 else None,
                     "median_ratio": float(np.median([p.ratio for p in head])) if head else None})
    head = [p for p in allp if p.kind in HEADLINE]
    rho = spearman([p.ours_s for p in head], [p.xla_s for p in head]) if len(head) > 2 else float("nan")
    med = float(np.median([p.ratio for p in head])) if head else float("nan")
    by_kind = {k: dist([p.ratio for p in allp if p.kind == k]) for k in KINDS}
    gemm = [p for p in allp if p.kind == "gemm"]
    gemm_vs_entry = dist([p.ours_s / p.xla_gemm_s for p in gemm if p.xla_gemm_s])
    if args.json:
        print(json.dumps({"target": args.target, "modules": rows, "errors": errors, "by_kind": by_kind,
                          "gemm_vs_gemm_cost_model": gemm_vs_entry, "rho": rho, "median_ratio": med,
                          "overall": dist([p.ratio for p in head]),
                          "kernels": [asdict(p) for p in allp]}, indent=1))
    else:
        print(f"{'module':32} {'priced':>6} {'compared':>8} {'gemm':>5} {'rho':>6} {'median':>7}")
        for r in rows:
            rr = "-" if r["rho"] is None else f"{r['rho']:.3f}"
            mm = "-" if r["median_ratio"] is None else f"{r['median_ratio']:.3f}"
            print(f"{r['module'][:32]:32} {r['priced']:6d} {r['compared']:8d} {r['gemm']:5d} {rr:>6} {mm:>7}")
        for label, err in errors:
            print(f"error: {label}: {err}", file=sys.stderr)
        print(f"\nratio ours/XLA by kernel kind ({args.target}):")
        for k, d in by_kind.items():
            if d["n"]:
                print(f"  {k:7} n={d['n']:5d}  p10 {d['p10']:.3f}  p50 {d['p50']:.3f}  p90 {d['p90']:.3f}")
        if gemm:
            print(f"  ({GEMM_REASON}; vs XLA's experimental-gemm-cost-model entry: "
                  f"n={gemm_vs_entry['n']} p50 {gemm_vs_entry.get('p50', float('nan')):.3f})")
        o = dist([p.ratio for p in head])
        if o["n"]:
            print(f"  all     n={o['n']:5d}  p10 {o['p10']:.3f}  p50 {o['p50']:.3f}  p90 {o['p90']:.3f}")
    if not args.json:  # --json: one JSON document (its "median_ratio" and "rho")
        print(f"median_ratio_vs_xla_model={med:.4f}")
        print(f"rho_vs_xla_model={rho:.4f}")
    return 1 if errors and not allp else 0


if __name__ == "__main__":
    raise SystemExit(main())
