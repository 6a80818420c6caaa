"""``hlo upstream``: from a validated rewrite, a bundle a reviewer can read.

The rewrite is our pipeline on a module.  It is validated first: measured
against stock XLA on the same inputs (``xla_bridge.Measurement.benchmark``:
ABBA-interleaved, outputs compared), through the hook for fusion pipelines (as
``hlo bench --hook`` and ``hlo tune`` measure them), on the rewritten text
otherwise.  A rewrite whose outputs differ is refused: that is ``hlo bisect``'s job.

Then the module the passes saw is reduced (``hlo_lab.debug.reduce``) while the
passes still change it, and the bundle is written:

* ``before.hlo`` / ``after.hlo``: the reduced module and what the passes make of it;
* ``<pass>_test.hlo``: an XLA-style test, the reduced HLO with ``// CHECK:`` lines
  (``hlo_tools.testing.check_lines``), verified here: the checks match our
  output and do not match the input;
* ``measured.md``: stock vs ours on the whole module, and the reduced pair's outputs;
* ``source/``: the source files of the passes;
* ``README.md`` (what a reviewer reads first) and ``bundle.json``.
"""

from __future__ import annotations

import inspect
import json
import platform
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

from hlo_tools import HloError, Module, parse
from hlo_tools.fileio import file_stem, write_output
from hlo_tools.testing import check_lines, run_filecheck
from passes import Pass, PassManager, registry
from xla_bridge.display import speedup_verdict as verdict  # the one rule, shared with hlo bench and tune
from xla_bridge.errors import XlaCompileError
from xla_bridge.measure import STOCK, Measurement

from .rewrite import baseline_moved, measure_rewrite, rewrite_route
from .reduce.predicates import NothingToReduce, pass_fires, passes_differ
from .reduce.reducer import reduce_module

__all__ = ["Bundle", "UpstreamError", "make_bundle", "verdict"]

#: The line that says how to run an HLO test file, as XLA's hlo-opt lit tests do.
RUN_LINE = "// RUN: hlo opt %s{load} --passes={spec} | filecheck %s"


class UpstreamError(HloError):
    """The rewrite cannot be handed upstream (it changes nothing, or its outputs differ)."""


@dataclass
class Bundle:
    """What ``make_bundle`` wrote and measured."""

    folder: str
    passes: str
    route: str  # how the rewrite was measured
    stock_us: float
    ours_us: float
    speedup: float
    speedup_p10: float
    speedup_p90: float
    outputs: str
    original_instructions: int
    reduced_instructions: int
    reduced_outputs: str
    checks: int
    reduce_seconds: float
    files: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        return dict(vars(self))



def _outputs(measurement: Measurement, module: Module, passes: Sequence[Pass], res) -> str | None:
    """The rewrite's outputs in words, or None when they differ: from stock's, or,
    where XLA's fusion off already moves stock's outputs (bf16 rounding), from
    that moved baseline's (``rewrite.baseline_moved``, as ``hlo bench`` judges)."""
    if res.verdict in ("exact", "close"):
        return res.verdict
    pipeline_b, on_text, _ = rewrite_route(passes, measurement.backend)
    if res.verdict != "mismatch" or on_text:
        return None
    said, against = baseline_moved(measurement, module, module, res, STOCK, pipeline_b)
    return f"{against} ({said})" if against in ("exact", "close") else None


def make_bundle(module: Module, passes: Sequence[Pass], spec: str, out: str | Path, *, backend: str = "cpu",
                reps: int = 50, seconds: float = 120.0, progress: Callable[[str], None] | None = None,
                baseline: tuple[str, Sequence[Pass]] | None = None) -> Bundle:
    """Validates ``passes`` (named ``spec``) on ``module`` against stock XLA, reduces
    the module they see while they still fire (with ``baseline``, a name and its
    passes: while they make another module than it, so the reduced test shows
    what a variant changes), and writes the bundle into ``out``."""
    say = progress or (lambda _msg: None)
    out = Path(out)
    passes = list(passes)
    measurement = Measurement(backend, contained=True)
    say(f"measuring {spec} against stock XLA ({reps} interleaved pairs)")
    res, route = measure_rewrite(measurement, module, passes, reps)
    if res is None:
        raise UpstreamError(f"{spec} changes nothing in {module.name}: there is no rewrite to hand upstream")
    outputs = _outputs(measurement, module, passes, res)
    if outputs is None:
        raise UpstreamError(f"{spec}: outputs differ from stock XLA's ({res.verdict}); "
                            f"find the culprit with hlo bisect --passes {spec}")
    # The module as given is reduced (not XLA's module at the hook, which has been through
    # layout assignment and cannot be compiled again): the test runs the passes on it as
    # `hlo opt` does, and the reduced pair is validated the way the whole module was.
    keep = pass_fires(passes) if baseline is None else passes_differ(passes, baseline[1], baseline[0])
    say(f"reducing {module.instruction_count} instructions while {keep.description}")
    try:
        red = reduce_module(module, keep, seconds=seconds)
    except NothingToReduce:
        raise UpstreamError(f"{spec} changes XLA's module at the hook but not {module.name} as given, which a test "
                            "would start from: give the module the passes act on") from None
    before = red.module
    before.strip_source_locations()  # the bundle is for a public tracker: no local paths
    after = before.clone()
    PassManager(passes).run(after)
    try:
        small, _ = measure_rewrite(measurement, before, passes, reps=5)
        reduced_outputs = ((_outputs(measurement, before, passes, small) or small.verdict) if small is not None
                           else "unchanged at the hook")
    except XlaCompileError as e:
        reduced_outputs = f"not run: {(str(e).splitlines() or [''])[0]}"
    checks = check_lines(before, after, prefix="// ")
    load = "".join(f" --load source/{name}" for name in _user_files(passes))
    test_text = "\n".join([RUN_LINE.format(load=load, spec=spec), "", before.to_text().rstrip(), "", checks.rstrip(), ""])
    _verify_test(test_text, passes, before.to_text())
    files = _write(out, spec, passes, before, after, test_text, res, outputs, route, red, reduced_outputs, keep.description)
    return Bundle(str(out), spec, route, res.a.median_us, res.b.median_us, res.speedup, res.speedup_p10,
                  res.speedup_p90, outputs, module.instruction_count, before.instruction_count, reduced_outputs,
                  checks.count("CHECK:"), red.seconds, files)



