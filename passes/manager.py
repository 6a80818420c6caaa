"""PassManager: a pipeline that is itself a pass (XLA's HloPassPipeline).

It runs passes in order (optionally to a fixed point), verifies after each pass
that changed something, records per-pass time and counts, and can dump the
module after each pass like ``--xla_dump_hlo_pass_re``. ``run(module)`` answers
changed-or-not like any pass, so pipelines nest and plug in wherever a pass
does; ``run_with_report(module)`` also returns the per-pass report.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Sequence

from hlo_tools import Module, VerificationError, verify
from hlo_tools.fileio import file_stem, make_dirs, write_output
from hlo_tools.side_effects import one_memo

from .base import Pass, decides_fusion, runs_on


class PassError(RuntimeError):
    """A pass broke the IR, misreported ``changed``, or a fixed point was not reached."""

    def __init__(self, message: str, pass_name: str = "", ran: tuple[str, ...] = ()):
        self.pass_name = pass_name
        self.ran = ran
        super().__init__(message + (f"\npasses that ran: {', '.join(ran)}" if ran else ""))


@dataclass(frozen=True)
class PassRecord:
    """One run of one pass. A nested pipeline's record holds its own passes'
    records in ``nested`` (their ``iteration`` counts the inner pipeline's rounds)."""

    name: str
    iteration: int
    changed: bool
    seconds: float
    instructions_before: int
    instructions_after: int
    nested: tuple[PassRecord, ...] = ()


@dataclass
class PipelineResult:
    """What one pipeline run did: ``changed``, the rounds it took, one record per pass run."""

    changed: bool
    iterations: int
    records: list[PassRecord] = field(default_factory=list)

    def table(self) -> str:
        """A plain-text table of the per-pass changes and times; a nested
        pipeline's passes are indented under its row."""
        rows = [("pass", "iter", "changed", "instructions", "ms")]
        for depth, r in _walk(self.records, 0):
            rows.append(("  " * depth + r.name, str(r.iteration), "yes" if r.changed else "-",
                         f"{r.instructions_before} -> {r.instructions_after}", f"{r.seconds * 1e3:.1f}"))
        widths = [max(len(row[i]) for row in rows) for i in range(5)]
        return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths)) for row in rows)


def _walk(records: Sequence[PassRecord], depth: int) -> Iterator[tuple[int, PassRecord]]:
    for r in records:
        yield depth, r
        yield from _walk(r.nested, depth + 1)


def _fingerprint(module: Module) -> str:
    return hashlib.sha256(module.to_text().encode()).hexdigest()


def level(module) -> str:
    """"hlo" for our IR, else the module's own (``StableHloModule.level``)."""
    return "hlo" if isinstance(module, Module) else getattr(module, "level", "hlo")


def _verify(module) -> None:
    if isinstance(module, Module):
        verify(module)
    else:
        module.verify()  # MLIR's verifier, raising VerificationError


@dataclass(frozen=True)
class PassManager(Pass):
    """Runs ``passes`` over a module; a ``Pass`` itself, so it can be one of
    another PassManager's passes (it then runs with its own settings, shows as one
    row with its passes indented under it in ``table()``, and is one dump step).

    ``fixed_point`` repeats the whole list until nothing changes (at most
    ``max_iterations`` rounds, else PassError; ``FixedPoint`` does this for one
    pass); ``verify`` runs the verifier after each pass that changed something and
    names the pass that broke the IR; ``check_changed`` also fingerprints the
    printed module around every pass and fails a pass whose ``changed`` flag
    disagrees with the text (slow; for tests); ``dump_dir`` writes
    ``NN.passname.hlo`` after each pass; ``name`` is the pipeline's name when nested.
    """

    passes: Sequence[Pass]
    fixed_point: bool = False
    max_iterations: int = 25
    verify: bool = True
    check_changed: bool = False
    dump_dir: str | Path | None = None
    name: str = "pipeline"

    def __post_init__(self) -> None:
        object.__setattr__(self, "passes", tuple(self.passes))  # frozen: the pipeline cannot change after it is built

    @property
    def decides_fusion(self) -> bool:  # type: ignore[override] - asked of its passes, not a class constant
        return decides_fusion(self.passes)

    def run(self, module: Module) -> bool:
        """Runs the pipeline; True when any pass changed the module."""
        return self.run_with_report(module).changed

    def run_with_report(self, module: Module) -> PipelineResult:
        """Runs the pipeline and returns what each pass did (``table()`` prints it)."""
        return self._run(module, [], "")

    def _run(self, module: Module, ran: list[str], prefix: str) -> PipelineResult:
        """The pipeline, appending each pass it runs to ``ran`` (shared with an
        enclosing pipeline, so a PassError lists every pass that ran) under
        ``prefix`` (``"outer/"`` when nested)."""
        result = PipelineResult(changed=False, iterations=0)
        dump = Path(self.dump_dir) if self.dump_dir else None
        step = 0
        kind = level(module)
        suffix = ".hlo" if kind == "hlo" else ".mlir"
        if dump is not None:
            make_dirs(dump)  # an OutputError naming the folder if it cannot be made
            self._dump(dump / f"00.input{suffix}", module)
        for iteration in range(1, (self.max_iterations if self.fixed_point else 1) + 1):
            result.iterations = iteration
            any_changed = False
            for p in self.passes:
                before = module.instruction_count
                fp = _fingerprint(module) if self.check_changed else None
                where = prefix + p.name
                if not isinstance(p, PassManager) and not runs_on(p, kind):
                    raise PassError(f"pass {where} runs on {' and '.join(getattr(p, 'levels', ('hlo',)))} modules, "
                                    f"not {kind}", where, tuple(ran))
                t0 = time.perf_counter()
                if isinstance(p, PassManager):
                    inner = p._run(module, ran, where + "/")
                    changed, nested = inner.changed, tuple(inner.records)
                else:
                    with one_memo():  # side effects asked once per computation in this pass run
                        changed, nested = bool(p.run(module)), ()
                    ran.append(where)
                seconds = time.perf_counter() - t0
                if fp is not None and (fp != _fingerprint(module)) != changed:
                    raise PassError(f"pass {where} reported changed={changed} but the module text says otherwise", where, tuple(ran))
                if changed and self.verify:
                    try:
                        _verify(module)
                    except VerificationError as e:
                        raise PassError(f"pass {where} left an invalid module: {e}", where, tuple(ran)) from e
                result.records.append(PassRecord(p.name, iteration, changed, seconds, before, module.instruction_count, nested))
                any_changed |= changed
                step += 1
                if dump is not None:
                    self._dump(dump / f"{step:02d}.{file_stem(p.name)}{suffix}", module)  # a user pass names the file
            result.changed |= any_changed
            if not any_changed:
                return result
        if self.fixed_point:
            pipeline = f"pipeline {prefix[:-1]}" if prefix else "pipeline"
            raise PassError(f"{pipeline} did not reach a fixed point in {self.max_iterations} iterations", prefix[:-1], tuple(ran))
        return result

    @staticmethod
    def _dump(path: Path, module: Module) -> None:
        write_output(path, module.to_text())
