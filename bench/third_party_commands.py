"""Every ``hlo`` command on the third-party corpus (MaxText, Hugging Face Flax), by
the current code and by an earlier revision's, in one run: the exit status of each.

    JAX_PLATFORMS=cpu .venv/bin/python bench/third_party_commands.py [--before REV] [--only GLOB]

Each module of ``corpus/third_party`` is written out as a user's dump would be (plain
text, ``before_optimizations.hlo`` and ``cpu_after_optimizations.hlo``), and each
command runs on the stage a user gives it (passes, compiles and searches on the
module before optimization; analyses of kernels on XLA's optimized one). Per-pass
dumps for ``passes-dump`` and XLA:GPU's fusion log for ``fusion-log`` are made once
by the current code (``hlo compile --dump-dir``), and both revisions read the same
folders. The earlier revision runs from a git worktree of it. Exit 0 is success; 1
is a verdict where a command gives one (compare, divergence, bisect: outputs
differ), else an error; 2 an error said in one line. A Python traceback on stderr is marked ``!tb``, a command killed at
``--timeout`` is ``T``, a command the revision does not have is ``-``.

The last line is ``third_party_commands_ok=<clean runs now>/<runs>``.
"""

from __future__ import annotations

import argparse
import fnmatch
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import corpus  # noqa: E402

THIRD_PARTY = ROOT / "corpus" / "third_party"

#: The revision before the first fix made on third-party modules (9e39eec: MaxText's
#: bf16 dots and bitcast-convert), i.e. the code that issue 32 found failing.
BEFORE = "9e39eec~1"

#: command label -> argv.  ``{B}``: the module before optimization; ``{A}``: XLA:CPU's
#: optimized module; ``{DIR}``: a folder with both; ``{CPU_DUMPS}``/``{GPU_DUMPS}``:
#: per-pass dump folders; ``{OUT}``: a fresh output folder; ``{NAME}``: the module.
COMMANDS: dict[str, list[str]] = {
    "check": ["check", "{B}", "{A}"],
    "fmt": ["fmt", "{A}", "-o", "{OUT}/fmt.hlo"],
    "stats": ["stats", "--json", "{A}"],
    "opt best": ["opt", "{B}", "--passes", "best", "-o", "{OUT}/opt.hlo"],
    "compile": ["compile", "{B}", "-q"],
    "run": ["run", "{B}", "-q"],
    "compare": ["compare", "{B}", "{A}", "-q"],
    "bench best": ["bench", "{B}", "--passes", "best", "--reps", "5", "--warmup", "1", "--no-record", "-q"],
    "bench gpu-best h100": ["bench", "{B}", "--passes", "gpu-best", "--target", "h100", "--no-record", "-q"],
    "analyze": ["analyze", "{A}"],
    "scan": ["scan", "{DIR}", "-o", "{OUT}/scan", "-q", "-j", "1", "--no-cache"],
    "viz": ["viz", "{B}", "-o", "{OUT}/g.dot"],
    "diff": ["diff", "{B}", "{A}"],
    "tune": ["tune", "{B}", "--budget", "3", "--reps", "5", "--final-reps", "10", "--no-baseline", "--workers", "1",
             "--db", "{OUT}/tune.db", "-q", "-o", "{OUT}/tune.json"],
    "passes-dump": ["passes-dump", "{CPU_DUMPS}"],
    "fusion-log": ["fusion-log", "{GPU_DUMPS}", "--limit", "20"],
    "collectives": ["collectives", "{A}"],
    "regress": ["regress", str(THIRD_PARTY), "--only", "{NAME}", "--versions", "current,current", "--backend", "cpu",
                "--no-measure", "--no-record", "-q"],
    "profile": ["profile", "{B}", "--reps", "3", "--top", "5"],
    "divergence": ["divergence", "{A}", "{A}", "-q"],
    "reduce": ["reduce", "{B}", "--until-fires", "producer-consumer-fusion", "--seconds", "60", "-q",
               "-o", "{OUT}/reduced.hlo"],
    "bisect": ["bisect", "{B}", "--passes", "best", "-q"],
    "upstream": ["upstream", "{B}", "--passes", "producer-consumer-fusion,dce", "--reps", "5", "--seconds", "60", "-q",
                 "-o", "{OUT}/upstream"],
}


