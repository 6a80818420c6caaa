"""One way to measure a pass against XLA: a ``Measurement`` says where (backend,
GPU target, flags, SPMD partitions, in the XLA worker or not); a ``XlaPipeline`` says
what XLA runs on the module (stock, as written, either with a pass hooked in at a
``HookStage``).  Studies, the ``hlo bench`` command, kernel extraction and the
benches all compile through it.

    m = Measurement("cpu")
    ours = XlaPipeline.as_written().hooked(PassManager(passes), HookStage.for_fusion("cpu"))
    res = m.compile_each(module, {"stock": STOCK, "ours": ours})
    res["ours"].hook.after          # the module as the pass left it
    m.benchmark(module, module, STOCK, ours)   # interleaved timings, outputs compared

A hooked pass is any object with ``run(module) -> bool`` (a ``Pass``, a
``PassManager``), or a callable ``(Module) -> bool | Module | None``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Mapping

from hlo_tools.ir import Module

from .hook_stage import HookStage
from .bench import BenchResult, benchmark
from .compiler import PIPELINES, CompileResult, Hook, compile


@dataclass(frozen=True)
class XlaPipeline:
    """What XLA runs on a module: ``base`` "stock" (its whole pipeline),
    "replace" (its generic fusion deciders off, the library rewriters kept) or
    "as-written" (every fusion pass off, so the module's fusions are what runs),
    with ``pass_`` run inside it at ``stage`` when given.  ``reprint``: hand the
    module back to XLA even when the pass changed nothing."""

    base: str = "stock"
    pass_: Any = None
    stage: HookStage | None = None
    reprint: bool = False

    def __post_init__(self) -> None:
        if self.base not in PIPELINES:
            raise ValueError(f"unknown pipeline {self.base!r}: use one of {', '.join(PIPELINES)}")
        if (self.pass_ is None) != (self.stage is None):
            raise ValueError("a hooked pass needs a stage, and a stage a pass")
        if self.stage is not None:
            object.__setattr__(self, "stage", HookStage(self.stage))

    @classmethod
    def stock(cls) -> "XlaPipeline":
        return cls("stock")

    @classmethod
    def as_written(cls) -> "XlaPipeline":
        return cls("as-written")

    @classmethod
    def fusion(cls, pass_: Any, backend: str, mode: str = "as-written") -> "XlaPipeline":
        """A Python fusion pipeline run inside XLA in one of ``FUSION_MODES``:
        "replace" (XLA's generic fusion deciders off, ours in their place, the rest of
        XLA around them), "on-top" (stock XLA, then ours over its fusions) or
        "as-written" (ours decide every fusion).  Ours run where XLA keeps what they
        write (``HookStage.for_fusion``); docs/xla_gpu_modes.md has the table."""
        if mode not in FUSION_MODES:
            raise ValueError(f"unknown fusion mode {mode!r}: use one of {', '.join(FUSION_MODES)}")
        return cls(FUSION_MODES[mode]).hooked(pass_, HookStage.for_fusion(backend))

    def hooked(self, pass_: Any, stage: HookStage | str, *, reprint: bool = False) -> "XlaPipeline":
        """This pipeline with ``pass_`` run inside it at ``stage``."""
        return dataclasses.replace(self, pass_=pass_, stage=HookStage(stage), reprint=reprint)

    def hook(self) -> Hook | None:
        """A fresh ``Hook`` for one compile (it records what that compile's pass saw)."""
        return Hook(self.pass_, self.stage, self.reprint) if self.pass_ is not None else None

    def __str__(self) -> str:
        if self.pass_ is None:
            return self.base
        name = getattr(self.pass_, "name", None) or type(self.pass_).__name__
        return f"{self.base} + {name} at {self.stage}"


#: How a Python fusion pipeline can run inside XLA: mode -> the base pipeline.
FUSION_MODES: dict[str, str] = {"replace": "replace", "on-top": "stock", "as-written": "as-written"}

#: XLA's own pipeline.
STOCK = XlaPipeline()
#: XLA's pipeline with its fusion passes off.
AS_WRITTEN = XlaPipeline("as-written")


@dataclass(frozen=True)
class Measurement:
    """Where modules are compiled and timed: ``backend`` ("cpu" or "gpu"),
    ``target`` (a GPU name or target file from ``targets``: XLA:GPU compiled
    here without a GPU; nothing runs), ``flags`` (XLA debug options),
    ``partitions`` (SPMD over that many CPU devices) and ``contained`` (in the XLA
    worker, where an XLA abort raises ``XlaAbortError``; executables stay there)."""

    backend: str = "cpu"
    target: str | None = None
    flags: Any = None
    partitions: int = 1
    contained: bool = False

    def compile(self, module: Module | str, pipeline: XlaPipeline = STOCK, *, dump_dir: str | None = None) -> CompileResult:
        """XLA's compile of ``module`` under ``pipeline``; the result's ``hook`` holds
        what a hooked pass saw (``seen``), did (``changed``) and left (``after``)."""
        return compile(module, self.backend, pipeline.base, flags=self.flags, target=self.target,
                       hook=pipeline.hook(), dump_dir=dump_dir, contained=self.contained,
                       partitions=self.partitions)

    def compile_each(self, module: Module | str, pipelines: Mapping[str, XlaPipeline]) -> dict[str, CompileResult]:
        """``module`` compiled under each pipeline, in order, for a comparison."""
        return {label: self.compile(module, p) for label, p in pipelines.items()}

    def benchmark(self, a: Module | str | CompileResult, b: Module | str | CompileResult | None = None,
                  pipeline_a: XlaPipeline = STOCK, pipeline_b: XlaPipeline = AS_WRITTEN, *, reps: int = 50,
                  warmup: int = 5, input_sets: int = 3, seed: int = 0, check: bool = True) -> BenchResult:
        """A and B timed interleaved on the same inputs, B's outputs compared with
        A's (``bench.benchmark``).  Only B may have a hooked pass; the result's
        ``hook_b`` holds what it saw and left."""
        if pipeline_a.pass_ is not None:
            raise ValueError("benchmark hooks a pass into B's pipeline only: measure the pass as B")
        if self.target is not None or self.partitions != 1:
            raise ValueError("nothing runs on a deviceless target or over SPMD partitions: compile only")
        return benchmark(a, b, backend=self.backend, pipeline_a=pipeline_a.base, pipeline_b=pipeline_b.base,
                         reps=reps, warmup=warmup, input_sets=input_sets, seed=seed, flags=self.flags, check=check,
                         hook_b=pipeline_b.hook(), contained=self.contained)
