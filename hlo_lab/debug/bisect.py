"""``hlo bisect``: the first pass, then the first decision inside that pass, that
makes a module fail, in our pipeline (``--passes``) or in XLA's (``--xla``).

What "fail" means, both searches and their limits: docs/bisect.md
"""

from __future__ import annotations

import contextlib
import os
import re
import tempfile
import time
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Callable, Iterator, Sequence

from corpus.dump import from_dump_dir
from hlo_tools import parse
from hlo_tools.written import WrittenNames, stamp_names
from passes.fuel import Fueled, fuel
from passes.manager import PassManager
from xla_bridge import make_inputs, run_module, worker
from xla_bridge.errors import XlaAbortError, XlaCompileError
from xla_bridge.measure import STOCK, Measurement, XlaPipeline
from xla_bridge.compiler import compile as xla_compile
from xla_bridge.compiler import parse_flags
from xla_bridge.runner import compare_outputs, run

from .rewrite import default_pipeline

__all__ = ["BisectResult", "Probe", "bisect_passes", "bisect_xla", "same_kind", "xla_passes"]


@dataclass
class Probe:
    """One compile-and-run of a candidate: ``what`` was tried, whether it ``failed``
    and how (``kind``: "mismatch", "abort", "compile-error", "pass-error"; "" when it passed)."""

    what: str
    failed: bool
    kind: str = ""
    message: str = ""
    seconds: float = 0.0


@dataclass
class BisectResult:
    """What a bisection found.  ``first_bad_pass`` is None when the module fails
    with no pass run (or passes with every pass run: ``failure`` is then empty)."""

    module: str
    route: str  # "ours" or "xla"
    pipeline: str  # how candidates were compiled
    reference: str
    passes: list[str]
    failure: Probe | None = None
    first_bad_pass: str | None = None
    pass_index: int | None = None  # 0-based, in ``passes``
    decisions: int | None = None  # how many the culprit pass made with fuel to spare (None: it takes no fuel)
    first_bad_decision: int | None = None  # 1-based
    decision: str = ""
    decision_as_written: list[str] = field(default_factory=list)  # the decision's instructions, as the user's file has them
    note: str = ""  # why decisions were not bisected, when they were not
    base: str = ""  # ours: the XLA pipeline candidates compile on (``pipeline`` adds the hook)
    culprits: list[str] = field(default_factory=list)  # XLA's: the passes that must all be off (usually one)
    probes: list[Probe] = field(default_factory=list)
    seconds: float = 0.0
    before: Any = field(default=None, repr=False)  # the module before the culprit decision (ours)
    after: Any = field(default=None, repr=False)  # ... and after it

    def as_dict(self) -> dict:
        d = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in ("before", "after", "probes", "failure")}
        d["failure"] = asdict(self.failure) if self.failure is not None else None
        d["probes"] = [asdict(p) for p in self.probes]
        return d


# -- probing --------------------------------------------------------------------------


def _compile_and_run(module, pipeline, inputs, backend: str, flags) -> list:
    """Runs in the XLA worker: ``module`` compiled under ``pipeline`` and run on ``inputs``."""

    return run(Measurement(backend, flags=flags).compile(module, pipeline), inputs)


@dataclass
class _Runner:
    """Compiles candidates in the XLA worker and judges them against the reference."""

    backend: str
    inputs: list
    reference_outputs: list
    rtol: float | None
    atol: float | None
    probes: list[Probe]
    progress: Callable[[Probe], None] | None = None

    def judge(self, what: str, module, pipeline, flags=None) -> Probe:

        t0 = time.perf_counter()
        try:
            outs = worker.contained(_compile_and_run, (module, pipeline, self.inputs, self.backend, flags),
                                        phase="compiling", module=getattr(module, "name", "?"), backend=self.backend)
        except XlaAbortError as e:
            probe = Probe(what, True, "abort", _line(str(e)))
        except XlaCompileError as e:
            probe = Probe(what, True, "compile-error", _line(str(e)))
        else:
            cmp = compare_outputs(self.reference_outputs, outs, rtol=self.rtol, atol=self.atol,
                                  names=("reference", what))
            bad = cmp.failing
            probe = Probe(what, not cmp.ok, "mismatch" if not cmp.ok else "",
                          (cmp.message or str(bad[0])) if bad or cmp.message else "")
        probe.seconds = time.perf_counter() - t0
        return self._keep(probe)

    def pass_error(self, what: str, e: BaseException) -> Probe:
        return self._keep(Probe(what, True, "pass-error", _line(f"{type(e).__name__}: {e}")))

    def _keep(self, probe: Probe) -> Probe:
        self.probes.append(probe)
        if self.progress is not None:
            self.progress(probe)
        return probe