def _verify_test(test_text: str, passes: list[Pass], before_text: str) -> None:
    """The test as a reviewer runs it: the file parses (comments and all), the passes
    rewrite it, and the checks match the result but not the input."""
    module = parse(test_text, source="<test>")
    PassManager(passes).run(module)
    checks = "\n".join(line for line in test_text.splitlines() if "CHECK" in line)
    got = run_filecheck(module.to_text(), checks)
    if not got:
        raise UpstreamError(f"the generated checks do not match our output:\n{got.diagnostic}")
    if run_filecheck(before_text, checks):
        raise UpstreamError("the generated checks also match the input: they would not catch a regression")


def _summary(cls: type) -> str:
    """The first paragraph of a pass's docstring, or of its module's when the class has
    none of its own (a dataclass then documents itself with its signature)."""
    doc = cls.__doc__ or ""
    if not doc or doc.startswith(f"{cls.__name__}("):
        doc = inspect.getmodule(cls).__doc__ or ""
    return " ".join(inspect.cleandoc(doc).split("\n\n")[0].split())


def _user_files(passes: list[Pass]) -> list[str]:
    """The names of the files ``--load`` registered the user's passes from (the
    bundle's ``source/`` holds them, and the test's RUN line loads them)."""
    user = set(registry.USER_PASSES.values())
    return sorted({Path(inspect.getsourcefile(type(p))).name for p in passes if type(p) in user})


def _sources(passes: list[Pass]) -> dict[str, str]:
    """File name -> source of every file defining one of ``passes``."""
    out: dict[str, str] = {}
    for p in passes:
        try:
            path = inspect.getsourcefile(type(p))
        except TypeError:
            continue
        if path:
            out.setdefault(Path(path).name, Path(path).read_text())
    return out


def _write(out: Path, spec: str, passes: list[Pass], before: Module, after: Module, test_text: str, res, outputs: str,
           route: str, red, reduced_outputs: str, kept_while: str) -> list[str]:
    name = passes[-1].name if len(passes) == 1 else spec.replace(",", "_")
    test_file = f"{file_stem(name)}_test.hlo"  # a user's pass name may hold "../": the file stays in ``out``
    table = "\n".join([
        "| module | instructions | stock us | ours us | speedup (p10-p90) | outputs |",
        "|---|---|---|---|---|---|",
        f"| {res.name_a} (as given) | {red.original_instructions} | {res.a.median_us:.1f} | {res.b.median_us:.1f} | "
        f"{res.speedup:.3f} ({res.speedup_p10:.3f}-{res.speedup_p90:.3f}) | {outputs} |",
        f"| reduced (before.hlo) | {before.instruction_count} | | | | {reduced_outputs} |",
    ])
    measured = (f"# Measured\n\n{table}\n\nXLA:{res.backend.upper()} on {res.device}, {res.reps} ABBA pairs; "
                f"ours: {route}.  {verdict(res.speedup_p10, res.speedup_p90)}\n")
    docs = "\n\n".join(f"`{p.name}`: {_summary(type(p))}" for p in passes)
    readme = f"""# Upstream bundle: {spec}

{docs}

Measured on {res.name_a} against stock XLA ({platform.machine()}, {time.strftime('%Y-%m-%d')}):
speedup {res.speedup:.3f} (p10-p90 {res.speedup_p10:.3f}-{res.speedup_p90:.3f}), outputs {outputs}.
{verdict(res.speedup_p10, res.speedup_p90)}

| file | what |
|---|---|
| `before.hlo` | the module, reduced from {red.original_instructions} to {before.instruction_count} instructions while {kept_while} |
| `after.hlo` | what the passes make of it |
| `{test_file}` | an XLA-style test: the reduced HLO and `// CHECK:` lines, checked here to match `after` and not `before` |
| `measured.md` | stock vs ours, and the reduced pair's outputs ({reduced_outputs}) |
| `source/` | the passes' source |

Run the test from this folder: `hlo opt {test_file}{''.join(f' --load source/{n}' for n in _user_files(passes))} --passes={spec} | filecheck {test_file}`.
"""
    files = {"before.hlo": before.to_text(), "after.hlo": after.to_text(), test_file: test_text,
             "measured.md": measured, "README.md": readme}
    files.update({f"source/{n}": text for n, text in _sources(passes).items()})
    for rel, text in files.items():
        write_output(out / rel, text)
    manifest = {"passes": spec, "route": route, "files": sorted(files), "speedup": res.speedup,
                "outputs": outputs, "reduced_outputs": reduced_outputs}
    write_output(out / "bundle.json", json.dumps(manifest, indent=1) + "\n")
    return sorted(files) + ["bundle.json"]
