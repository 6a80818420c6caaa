"""How long the before/after page of a large module takes, and how big it is.

Issue 7, point 3: with a focus option, a module of over 10,000 instructions
must give its page in under 30 s and under 5 MB. Prints the figures; asserts nothing.

    JAX_PLATFORMS=cpu .venv/bin/python bench/viz_speed.py [--module NAME] [--around NAME] [--radius K]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("JAX_PLATFORMS", "cpu")

from hlo_tools.opcode import HloOpcode  # noqa: E402
from visualize import FocusOptions, diff_modules, select  # noqa: E402
from visualize.page import before_after_html  # noqa: E402
from visualize.samples import corpus_module, jax_pair  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--module", default="llama3-full-train-bf16", help="bundled corpus module (default: llama3-full-train-bf16)")
    ap.add_argument("--around", help="instruction to focus on (default: the middle dot of the entry)")
    ap.add_argument("--radius", type=int, default=3)
    ap.add_argument("--max-nodes", type=int, default=500)
    ap.add_argument("-o", "--output", default="results/viz_speed.html")
    args = ap.parse_args()

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