def _line(text: str) -> str:
    return (text.strip().splitlines() or [""])[0]


def _runner(module, backend: str, reference, seed: int, rtol, atol, flags, progress) -> _Runner:
    """The reference outputs; an error if the reference itself cannot run."""

    inputs = make_inputs(module, seed=seed)[0]
    ref = run_module(module, inputs, backend=backend, pipeline=reference, flags=flags, contained=True)
    return _Runner(backend, inputs, ref, rtol, atol, [], progress)


_SHAPE = re.compile(r"\b[a-z]+\d*\[[\d,]*\](\{[\d,:A-Z()]*\})?")
_NAME_OR_NUMBER = re.compile(r"%?[\w.-]*\d[\w.-]*")


def same_kind(p: Probe, full: Probe) -> bool:
    """``p`` fails as ``full`` does: the same kind, and for XLA's errors the same
    message once shapes, names and numbers (which change from candidate to
    candidate) are taken out."""
    if p.kind != full.kind:
        return False
    if p.kind not in ("abort", "compile-error"):
        return True

    def gist(m: str) -> str:
        return _NAME_OR_NUMBER.sub("#", _SHAPE.sub("S", m))

    return gist(p.message) == gist(full.message)


def _first_failing(lo: int, hi: int, fails: Callable[[int], bool]) -> int:
    """The smallest k in (lo, hi] with ``fails(k)``, given ``fails(hi)`` and not ``fails(lo)``."""
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if fails(mid):
            hi = mid
        else:
            lo = mid
    return hi


# -- our pipeline -----------------------------------------------------------------------



def bisect_passes(module, passes: Sequence, *, backend: str = "cpu", pipeline: str | None = None,
                  hook: str | None = None, reference: str = "stock", seed: int = 0, rtol: float | None = None,
                  atol: float | None = None, flags=None, decisions: bool = True, same_failure: bool = False,
                  progress: Callable[[Probe], None] | None = None) -> BisectResult:
    """The first of ``passes`` (pass objects, run in order on ``module``) after which
    the module fails, then its first failing decision (``decisions``).  Text route:
    each prefix runs here and the result is compiled under ``pipeline`` (default
    ``default_pipeline``); with ``hook`` (a ``HookStage`` name) the prefix runs inside
    XLA's ``pipeline`` at that stage instead.  ``same_failure``: a candidate fails
    only when it fails as the whole pipeline does (``same_kind``), not in any way."""

    t0 = time.perf_counter()
    passes = list(passes)
    written = WrittenNames(module)
    if hook is not None:  # XLA renames what it compiles (docs: hlo_tools.written); the stamps name it back
        module = stamp_names(module.clone())
    base = pipeline or default_pipeline(passes)  # hooked or not: XLA's fusion off when the passes decide fusion
    label = base if hook is None else f"{base} + passes at {hook}"
    runner = _runner(module, backend, reference, seed, rtol, atol, flags, progress)
    out = BisectResult(module.name, "ours", label, reference, [p.name for p in passes], probes=runner.probes,
                       base=base)

    def candidate(k: int, limit: int | None = None) -> list:
        """The prefix of k passes (the k-th with ``limit`` decisions) as the pass list to run."""
        chosen = passes[:k]
        if limit is not None:
            chosen = chosen[:-1] + [Fueled(chosen[-1], limit)]
        return chosen

    def what(chosen: list) -> str:
        names = [p.name for p in chosen]  # a Fueled pass says its budget: "name[fuel=N]"
        return "no pass" if not names else ",".join(names) if len(names) <= 3 else f"{len(names)} passes (..{names[-1]})"

    def on_text(label: str, start, run: list) -> Probe:
        """``run`` on a copy of ``start`` here, the result compiled under ``base``."""
        m = start.clone()
        try:
            PassManager(run).run(m)
        except Exception as e:  # noqa: BLE001 - the pass under test may raise anything
            return runner.pass_error(label, e)
        return runner.judge(label, m, XlaPipeline(base), flags)

    def probe(k: int, limit: int | None = None) -> Probe:
        chosen = candidate(k, limit)
        if hook is not None:
            return runner.judge(what(chosen), module, XlaPipeline(base).hooked(PassManager(chosen), hook), flags)
        return on_text(what(chosen), module, chosen)

    full = probe(len(passes))
    if not full.failed:
        out.seconds = time.perf_counter() - t0
        return out
    out.failure = full

    def fails(p: Probe) -> bool:
        return p.failed and (not same_failure or same_kind(p, full))

    if fails(probe(0)):
        out.seconds = time.perf_counter() - t0
        return out
    k = _first_failing(0, len(passes), lambda k: fails(probe(k)))
    culprit = passes[k - 1]
    out.pass_index, out.first_bad_pass = k - 1, culprit.name
    if decisions:
        start = module.clone()
        if hook is None:
            PassManager(passes[:k - 1]).run(start)
        else:  # what the culprit sees inside XLA: the module at the hook, after the passes before it

            seen = Measurement(backend, flags=flags, contained=True).compile(
                module, XlaPipeline(base).hooked(PassManager(passes[:k - 1]), hook, reprint=True)).hook
            start = seen.after if seen.after is not None else parse(seen.seen[-1])

        def decision_fails(n: int) -> bool:
            if hook is not None:
                return fails(probe(k, n))
            # the passes before the culprit ran once, into ``start``: only the culprit runs again
            return fails(on_text(what(candidate(k, n)), start, [Fueled(culprit, n)]))

        _bisect_decisions(out, start, culprit, decision_fails)
        if out.before is not None:
            out.decision_as_written = written.describe_names(out.decision, out.before, stamped=hook is not None)
    out.seconds = time.perf_counter() - t0
    return out


