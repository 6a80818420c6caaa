"""FixedPoint: one pass repeated until it stops changing the module (XLA's HloPassFix)."""

from __future__ import annotations

from dataclasses import dataclass

from hlo_tools import Module

from .base import Pass
from .manager import PassError


@dataclass(frozen=True)
class FixedPoint(Pass):
    """Runs ``pass_`` until it reports no change; a pass that still changes the
    module on run ``max_iterations`` is a PassError. It carries the wrapped pass's
    name, as HloPassFix does, so tables and dumps show the pass itself."""

    pass_: Pass
    max_iterations: int = 25

    @property
    def name(self) -> str:  # type: ignore[override] - the wrapped pass's name, not a class constant
        return self.pass_.name

    @property
    def decides_fusion(self) -> bool:  # type: ignore[override] - the wrapped pass's answer
        return self.pass_.decides_fusion

    def run(self, module: Module) -> bool:
        changed = False
        for _ in range(self.max_iterations):
            if not self.pass_.run(module):
                return changed
            changed = True
        raise PassError(f"pass {self.name} did not reach a fixed point in {self.max_iterations} iterations", self.name)
