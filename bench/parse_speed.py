"""Parser speed and memory: ours vs XLA's C++ parser, same process, same texts.

    python bench/parse_speed.py [--top 6] [--reps 7] [FILE ...]

Without files it takes the largest modules of the bundled corpus (every stage).
Runs are interleaved (ours, XLA, ours, XLA, ...) so machine load hits both
alike; medians are reported.  Each timing is the time to a parsed module: both
modules are kept until both are timed, then freed outside the windows (ours is a
graph of cycles that the collector frees, XLA's is freed at once).  Which of our
two paths ran (the compiled core or pure Python, ``hlo_tools.scanner.PARSER_PATH``)
is printed, and the pure-Python path is timed in the same run (``--no-both``
skips it).  Memory is the resident-set growth of a fresh process while it holds
the parsed module, relative to the text size.  A second table
times the largest module against the same module with two-line ``/* */``
comments and statements spread over lines (``multiline_comment_slowdown=``, time
per MB with them over without: the slow grammar path would make it 5-10x).  The
last line is ``parse_speed_ratio_vs_xla=<ours MB/s / XLA MB/s>`` (geomean over
the modules).
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

_MEM_CHILD = r"""
import json, resource, sys
sys.path.insert(0, sys.argv[3])
from hlo_tools.formats import read_module_bytes
text = read_module_bytes(sys.argv[1]).decode()
which = sys.argv[2]
if which == 'xla':
    from jax._src.lib import xla_client as xc
    parse = xc.hlo.hlo_module_from_text
else:
    import hlo_tools
    parse = hlo_tools.parse
import gc
def rss_kb():
    return int(open('/proc/self/statm').read().split()[1]) * resource.getpagesize() // 1024
