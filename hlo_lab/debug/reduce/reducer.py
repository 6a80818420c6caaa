"""``reduce_module``: shrink a module while a predicate holds, by delta
debugging over instructions (``ddmin``) on candidates that are always valid
modules (``subgraph``).

Rounds, until one changes nothing: the entry's instructions (which values to
compute at all: the rest become parameters or go), then the body of each fusion
left (which instructions of it matter), then one iteration of a ``while``
loop's body as the module (a failure a scanned layer shows in one step), then
each fusion and call inlined (when the failure is not about fusing; a call's
body is then cut into in the next round).  Each candidate is printed once, verified
(``hlo_tools.verify``: an invalid one is never shown to the predicate) and
judged once: answers are cached by the candidate's text, as ddmin asks for the
same subset more than once.  Last, the copies that inlining made
(``sub.10.1``) take back the names the user's file gives them, if the failure
stays (``hlo_tools.written``).
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from hlo_tools import HloError, Module, verify
from hlo_tools.written import WrittenNames

from . import subgraph
from .ddmin import Budget, OutOfBudget, ddmin
from .predicates import NothingToReduce, Predicate

#: ``progress(phase, tests, instructions)``: called after every predicate call.
Progress = Callable[[str, int, int], None]


@dataclass
class ReductionStep:
    """One phase's result: what it worked on and the module's size after it."""

    phase: str
    instructions: int
    tests: int
    seconds: float


@dataclass
class Reduction:
    """What ``reduce_module`` found: the smallest module on which the predicate
    held, and what it cost."""

    module: Module
    original_instructions: int
    original_computations: int
    tests: int = 0
    cached: int = 0
    invalid: int = 0
    seconds: float = 0.0
    stopped: str | None = None  # the budget that ran out, when one did
    steps: list[ReductionStep] = field(default_factory=list)

    @property
    def instructions(self) -> int:
        return self.module.instruction_count

    @property
    def computations(self) -> int:
        return len(self.module.computations)

    def as_dict(self) -> dict[str, Any]:
        return {"module": self.module.name, "original_instructions": self.original_instructions,
                "original_computations": self.original_computations, "instructions": self.instructions,
                "computations": self.computations, "entry_instructions": self.module.entry.instruction_count,
                "tests": self.tests, "cached": self.cached, "invalid": self.invalid,
                "seconds": round(self.seconds, 2), "stopped": self.stopped,
                "steps": [vars(s) for s in self.steps]}


class _Judge:
    """The predicate behind a cache, the verifier and the budget."""

    def __init__(self, predicate: Predicate, budget: Budget, result: Reduction, progress: Progress | None):
        self.predicate = predicate
        self.budget = budget
        self.result = result
        self.progress = progress
        self.cache: dict[bytes, bool] = {}
        self.phase = "start"
        self.best: Module | None = None  # the smallest candidate that held, whatever phase found it

    def __call__(self, candidate: Module | None) -> bool:
        if candidate is None:
            return False
        key = hashlib.sha1(candidate.to_text().encode()).digest()
        if key in self.cache:
            self.result.cached += 1
            return self.cache[key]
        self.budget.check()  # spent: stop here, not after more candidates are built and verified
        try:
            verify(candidate)
        except HloError:
            self.result.invalid += 1
            self.cache[key] = False
            return False
        self.budget.charge()
        ok = bool(self.predicate(candidate))
        self.cache[key] = ok
        self.result.tests = self.budget.used
        if ok and (self.best is None or candidate.instruction_count < self.best.instruction_count):
            self.best = candidate
        if self.progress is not None:
            self.progress(self.phase, self.budget.used, candidate.instruction_count if ok else -1)
        return ok


def _shrink(judge: _Judge, items: Sequence[str], build: Callable[[list[str]], Module | None]) -> Module | None:
    """ddmin over ``items`` (instruction names): the candidate of the subset it
    keeps, or None when it could drop nothing.  A spent budget ends ddmin with
    what it has; the caller then learns it from the next check."""
    keep = ddmin(list(items), lambda subset: judge(build(subset)))
    return None if len(keep) == len(items) else build(keep)


def _names_as_written(judge: "_Judge", original: Module, reduced: Module) -> Module:
    """``reduced`` with the copies inlining made named back as ``original`` names
    them (``hlo_tools.written``), if the failure stays; the reduction is done, so a
    budget spent here keeps the copies' names rather than stopping it."""
    judge.phase = "names as written"
    renamed = reduced.clone()
    try:
        return renamed if WrittenNames(original).restore(renamed) and judge(renamed) else reduced
    except OutOfBudget:
        return reduced


