"""How long drawing large modules takes.

Default: the before/after page of a large module and its size (issue 7: with a
focus option, over 10,000 instructions in under 30 s and under 5 MB).
``--cli``: ``hlo viz`` at default options, as a user runs it, on the largest
CPU-optimized corpus train step and on the 4k-instruction one that sat in dot
for 13 minutes (issue 20: under 60 s).  ``--sweep``: dot's time against the edge
budget, with and without the nslimit cap; what the defaults (800 edges, nslimit=2,
20 s timeout) were set from, and the "before" (no edge budget, no cap).
Prints the figures; asserts nothing.

    JAX_PLATFORMS=cpu .venv/bin/python bench/viz_speed.py [--module NAME] [--around NAME] [--radius K]
    JAX_PLATFORMS=cpu .venv/bin/python bench/viz_speed.py --cli
    JAX_PLATFORMS=cpu .venv/bin/python bench/viz_speed.py --sweep [--limit S]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("JAX_PLATFORMS", "cpu")

from hlo_tools.opcode import HloOpcode  # noqa: E402
import corpus  # noqa: E402
from visualize import FocusOptions, diff_modules, select, to_dot  # noqa: E402
from visualize.dot import NSLIMIT  # noqa: E402
from visualize.render import LayoutTimeout, render  # noqa: E402
from visualize.page import before_after_html  # noqa: E402
from hlo_lab.samples import corpus_module, jax_pair  # noqa: E402


ROOT = Path(__file__).resolve().parent.parent
STAGE = "cpu_after_optimizations"
HUNG = "gemma2-tiny-train-f32"  # issue 20's 4k-instruction train step


def train_steps() -> list[tuple[int, str]]:
    """(instructions, name) of the corpus's CPU-optimized train steps, smallest first."""
    return sorted((e.meta["instructions"][STAGE], e.name) for e in corpus.load() if e.workload == "train" and STAGE in e.files)


def cli() -> int:
    """``hlo viz`` as a user runs it (a fresh process, default options)."""
    steps = train_steps()
    largest = steps[-1][1]
    with tempfile.TemporaryDirectory() as tmp:
        for name in (largest, HUNG):
            path = Path(tmp) / f"{name}.hlo"
            path.write_text(next(iter(corpus.load(name))).text(STAGE))
            for suffix in ("svg", "html"):
                t0 = time.perf_counter()
                p = subprocess.run([sys.executable, "-m", "hlo_lab.cli", "viz", str(path), "-o", f"{tmp}/g.{suffix}", "-q"],
                                   capture_output=True, text=True, cwd=ROOT)
                took = time.perf_counter() - t0
                n = dict((s, i) for i, s in steps)[name]
                print(f"hlo viz {name} ({n:,} instructions, {STAGE}) -o g.{suffix}: {took:.1f} s, exit {p.returncode}  [target < 60 s]")
                for line in p.stderr.splitlines():
                    print("    " + line[:200])
    return 0


def _time_dot(source: str, limit: float) -> str:
    t0 = time.perf_counter()
    try:
        render(source, "svg", timeout=limit)
    except LayoutTimeout:
        return f">{limit:g}"
    return f"{time.perf_counter() - t0:.1f}"


def sweep(limit: float, names: list[str]) -> int:
    """dot's seconds per edge budget, capped (nslimit=2, as drawn) and uncapped."""
    print(f"{'module':34} {'max_edges':>9} {'nodes':>6} {'edges':>6} {'dot s':>7} {'uncapped s':>10}")
    for name in names:
        module = corpus_module(name, STAGE)
        for max_edges in (400, 600, 800, 1000, 10**9):
            view = select(module, FocusOptions(max_edges=max_edges))
            source = to_dot(view)
            label = "none" if max_edges == 10**9 else str(max_edges)
            print(f"{name:34} {label:>9} {view.node_count:>6} {view.edge_count:>6} {_time_dot(source, limit):>7} "
                  f"{_time_dot(source.replace(f'nslimit={NSLIMIT}', ''), limit):>10}", flush=True)
    print("'none' + uncapped is the drawing before issue 20 (500 nodes, no edge budget, no nslimit).")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cli", action="store_true", help="time `hlo viz` on the largest CPU train step and on the one that hung")
    ap.add_argument("--sweep", action="store_true", help="dot's time against the edge budget")
    ap.add_argument("--limit", type=float, default=60, help="--sweep: seconds before a dot run is stopped (default 60)")
    ap.add_argument("--modules", default=f"{HUNG},llama3-tiny-train-f32,qwen3_moe-tiny-train-f32-dp2tp4,qwen3_moe-full-train-bf16",
                    help="--sweep: corpus modules, comma-separated")
    ap.add_argument("--module", default="llama3-full-train-bf16", help="bundled corpus module (default: llama3-full-train-bf16)")
    ap.add_argument("--around", help="instruction to focus on (default: the middle dot of the entry)")
    ap.add_argument("--radius", type=int, default=3)
    ap.add_argument("--max-nodes", type=int, default=500)
    ap.add_argument("-o", "--output", default="results/viz_speed.html")
    args = ap.parse_args()
    if args.cli:
        return cli()
    if args.sweep:
        return sweep(args.limit, args.modules.split(","))

    t0 = time.perf_counter()
    before = corpus_module(args.module, "before_optimizations")
    after = corpus_module(args.module, "cpu_after_optimizations")
    source = f"corpus {args.module} (before / XLA:CPU after)"
    if before is None or after is None:
        before, after = jax_pair(layers=1500)
        source = "jax 1500-layer MLP (lowered / XLA:CPU compiled)"
    t_load = time.perf_counter() - t0
    dots = [i for i in before.entry if i.opcode is HloOpcode.DOT]
    around = args.around or dots[len(dots) // 2].name
    options = FocusOptions(around=around, radius=args.radius, max_nodes=args.max_nodes)

    t1 = time.perf_counter()
    d = diff_modules(before, after)
    t_diff = time.perf_counter() - t1
    t2 = time.perf_counter()
    page = before_after_html(before, after, options)
    t_page = time.perf_counter() - t2
    out = Path(args.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(page)
    view = select(before, options)
    size = out.stat().st_size
    print(f"module:        {source}")
    print(f"instructions:  before {before.instruction_count:,}, after {after.instruction_count:,}")
    print(f"focus:         --around {around} --radius {args.radius} --max-nodes {args.max_nodes} "
          f"(before view: {view.node_count} nodes)")
    print(f"load (parse):  {t_load:.2f} s")
    print(f"diff alone:    {t_diff:.2f} s ({d.counts()['fused']:,} fused into {d.counts()['fusions']:,} fusions)")
    print(f"page:          {t_page:.2f} s (diff + 2 views + 2 dot layouts)  [target < 30 s]")
    print(f"page size:     {size / 1e6:.2f} MB  [target < 5 MB]  -> {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