parse('HloModule warm\nENTRY e {\n  ROOT p = f32[] parameter(0)\n}\n')  # load code paths first
gc.collect()
before = rss_kb()
m = parse(text)  # kept alive: the memory the parsed module holds
after = rss_kb()
print(json.dumps({'kb': after - before, 'bytes': len(text)}))
"""


def _texts(files: list[str], top: int) -> list[tuple[str, str, str]]:
    from hlo_tools.parser import read_hlo_text

    if files:
        return [(Path(f).name, f, read_hlo_text(f)) for f in files]
    import corpus

    cands = []
    for e in corpus.load():
        for stage in e.files:
            cands.append((e.meta.get("bytes", {}).get(stage, 0) or 0, e, stage))
    if not cands:
        raise SystemExit("no corpus modules found; pass files")
    if all(c[0] == 0 for c in cands):
        cands = [(len(e.text(s)), e, s) for _, e, s in cands]
    cands.sort(key=lambda c: -c[0])
    return [(f"{e.name}:{s}", str(e.path(s)), e.text(s)) for _, e, s in cands[:top]]


def _commented(text: str) -> str:
    """``text`` with a two-line ``/* */`` comment before every 20th instruction and
    every 20th other one spread over two lines after its ``=`` (both are
    whitespace to XLA's lexer)."""
    out, n = [], 0
    for line in text.splitlines(keepends=True):
        body = line.lstrip()
        if " = " in body and not body.startswith(("HloModule", "//")) and line.startswith("  "):
            n += 1
            if n % 20 == 0:
                out.append("  /* a note a person left,\n     over two lines */\n")
            elif n % 20 == 10:
                line = line.replace(" = ", " =\n      ", 1)
        out.append(line)
    return "".join(out)


def _time(fn, text: str, reps: int) -> float:
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        kept = fn(text)
        times.append(time.perf_counter() - t0)
        del kept
        gc.collect()
    return statistics.median(times)


def _peak_mem(path: str, which: str) -> float:
    out = subprocess.run([sys.executable, "-c", _MEM_CHILD, path, which, str(ROOT)], capture_output=True, text=True, check=True)
    rec = json.loads(out.stdout.strip().splitlines()[-1])
    return rec["kb"] * 1024 / rec["bytes"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="*")
    ap.add_argument("--top", type=int, default=6, help="how many of the largest corpus module stages")
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--no-memory", action="store_true")
    ap.add_argument("--no-both", dest="both", action="store_false", help="skip timing the pure-Python path")
    args = ap.parse_args(argv)

    import hlo_tools
    from xla_bridge.jax_internals import _xc

    xla_parse = _xc().hlo.hlo_module_from_text
    from rich.console import Console
    from rich.table import Table

    from hlo_tools.scanner import PARSER_PATH

    print(f"our parser's path: {PARSER_PATH} (hlo_tools.scanner.PARSER_PATH); 'pure-Python MB/s' is the other path, same run")
    table = Table("module", "MB", "instructions", "ours MB/s", "pure-Python MB/s", "XLA MB/s", "ours kinstr/s", "XLA kinstr/s",
                  "ratio", "pure-Python ratio", "ours mem/text", "XLA mem/text")
    ratios = []
    texts = _texts(args.files, args.top)
    for label, path, text in texts:
        mb = len(text) / 1e6
        module = hlo_tools.parse(text)  # warm caches (shape cache, regexes)
        xla_parse(text)
        n = module.instruction_count
        ours, theirs, pure = [], [], []
        for _ in range(args.reps):
            t0 = time.perf_counter()
            kept = hlo_tools.parse(text)
            t1 = time.perf_counter()
            kept_xla = xla_parse(text)
            t2 = time.perf_counter()
            ours.append(t1 - t0)
            theirs.append(t2 - t1)
            del kept, kept_xla  # freed outside both windows (ours by the collector: a module is cycles)
            gc.collect()
            if args.both:
                t0 = time.perf_counter()
                kept = hlo_tools.parse(text, compiled=False)
                pure.append(time.perf_counter() - t0)
                del kept
                gc.collect()
        o, x = statistics.median(ours), statistics.median(theirs)
        p = statistics.median(pure) if pure else float("nan")
        ratio = x / o
        ratios.append(ratio)
        mem_o = mem_x = float("nan")
        if not args.no_memory:
            mem_o, mem_x = _peak_mem(path, "ours"), _peak_mem(path, "xla")
        table.add_row(label[:60], f"{mb:.2f}", str(n), f"{mb / o:.1f}", f"{mb / p:.1f}", f"{mb / x:.1f}", f"{n / o / 1e3:.0f}",
                      f"{n / x / 1e3:.0f}", f"{ratio:.2f}", f"{x / p:.2f}", f"{mem_o:.1f}x", f"{mem_x:.1f}x")
    Console(width=200).print(table)

    label, _, text = max(texts, key=lambda t: len(t[2]))
    noted = _commented(text)
    xla_parse(noted)  # XLA reads it too: the comments and line breaks are valid HLO
    assert hlo_tools.parse(noted).instruction_count == hlo_tools.parse(text).instruction_count
    plain_s, noted_s = _time(hlo_tools.parse, text, args.reps), _time(hlo_tools.parse, noted, args.reps)
    per_mb = (noted_s / (len(noted) / 1e6)) / (plain_s / (len(text) / 1e6))
    t2 = Table("module", "variant", "MB", "ours s", "ours s/MB")
    t2.add_row(label[:60], "as written", f"{len(text) / 1e6:.2f}", f"{plain_s:.3f}", f"{plain_s / (len(text) / 1e6):.3f}")
    t2.add_row("", "multi-line comments", f"{len(noted) / 1e6:.2f}", f"{noted_s:.3f}",
               f"{noted_s / (len(noted) / 1e6):.3f}")
    Console(width=200).print(t2)
    print(f"multiline_comment_slowdown={per_mb:.2f}")
    geo = math.exp(sum(map(math.log, ratios)) / len(ratios))
    print(f"ratio = XLA time / our time (>1: ours faster); geomean over {len(ratios)} modules")
    print(f"parse_speed_ratio_vs_xla={geo:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