def _bisect_decisions(out: BisectResult, start, culprit, fails: Callable[[int], bool]) -> None:
    """Counts the decisions the culprit makes on ``start``, the module it sees, with
    unlimited fuel, and bisects the budget (``fails(n)``) to the first failing one;
    keeps the modules just before and after that decision."""
    with fuel() as log:
        culprit.run(start.clone())
    out.decisions = len(log.decisions)
    if not log.decisions:
        out.decisions, out.note = None, f"{culprit.name} takes no fuel (passes.fuel): its decisions cannot be bisected"
        return
    if fails(0):
        out.note = f"{culprit.name} fails with no decision made: what breaks the module is not a fuelled decision"
        return
    n = _first_failing(0, len(log.decisions), fails)
    out.first_bad_decision, out.decision = n, log.decisions[n - 1]
    out.before, out.after = start.clone(), start.clone()
    with fuel(n - 1):
        culprit.run(out.before)
    with fuel(n):
        culprit.run(out.after)


# -- XLA's pipeline ---------------------------------------------------------------------


def xla_passes(module, backend: str, flags=None) -> list[str]:
    """The XLA passes that changed ``module`` in its stock compile, in pipeline order
    (each name once), read from the compile's pass dumps; dumps written before an
    abort count too."""

    with tempfile.TemporaryDirectory(prefix="hlo-bisect-") as d:
        with contextlib.suppress(XlaCompileError):  # an abort still leaves the dumps before it
            worker.contained(xla_compile, (module, backend, "stock"), dict(flags=flags, dump_dir=d),
                                 phase="compiling", module=module.name, backend=backend)
        names: list[str] = []
        for m in from_dump_dir(d):
            for p in m.passes:
                if p.pass_name not in names:
                    names.append(p.pass_name)
        return names


@contextlib.contextmanager
def _xla_fuel(pass_name: str, n: int) -> Iterator[None]:
    """``--xla_fuel=PASS=N`` in XLA_FLAGS for the next worker (a changed XLA_ variable
    restarts it, and XLA reads its fuel once per process)."""
    old = os.environ.get("XLA_FLAGS")
    os.environ["XLA_FLAGS"] = f"{old or ''} --xla_fuel={pass_name}={n}".strip()
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("XLA_FLAGS", None)
        else:
            os.environ["XLA_FLAGS"] = old