def reduce_module(module: Module, predicate: Predicate, *, max_tests: int | None = None,
                  seconds: float | None = None, progress: Progress | None = None,
                  max_rounds: int = 4) -> Reduction:
    """The smallest module reachable from ``module`` on which ``predicate``
    still holds (see the module docstring).  ``NothingToReduce`` when it does
    not hold on ``module`` itself.  ``max_tests`` / ``seconds`` bound the
    predicate calls and the time; when one runs out the smallest module found so
    far is returned, with ``stopped`` saying which (Ctrl-C: "interrupted")."""
    started = time.monotonic()
    budget = Budget(tests=max_tests, seconds=seconds)
    result = Reduction(module, module.instruction_count, len(module.computations))
    judge = _Judge(predicate, budget, result, progress)
    judge.phase = "the module given"
    try:
        if not judge(module):
            raise NothingToReduce(f"the predicate ({getattr(predicate, 'description', 'given')}) does not hold on "
                                  f"{module.name} as given: nothing to reduce")
    except OutOfBudget:
        raise NothingToReduce("no predicate call allowed (--max-tests 0?): nothing to reduce") from None
    current = module

    def step(phase: str) -> None:
        result.steps.append(ReductionStep(phase, current.instruction_count, budget.used, round(time.monotonic() - started, 2)))

    try:
        for _ in range(max_rounds):
            size = current.instruction_count
            judge.phase = "entry"
            names = [i.name for i in subgraph.reducible(current.entry)]
            base = current
            smaller = _shrink(judge, names, lambda keep: subgraph.keep_entry(base, keep))
            if smaller is not None:
                current = smaller
                step("entry")
            budget.check()
            for fusion in subgraph.fusions(current):
                judge.phase = f"fusion {fusion}"
                body = current.entry.get_instruction(fusion).fused_computation
                names = [i.name for i in subgraph.reducible(body)]
                base = current
                smaller = _shrink(judge, names, lambda keep: subgraph.keep_fused(base, fusion, keep))
                if smaller is not None:
                    current = smaller
                    step(f"fusion {fusion}")
                budget.check()
            for name in subgraph.loops(current):  # into a scanned layer: one iteration of its body
                judge.phase = f"loop body {name}"
                body = subgraph.loop_body(current, name)
                if judge(body):
                    current = body
                    step(f"loop body {name}")
                    break
            for name in subgraph.inlinable(current):
                judge.phase = f"inline {name}"
                inlined = subgraph.inline(current, name)
                if judge(inlined):
                    current = inlined
                    step(f"inline {name}")
            if current.instruction_count >= size:
                break
        current = _names_as_written(judge, module, current)
    except OutOfBudget as e:
        result.stopped = str(e)
    except KeyboardInterrupt:  # a long reduction stopped by hand still answers with what it found
        result.stopped = "interrupted"
        current = judge.best if judge.best is not None else current
    if result.stopped is None and (budget.tests is not None and budget.used >= budget.tests
                                   or budget.seconds is not None and budget.elapsed() >= budget.seconds):
        result.stopped = f"{budget.used} tests, {budget.elapsed():.0f} s"  # ddmin stopped inside a phase
    result.module = current
    result.seconds = time.monotonic() - started
    return result
