"""Zeller's delta debugging (ddmin): the smallest subset of a list of parts for
which a test still holds, found by testing chunks and their complements at a
growing granularity.  Knows nothing of HLO: the reducer hands it instructions
and a test that builds and judges a module from the ones kept."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Sequence, TypeVar

T = TypeVar("T")


class OutOfBudget(Exception):
    """The reduction spent its tests or its seconds: keep what was found so far."""


@dataclass
class Budget:
    """How many predicate calls and seconds a reduction may spend (None: no
    limit).  ``charge`` is called before each predicate call."""

    tests: int | None = None
    seconds: float | None = None
    used: int = 0
    started: float = field(default_factory=time.monotonic)

    def check(self) -> None:
        """Raises ``OutOfBudget`` when no further predicate call is allowed."""
        if self.tests is not None and self.used >= self.tests:
            raise OutOfBudget(f"{self.used} tests")
        if self.seconds is not None and self.elapsed() >= self.seconds:
            raise OutOfBudget(f"{self.elapsed():.0f} s")

    def charge(self) -> None:
        self.check()
        self.used += 1

    def elapsed(self) -> float:
        return time.monotonic() - self.started


def _chunks(items: list[T], n: int) -> list[list[T]]:
    """``items`` in ``n`` contiguous chunks of near-equal size (neighbours in a
    computation are related, so contiguous chunks fail or pass together)."""
    size, extra = divmod(len(items), n)
    out, start = [], 0
    for k in range(n):
        end = start + size + (1 if k < extra else 0)
        out.append(items[start:end])
        start = end
    return [c for c in out if c]


def ddmin(items: Sequence[T], test: Callable[[list[T]], bool]) -> list[T]:
    """A 1-minimal subset of ``items`` (hashable, in their order) on which
    ``test`` holds: removing any one part of it makes the test fail.
    ``test(items)`` is assumed to hold; no subset is tested twice.  When
    ``test`` raises ``OutOfBudget`` the smallest subset found so far is
    returned: every answer is one the test accepted."""
    answers: dict[tuple, bool] = {}

    def holds(subset: list[T]) -> bool:  # ddmin asks again for subsets it saw (a chunk is the other's complement)
        key = tuple(subset)
        if key not in answers:
            answers[key] = test(subset)
        return answers[key]

    current = list(items)
    n = 2
    try:
        while len(current) >= 2:
            chunks = _chunks(current, n)
            for chunk in chunks:  # one chunk alone: the quick win when the cause is local
                if holds(chunk):
                    current, n = chunk, 2
                    break
            else:
                for k in range(len(chunks)):  # everything but one chunk
                    rest = [x for j, c in enumerate(chunks) if j != k for x in c]
                    if holds(rest):
                        current, n = rest, max(n - 1, 2)
                        break
                else:
                    if n >= len(current):
                        break
                    n = min(2 * n, len(current))
    except OutOfBudget:
        pass
    return current
