"""Cleanup passes on the corpus: instruction counts before/after dce+cse+simplify
on every pre-optimization module, and per-pass throughput on the largest.

    python bench/passes_speed.py [--only PATTERN]

Last line: ``passes_instructions_removed_pct=<geomean-free total %>``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

import corpus  # noqa: E402
import hlo_tools  # noqa: E402
from passes import PassManager, get_pass  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", help="substring of module names")
    args = ap.parse_args(argv)

    table = Table("module", "before", "after dce+cse+simplify", "removed", "ms")
    total_before = total_after = 0
    largest = None
    for entry in corpus.load(args.only):
        if "before_optimizations" not in entry.files:
            continue
        text = entry.text("before_optimizations")
        module = hlo_tools.parse(text, entry.name)
        before = module.instruction_count
        t0 = time.perf_counter()
        PassManager([get_pass("dce"), get_pass("cse"), get_pass("simplify")], fixed_point=True).run(module)
        ms = (time.perf_counter() - t0) * 1e3
        after = module.instruction_count
        if after > before:
            raise SystemExit(f"{entry.name}: the cleanup passes increased the instruction count {before} -> {after}")
        total_before += before
        total_after += after
        table.add_row(entry.name, str(before), str(after), f"{before - after} ({(before - after) / before:.1%})", f"{ms:.0f}")
        if largest is None or before > largest[1]:
            largest = (entry.name, before, text)
    console = Console(width=160)
    console.print(table)
    name, n, text = largest
    tput = Table(f"pass throughput on the largest module ({name}, {n} instructions)", "pass", "ms", "instructions/s")
    for pname in ("dce", "cse", "simplify"):
        module = hlo_tools.parse(text, name)
        p = get_pass(pname)
        t0 = time.perf_counter()
        p.run(module)
        dt = time.perf_counter() - t0
        tput.add_row(pname, f"{dt * 1e3:.1f}", f"{n / dt:,.0f}")
    console.print(tput)
    pct = (total_before - total_after) / total_before * 100
    print(f"total {total_before} -> {total_after} instructions")
    print(f"passes_instructions_removed_pct={pct:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
