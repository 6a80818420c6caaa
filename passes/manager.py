"""PassManager: runs passes in order (optionally to a fixed point), verifies
after each pass that changed something, records per-pass time and counts, and
can dump the module after each pass like ``--xla_dump_hlo_pass_re``."""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass, field
from pathlib import Path

from hlo_tools import Module, VerificationError, verify
from hlo_tools.fileio import make_dirs, write_output

from .base import Pass


class PassError(RuntimeError):
    """A pass broke the IR, misreported ``changed``, or the pipeline did not converge."""

    def __init__(self, message: str, pass_name: str = "", ran: tuple[str, ...] = ()):
        self.pass_name = pass_name
        self.ran = ran
        super().__init__(message + (f"\npasses that ran: {', '.join(ran)}" if ran else ""))


@dataclass(frozen=True)
class PassRecord:
    """One run of one pass."""

    name: str
    iteration: int
    changed: bool
    seconds: float
    instructions_before: int
    instructions_after: int


@dataclass
class PipelineResult:
    changed: bool
    iterations: int
    records: list[PassRecord] = field(default_factory=list)

    def table(self) -> str:
        """A plain-text table of the per-pass changes and times."""
        rows = [("pass", "iter", "changed", "instructions", "ms")]
        for r in self.records:
            rows.append((r.name, str(r.iteration), "yes" if r.changed else "-", f"{r.instructions_before} -> {r.instructions_after}", f"{r.seconds * 1e3:.1f}"))
        widths = [max(len(row[i]) for row in rows) for i in range(5)]
        return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths)) for row in rows)


def _fingerprint(module: Module) -> str:
    return hashlib.sha256(module.to_text().encode()).hexdigest()


@dataclass
class PassManager:
    """Runs ``passes`` over a module.

    ``fixed_point`` repeats the whole list until nothing changes (at most
    ``max_iterations`` rounds, else PassError); ``verify`` runs the verifier after
    each pass that changed something and names the pass that broke the IR;
    ``check_changed`` also fingerprints the printed module around every pass and
    fails a pass whose ``changed`` flag disagrees with the text (slow; for tests);
    ``dump_dir`` writes ``NN.passname.hlo`` after each pass.
    """

    passes: list[Pass]
    fixed_point: bool = False
    max_iterations: int = 25
    verify: bool = True
    check_changed: bool = False
    dump_dir: str | Path | None = None

    def run(self, module: Module) -> PipelineResult:
        result = PipelineResult(changed=False, iterations=0)
        ran: list[str] = []
        dump = Path(self.dump_dir) if self.dump_dir else None
        step = 0
        if dump is not None:
            make_dirs(dump)  # an OutputError naming the folder if it cannot be made
            self._dump(dump / "00.input.hlo", module)
        for iteration in range(1, (self.max_iterations if self.fixed_point else 1) + 1):
            result.iterations = iteration
            any_changed = False
            for p in self.passes:
                before = module.instruction_count
                fp = _fingerprint(module) if self.check_changed else None
                t0 = time.perf_counter()
                changed = bool(p.run(module))
                seconds = time.perf_counter() - t0
                ran.append(p.name)
                if fp is not None and (fp != _fingerprint(module)) != changed:
                    raise PassError(f"pass {p.name} reported changed={changed} but the module text says otherwise", p.name, tuple(ran))
                if changed and self.verify:
                    try:
                        verify(module)
                    except VerificationError as e:
                        raise PassError(f"pass {p.name} left an invalid module: {e}", p.name, tuple(ran)) from e
                result.records.append(PassRecord(p.name, iteration, changed, seconds, before, module.instruction_count))
                any_changed |= changed
                step += 1
                if dump is not None:
                    self._dump(dump / f"{step:02d}.{p.name}.hlo", module)
            result.changed |= any_changed
            if not any_changed:
                return result
        if self.fixed_point:
            raise PassError(f"pipeline did not reach a fixed point in {self.max_iterations} iterations", "", tuple(ran))
        return result

    @staticmethod
    def _dump(path: Path, module: Module) -> None:
        write_output(path, module.to_text())
