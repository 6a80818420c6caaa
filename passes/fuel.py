"""Compiler fuel, as XLA's ``--xla_fuel=PASS=N``: a budget of decisions, so that a
bisection can stop a pass after its Nth decision and name the decision that
broke a module (``hlo bisect``).

A pass asks before each decision it is about to make (one fusion, one rewrite):

    if not consume_fuel(lambda: f"fuse %{producer.name} into %{consumer.name}"):
        continue          # out of fuel: behave as if the decision were unprofitable

Outside a ``fuel()`` context every request is granted and nothing is recorded, so
a pass pays one context-variable read per decision.  Unlike XLA's per-process
counters keyed by pass name, the budget belongs to the code run inside the
context: a bisection runs the earlier passes without fuel and the suspect with it.
The built-in passes that take fuel: producer-consumer (and its GPU and reduction
epilogue variants), multi-output, horizontal, priority and library-dot fusion,
and cse.  ``simplify``'s greedy patterns do not (a pattern rewrites as it matches),
nor does dce (removing what nothing uses changes no value).
"""

from __future__ import annotations

import contextlib
import contextvars
from dataclasses import dataclass, field
from typing import Callable, Iterator

from hlo_tools import Module

from .base import Pass

__all__ = ["Fuel", "Fueled", "consume_fuel", "fuel"]


@dataclass
class Fuel:
    """``limit`` decisions may be made (None: any number); ``decisions`` lists the
    granted ones in order (what each was), ``refused`` counts the others."""

    limit: int | None = None
    decisions: list[str] = field(default_factory=list)
    refused: int = 0

    def consume(self, what: str | Callable[[], str]) -> bool:
        if self.limit is not None and len(self.decisions) >= self.limit:
            self.refused += 1
            return False
        self.decisions.append(what() if callable(what) else what)
        return True


_ACTIVE: contextvars.ContextVar[Fuel | None] = contextvars.ContextVar("hlo_fuel", default=None)


def consume_fuel(what: str | Callable[[], str] = "") -> bool:
    """May the running pass make this decision?  ``what`` describes it (a callable
    is called only when a fuel context records it)."""
    active = _ACTIVE.get()
    return True if active is None else active.consume(what)


@contextlib.contextmanager
def fuel(limit: int | None = None) -> Iterator[Fuel]:
    """Passes run inside get ``limit`` decisions between them; the yielded ``Fuel``
    records what they decided."""
    f = Fuel(limit)
    token = _ACTIVE.set(f)
    try:
        yield f
    finally:
        _ACTIVE.reset(token)


@dataclass(frozen=True)
class Fueled(Pass):
    """``pass_`` run with ``limit`` decisions: a picklable pass, so the bisection of
    a pass hooked into XLA's pipeline runs in the XLA worker too."""

    pass_: Pass
    limit: int | None = None

    @property
    def name(self) -> str:  # type: ignore[override]
        return f"{self.pass_.name}[fuel={self.limit}]"

    def run(self, module: Module) -> bool:
        with fuel(self.limit):
            return self.pass_.run(module)