#: Commands whose exit 1 is a verdict (outputs differ), not an error.
VERDICTS = {"compare", "divergence", "bisect"}


def _inputs(entry: corpus.Entry, work: Path) -> dict[str, str]:
    """Plain-text stages, a folder of both, and the two per-pass dump folders."""
    d = work / entry.name
    (d / "stages").mkdir(parents=True)
    paths = {}
    for stage, key in (("before_optimizations", "B"), ("cpu_after_optimizations", "A")):
        p = d / "stages" / f"{stage}.hlo"
        p.write_text(entry.text(stage))
        paths[key] = str(p)
    for key, extra in (("CPU_DUMPS", []), ("GPU_DUMPS", ["--target", "h100"])):
        dump = d / key.lower()
        subprocess.run([sys.executable, "-m", "hlo_lab.cli", "compile", paths["B"], "-q", "--dump-dir", str(dump),
                        *extra], cwd=ROOT, env=_env(ROOT), capture_output=True, check=False)
        paths[key] = str(dump)
    return {**paths, "DIR": str(d / "stages"), "NAME": entry.name}


def _env(code: Path) -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=str(code), JAX_PLATFORMS="cpu", PYTHONWARNINGS="ignore")


def _run(code: Path, argv: list[str], timeout: float) -> tuple[str, str]:
    """(cell, first stderr line) of one command by the code under ``code``."""
    try:
        r = subprocess.run([sys.executable, "-m", "hlo_lab.cli", *argv], cwd=code, env=_env(code),
                           capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return "T", f"killed after {timeout:.0f} s"
    err = r.stderr.strip()
    if r.returncode == 2 and "invalid choice" in err:
        return "-", "no such command"
    cell = str(r.returncode) + (" !tb" if "Traceback (most recent call last)" in err else "")
    last = err.splitlines()[-1] if err else ""
    return cell, last[:160]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--before", default=BEFORE, help=f"the earlier revision (default {BEFORE}); 'none' skips it")
    ap.add_argument("--only", default="*", help="modules whose name matches (fnmatch)")
    ap.add_argument("--commands", help="comma-separated labels of COMMANDS (default all)")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds per command (default 300)")
    args = ap.parse_args()
    labels = args.commands.split(",") if args.commands else list(COMMANDS)
    entries = [e for e in corpus.load(root=THIRD_PARTY) if fnmatch.fnmatch(e.name, args.only)]
    work = Path(tempfile.mkdtemp(prefix="third_party_commands_"))
    sides = {"now": ROOT}
    if args.before != "none":
        tree = work / "before"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "-f", "-q", str(tree), args.before], check=True)
        sides = {"before": tree, **sides}
    results: dict[tuple[str, str, str], tuple[str, str]] = {}
    try:
        for e in entries:
            subs = _inputs(e, work / "inputs")
            for label in labels:
                for side, code in sides.items():
                    out = work / "out" / side / e.name / label.replace(" ", "_")
                    out.mkdir(parents=True)
                    argv = [a.format(**subs, OUT=out) for a in COMMANDS[label]]
                    results[(e.name, label, side)] = cell, why = _run(code, argv, args.timeout)
                    print(f"{e.name:40s} {label:20s} {side:6s} {cell:6s} {why}", file=sys.stderr, flush=True)
    finally:
        if "before" in sides:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(sides["before"])],
                           check=False)
        shutil.rmtree(work, ignore_errors=True)
    names = [e.name for e in entries]
    print("| command | " + " | ".join(names) + " |")
    print("|---|" + "---|" * len(names))
    for label in labels:
        cells = [" → ".join(results[(n, label, s)][0] for s in sides) for n in names]
        print(f"| {label} | " + " | ".join(cells) + " |")
    now = [(label, results[(n, label, "now")][0]) for n in names for label in labels]
    print(f"(cells: {' → '.join(sides)}; exit status, !tb a traceback, T killed at {args.timeout:.0f} s, "
          f"- no such command)")
    print(f"third_party_commands_ok={sum(c == '0' or (c == '1' and lab in VERDICTS) for lab, c in now)}/{len(now)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