def bisect_xla(module, *, backend: str = "cpu", reference: str = "as-written", seed: int = 0,
               rtol: float | None = None, atol: float | None = None, flags=None, decisions: bool = True,
               max_fuel: int = 1 << 14, progress: Callable[[Probe], None] | None = None) -> BisectResult:
    """The XLA pass whose disabling makes ``module``'s stock compile stop failing,
    then (when the pass takes fuel) its first failing decision."""

    t0 = time.perf_counter()
    runner = _runner(module, backend, reference, seed, rtol, atol, flags, progress)
    names = xla_passes(module, backend, flags)
    out = BisectResult(module.name, "xla", "stock", reference, names, probes=runner.probes)
    base_flags = parse_flags(flags)
    disabled_before = [p for p in str(base_flags.get("xla_disable_hlo_passes", "")).split(",") if p]

    def probe(disabled: Sequence[str]) -> Probe:
        f = dict(base_flags, xla_disable_hlo_passes=",".join([*disabled_before, *disabled]))
        label = "stock" if not disabled else f"stock without {_short(disabled)}"
        return runner.judge(label, module, STOCK, f)

    full = probe(())
    if not full.failed:
        out.seconds = time.perf_counter() - t0
        return out
    out.failure = full

    def search(cands: list[str]) -> list[str] | None:
        """A small set of ``cands`` whose disabling fixes the failure: a half of it
        when one does, else ``cands`` itself when it does (halves first)."""
        p = probe(cands)
        if p.failed and (p.kind == full.kind or len(cands) == 1):
            return None  # still failing the same way: the culprit is elsewhere
        if len(cands) == 1:
            return cands
        half = len(cands) // 2
        return search(cands[:half]) or search(cands[half:]) or (cands if not p.failed else None)

    found = search(names) if names else None
    if found is not None and len(found) > 1:  # no single pass: keep only the passes that must all be off
        for name in list(found):
            rest = [n for n in found if n != name]
            if not probe(rest).failed:
                found = rest
    if found:
        out.culprits = found
        out.first_bad_pass, out.pass_index = found[0], names.index(found[0])
        if decisions and len(found) == 1:
            _bisect_xla_fuel(out, found[0], lambda: probe(()), full.kind, max_fuel)
        elif len(found) > 1:
            out.note = (f"no single pass: the failure goes only with {', '.join(found)} all disabled "
                        "(each of them changes the result)")
    out.seconds = time.perf_counter() - t0
    return out


def _short(names: Sequence[str]) -> str:
    return ",".join(names) if len(names) <= 3 else f"{len(names)} passes ({names[0]}..{names[-1]})"


def _bisect_xla_fuel(out: BisectResult, pass_name: str, stock: Callable[[], Probe], kind: str,
                     max_fuel: int) -> None:
    """The first failing decision of XLA's ``pass_name`` under ``--xla_fuel``; a budget
    fails when it fails as the whole pipeline did (``kind``).  Not bisected when a
    budget of 0 still fails (the pass takes no fuel) or fails otherwise (XLA's own
    out-of-fuel path aborts in some passes)."""

    def attempt(n: int) -> Probe:
        with _xla_fuel(pass_name, n):
            p = stock()
        p.what = f"stock, --xla_fuel={pass_name}={n}"
        return p

    def fails(n: int) -> bool:
        p = attempt(n)
        return p.failed and p.kind == kind

    zero = attempt(0)
    if zero.failed:
        out.note = (f"XLA's {pass_name} takes no fuel: the failure stays with --xla_fuel={pass_name}=0"
                    if zero.kind == kind else
                    f"XLA's {pass_name} fails otherwise when out of fuel ({zero.kind}: {zero.message}): "
                    f"its decisions cannot be bisected with --xla_fuel")
        return
    hi = 1
    while not fails(hi):
        if hi >= max_fuel:
            out.note = f"no failure with up to {max_fuel} decisions of {pass_name}"
            return
        hi *= 2
    n = _first_failing(hi // 2, hi, fails) if hi > 1 else 1
    out.first_bad_decision = n
    out.decision = f"the {_ordinal(n)} decision of XLA's {pass_name} (--xla_fuel={pass_name}={n} fails, ={n - 1} passes)"


def _ordinal(n: int) -> str:
    return f"{n}{'th' if 10 <= n % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10, 'th')}"
