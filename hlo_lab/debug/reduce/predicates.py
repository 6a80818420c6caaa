"""What a reduction keeps true: a predicate ``(Module) -> bool`` that holds on
the module given and must hold on every smaller one the reducer keeps.

The four the issue names are built here (XLA aborts with the same message,
outputs still differ, a pass still fires) plus any shell command: exit 0 means
"still shows it", as for C-Reduce's interestingness tests.  Any Python callable
of the same type works too.  Every XLA call runs in the XLA worker, so a
candidate that aborts XLA answers instead of ending the reduction.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import tempfile
from typing import Callable, Sequence

from hlo_tools import HloError, Module

#: True while the candidate still shows what is being reduced.
Predicate = Callable[[Module], bool]


class NothingToReduce(HloError):
    """The predicate does not hold on the module given: a reduction would keep
    nothing true (the CLI says so and exits 1)."""


def abort_message(module: Module, pipeline: str = "as-written", backend: str = "cpu") -> str | None:
    """XLA's fatal line when it aborts compiling and running ``module`` under
    ``pipeline`` (in the XLA worker), or None when it does not abort."""
    from xla_bridge import XlaAbortError  # lazy: only predicates that call XLA need the bridge
    from xla_bridge.runner import run_module  # lazy: as above

    try:
        run_module(module, backend=backend, pipeline=pipeline, contained=True)
    except XlaAbortError as e:
        return e.message
    except (HloError, ValueError):  # refused with an error, not an abort (or no inputs to feed): a different failure
        return None
    return None


def aborts_like(module: Module, *, pipeline: str = "as-written", backend: str = "cpu",
                match: str | None = None) -> Predicate:
    """Holds while XLA aborts on a candidate with the message it aborts with on
    ``module`` (exactly), or with a message ``match`` (a regular expression)
    finds.  ``NothingToReduce`` when ``module`` does not abort that way."""
    first = abort_message(module, pipeline, backend)
    if first is None:
        raise NothingToReduce(f"XLA does not abort on {module.name} ({backend}, {pipeline}): nothing to reduce")
    pattern = re.compile(match) if match is not None else None
    if pattern is not None and not pattern.search(first):
        raise NothingToReduce(f"XLA aborts on {module.name}, but {match!r} does not match its message: {first}")

    def predicate(candidate: Module) -> bool:
        got = abort_message(candidate, pipeline, backend)
        return got is not None and (pattern.search(got) is not None if pattern is not None else got == first)

    predicate.description = f"XLA aborts: {first}" if pattern is None else f"XLA aborts matching {match!r}"
    return predicate


def outputs_differ(*, pipeline_a: str = "stock", pipeline_b: str = "as-written", passes: str | Sequence | None = None,
                   backend: str = "cpu", seed: int = 0) -> Predicate:
    """Holds while a candidate's outputs under ``pipeline_a`` and under
    ``pipeline_b`` differ beyond ``compare``'s tolerances, B being the candidate
    after our ``passes`` when given (names or ``Pass`` objects, run here in
    Python: the text route).  A
    candidate that XLA refuses or aborts on does not hold: a different failure."""

    def predicate(candidate: Module) -> bool:
        from xla_bridge import compare  # lazy: as above

        b = candidate
        if passes:
            from passes import PassManager  # lazy: every pass module, for predicates that run ours
            from passes.registry import parse_pipeline  # lazy: as above

            b = candidate.clone()
            PassManager(parse_pipeline(passes)).run(b)
        try:
            return compare(candidate, b, backend=backend, pipeline_a=pipeline_a, pipeline_b=pipeline_b, seed=seed,
                           contained=True).verdict == "mismatch"
        except (HloError, ValueError):  # refused, aborted, or no inputs to feed (a tuple parameter): a different failure
            return False

    named = passes if isinstance(passes, str) or not passes else ",".join(getattr(p, "name", "?") for p in passes)
    predicate.description = f"outputs differ: {pipeline_a} vs {pipeline_b}" + (f" after {named}" if named else "")
    return predicate


def still_slower(passes: str | Sequence, *, backend: str = "cpu", margin: float = 0.1, reps: int = 30) -> Predicate:
    """Holds while our ``passes`` still make a candidate slower than stock XLA: the
    paired median speedup at most ``1 - margin`` and its p90 below 1 (so noise alone
    does not hold), outputs equal.  Measured as ``hlo upstream`` measures a rewrite
    (``hlo_lab.debug.rewrite``); a candidate the passes leave alone does not hold."""
    from passes.registry import parse_pipeline  # lazy: every pass module, for predicates that run ours
    from xla_bridge.measure import Measurement  # lazy: only predicates that call XLA need the bridge

    from ..rewrite import measure_rewrite  # lazy: as above

    pipeline = parse_pipeline(passes)
    measurement = Measurement(backend, contained=True)

    def predicate(candidate: Module) -> bool:
        try:
            res, _ = measure_rewrite(measurement, candidate, pipeline, reps)
        except (HloError, ValueError):  # refused, aborted, or no inputs to feed: a different failure
            return False
        return (res is not None and res.verdict in ("exact", "close") and res.speedup <= 1 - margin
                and res.speedup_p90 < 1)

    named = passes if isinstance(passes, str) else ",".join(getattr(p, "name", "?") for p in passes)
    predicate.description = f"{named} still slower than stock by {margin:.0%} or more (p90 < 1, {reps} pairs)"
    return predicate


def pass_fires(passes: str | Sequence) -> Predicate:
    """Holds while our pipeline ``passes`` (names or ``Pass`` objects) changes a
    candidate (no XLA); a pass that breaks on a candidate does not fire on it."""
    from passes import PassManager  # lazy: every pass module, for predicates that run ours
    from passes.registry import parse_pipeline  # lazy: as above

    pipeline = parse_pipeline(passes)  # once: an unknown name fails now, not on the first candidate

    def predicate(candidate: Module) -> bool:
        try:
            return PassManager(pipeline).run(candidate.clone())
        except Exception:  # noqa: BLE001 - the pass under reduction may raise anything on a cut-down module
            return False

    named = passes if isinstance(passes, str) else ",".join(p.name for p in pipeline)
    predicate.description = f"{named} changes the module"
    return predicate


def passes_differ(passes: Sequence, baseline: Sequence, baseline_name: str) -> Predicate:
    """Holds while ``passes`` (``Pass`` objects, no XLA) change a candidate and
    ``baseline`` makes another module of it: what a variant of a pipeline (a rule
    of ``hlo findings`` on BEST) does differently, not what both do."""
    from passes import PassManager  # lazy: every pass module, for predicates that run ours

    def outcome(pipeline: Sequence, candidate: Module) -> str:
        m = candidate.clone()
        PassManager(list(pipeline)).run(m)
        return m.to_text()

    def predicate(candidate: Module) -> bool:
        try:
            ours = outcome(passes, candidate)
            return ours != candidate.to_text() and ours != outcome(baseline, candidate)
        except Exception:  # noqa: BLE001 - the passes under reduction may raise anything on a cut-down module
            return False

    predicate.description = f"{','.join(p.name for p in passes)} changes it, and not as {baseline_name} does"
    return predicate


def shell(command: str, *, timeout: float = 300.0) -> Predicate:
    """Holds while ``command`` exits 0 on a candidate, written as HLO text to a
    temporary file: ``{}`` in the command is replaced by its path (quoted), else
    the path is the last argument; ``$HLO_REDUCE_FILE`` names it as well.  A
    command that runs past ``timeout`` seconds does not hold."""

    def predicate(candidate: Module) -> bool:
        with tempfile.TemporaryDirectory(prefix="hlo-reduce-") as d:
            path = os.path.join(d, "candidate.hlo")
            with open(path, "w") as f:
                f.write(candidate.to_text())
            quoted = shlex.quote(path)
            line = command.replace("{}", quoted) if "{}" in command else f"{command} {quoted}"
            try:
                done = subprocess.run(line, shell=True,
                                      env={**os.environ, "HLO_REDUCE_FILE": path},
                                      stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                      timeout=timeout)
            except subprocess.TimeoutExpired:
                return False
            return done.returncode == 0

    predicate.description = f"`{command}` exits 0"
    return predicate
