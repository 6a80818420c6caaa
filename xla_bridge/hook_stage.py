"""Where in XLA's pipeline a Python pass can run: the one spelling of hook stages.

jax's HLO module transformations (``jax.extend.xla``, jax >= 0.12) run at two
points of XLA's pipeline, named after its scheduler:

- ``PRE_SCHEDULER``: on XLA:CPU after layout assignment and fusion, just before
  scheduling; on XLA:GPU at the end of its "optimization" pipeline, before layout
  assignment (which then CHECK-fails on fusion bodies).
- ``POST_SCHEDULER``: after scheduling (on XLA:GPU after layout assignment and
  gemm rewriting too), on the module XLA then emits as it is.
"""

from __future__ import annotations

import enum


class HookStage(str, enum.Enum):
    """A stage of XLA's pipeline where a hooked pass runs.  A ``str`` enum, so
    ``"pre-scheduler"`` (the command line's spelling) converts: ``HookStage(s)``."""

    PRE_SCHEDULER = "pre-scheduler"
    POST_SCHEDULER = "post-scheduler"

    def __str__(self) -> str:
        return self.value

    @classmethod
    def _missing_(cls, value: object) -> "HookStage":
        raise ValueError(f"unknown hook stage {value!r}: use 'pre-scheduler' or 'post-scheduler'")

    @property
    def jax_name(self) -> str:
        """The member of jax's ``PipelineStage`` enum."""
        return self.name

    @classmethod
    def for_fusion(cls, backend: str) -> "HookStage":
        """Where a pass that decides fusion runs, per backend: XLA:CPU's
        pre-scheduler stage sees the layout-assigned module just before
        scheduling; on XLA:GPU that stage is before layout assignment, which
        then CHECK-fails on fusion bodies, so the post-scheduler one (after
        layout assignment, gemm rewriting and scheduling, on the unfused module),
        where XLA:GPU compiles the fusions handed back as written."""
        return cls.PRE_SCHEDULER if backend == "cpu" else cls.POST_SCHEDULER
