"""One module's per-pass dumps, in pipeline order: what each XLA pass changed.

With ``--xla_dump_hlo_pass_re=.*`` XLA writes the module at the start of each
pipeline and again after every pass that changed it:
``module_0018.jit_train_step.0047.HLO_passes_after_layout_assignment.after_fusion.before_fusion-wrapper.txt``
is the module after the pass ``fusion``, the 48th dump of the compilation
(``corpus.dump`` reads these names into ``PassDump``). So the change between one
dump and the one before it is the work of the later dump's pass (passes that
changed nothing wrote no file).

``walk`` parses each dump once and keeps counts, an opcode histogram and where
the names asked for (``find``) live; ``diff`` matches two steps' modules with
``visualize.diff`` (only on request: it is the slow part).
Nothing here imports jax, except to read ``.hlo.pb`` dumps.
"""

from __future__ import annotations

import collections
import dataclasses
from pathlib import Path
from typing import Callable, Iterable

from corpus.dump import DumpModule, from_dump_dir
from hlo_tools.errors import HloError
from hlo_tools.ir import Module
from hlo_tools.stats import module_stats
from visualize.diff import ModuleDiff, diff_modules
from xla_bridge import load

__all__ = ["PassStep", "Walk", "find_module", "modules_with_passes", "walk", "load_step", "diff_steps", "first_changes"]


@dataclasses.dataclass
class PassStep:
    """One dump of the walk: ``seq`` is XLA's dump number (None for the
    ``before_optimizations`` / ``*after_optimizations`` ends), ``pass_name``
    the pass after which XLA wrote it (or the stage name at the ends)."""

    seq: int | None
    pipeline: str
    pass_name: str
    next_pass: str | None
    path: Path
    instructions: int | None = None
    fusions: int | None = None
    computations: int | None = None
    opcodes: dict[str, int] = dataclasses.field(default_factory=dict, repr=False)  # outside fusion bodies
    where: dict[str, str | None] = dataclasses.field(default_factory=dict)  # find name -> its computation, or None
    error: str | None = None

    @property
    def label(self) -> str:
        return self.pass_name if self.seq is None else f"{self.seq:04d} {self.pipeline}/{self.pass_name}"

    def as_dict(self) -> dict:
        return {"seq": self.seq, "pipeline": self.pipeline, "pass": self.pass_name, "next_pass": self.next_pass,
                "file": self.path.name, "instructions": self.instructions, "fusions": self.fusions,
                "computations": self.computations, "where": self.where, "error": self.error}


@dataclasses.dataclass
class Walk:
    """The steps of one module, first to last, with the module they came from."""

    module: DumpModule
    steps: list[PassStep]

    def opcode_delta(self, i: int, top: int | None = 4) -> list[tuple[str, int]]:
        """The biggest per-opcode count changes from the step before ``i`` to ``i`` (all with ``top=None``)."""
        prev = self._previous_parsed(i)
        if prev is None or self.steps[i].error:
            return []
        a, b = collections.Counter(prev.opcodes), collections.Counter(self.steps[i].opcodes)
        delta = [(op, b[op] - a[op]) for op in a.keys() | b.keys() if b[op] != a[op]]
        return sorted(delta, key=lambda d: (-abs(d[1]), d[0]))[:top]  # [:None] is all

    def _previous_parsed(self, i: int) -> PassStep | None:
        for s in reversed(self.steps[:i]):
            if s.error is None:
                return s
        return None

    def previous(self, i: int) -> PassStep | None:
        """The step before ``i`` that parsed (what step ``i``'s pass started from)."""
        return self._previous_parsed(i)

    def select(self, spec: str) -> list[int]:
        """PassStep indices for ``spec``: a dump number (``47`` or ``0047``), else a
        pass name (every step after that pass), else ``pipeline/pass``."""
        if spec.isdigit():
            hits = [i for i, s in enumerate(self.steps) if s.seq == int(spec)]
        else:
            hits = [i for i, s in enumerate(self.steps) if spec in (s.pass_name, f"{s.pipeline}/{s.pass_name}")]
        if not hits:
            names = sorted({s.pass_name for s in self.steps if s.seq is not None})
            raise KeyError(f"no pass dump {spec!r} for module_{self.module.module_id:04d}.{self.module.name}; "
                           f"passes with dumps: {', '.join(names)}")
        return hits


def modules_with_passes(folder: str | Path) -> list[DumpModule]:
    """The modules of a dump folder that have per-pass dumps."""
    return [m for m in from_dump_dir(folder) if m.passes]


def find_module(folder: str | Path, spec: str | None) -> DumpModule:
    """One module of a dump folder by id (``18``, ``0018``) or name
    (``jit_train_step``, ``module_0018.jit_train_step``); without ``spec``, the
    only module with per-pass dumps. A ``LookupError`` says what there is."""
    mods = from_dump_dir(folder)
    with_passes = [m for m in mods if m.passes]

    def listing(ms: list[DumpModule]) -> str:
        return ", ".join(f"{m.module_id:04d} {m.name} ({len(m.passes)} pass dumps)" for m in ms[:20]) + (
            f" and {len(ms) - 20} more" if len(ms) > 20 else "")

    if spec is None:
        if len(with_passes) == 1:
            return with_passes[0]
        if not with_passes:
            raise LookupError(f"{folder}: no per-pass dumps (dump with --xla_dump_hlo_pass_re=.*)")
        raise LookupError(f"{folder}: {len(with_passes)} modules have pass dumps, choose one with --module: "
                          f"{listing(with_passes)}")
    if spec.isdigit():
        hits = [m for m in mods if m.module_id == int(spec)]
    else:
        hits = [m for m in mods if spec in (m.name, f"module_{m.module_id:04d}.{m.name}")]
        if len(hits) > 1 and sum(1 for m in hits if m.passes) == 1:
            hits = [m for m in hits if m.passes]
    if not hits:
        raise LookupError(f"{folder}: no module {spec!r}; modules with pass dumps: {listing(with_passes) or 'none'}")
    if len(hits) > 1:
        raise LookupError(f"{folder}: {len(hits)} modules are named {spec!r}, give the id: {listing(hits)}")
    if not hits[0].passes:
        raise LookupError(f"module_{hits[0].module_id:04d}.{hits[0].name} has no per-pass dumps "
                          f"(dump with --xla_dump_hlo_pass_re=.*)")
    return hits[0]


def _steps(module: DumpModule) -> list[PassStep]:
    steps = []
    if module.before_optimizations is not None:
        steps.append(PassStep(None, "", "before_optimizations", None, module.before_optimizations))
    steps += [PassStep(p.index, p.pipeline, p.pass_name, p.next_pass, p.path) for p in module.passes]
    for stage, path in sorted(module.stages.items()):
        if stage.endswith("after_optimizations") and stage != "after_optimizations":
            steps.append(PassStep(None, "", stage, None, path))
    return steps


def load_step(step: PassStep) -> Module:
    """The module of one step (``xla_bridge.load``: text or ``.hlo.pb``)."""
    return load(step.path)


def walk(module: DumpModule, *, find: Iterable[str] = (),
         progress: Callable[[int, int, PassStep], None] | None = None) -> Walk:
    """Parses every dump of ``module`` in order; a dump that does not parse is a
    step with ``error`` set (the walk goes on). ``find``: instruction names to
    locate in every step (``PassStep.where``)."""
    names = [n.lstrip("%") for n in find]
    steps = _steps(module)
    for k, step in enumerate(steps):
        if progress is not None:
            progress(k, len(steps), step)
        try:
            m = load_step(step)
        except HloError as e:
            step.error = (str(e).splitlines() or [type(e).__name__])[0]
            continue
        st = module_stats(m)
        step.instructions, step.fusions, step.computations = st.instructions, st.fusions, st.computations
        step.opcodes = _opcodes_outside_fusion_bodies(m)
        if names:
            home = {i.name: c.name for c in m.computations for i in c}
            step.where = {n: home.get(n) for n in names}
    return Walk(module, steps)


def _opcodes_outside_fusion_bodies(m: Module) -> dict[str, int]:
    """Opcode counts of every computation but fusion bodies: a fusion pass shows
    as fewer adds and more fusions, not as the copies it made inside them."""
    bodies = {id(i.fused_computation) for i in m.instructions() if i.opcode_text == "fusion"}
    return dict(collections.Counter(i.opcode_text for c in m.computations if id(c) not in bodies for i in c))


def diff_steps(w: Walk, i: int) -> ModuleDiff:
    """What step ``i``'s pass changed: its module matched against the step before."""
    prev = w.previous(i)
    if prev is None:
        raise KeyError(f"{w.steps[i].label}: no earlier dump to compare with")
    return diff_modules(load_step(prev), load_step(w.steps[i]))


def first_changes(w: Walk, name: str) -> list[tuple[int, str | None, str | None]]:
    """Where ``name`` moves during the walk: ``(step index, computation before,
    computation after)`` for every step where it appears (before None),
    disappears (after None) or moves to another computation (into a fusion body,
    say). The first step is included when the name is there from the start."""
    name = name.lstrip("%")
    out: list[tuple[int, str | None, str | None]] = []
    prev: str | None = None
    seen = False
    for k, s in enumerate(w.steps):
        if s.error is not None:
            continue
        here = s.where.get(name)
        if (not seen and here is not None) or (seen and here != prev):
            out.append((k, prev, here))
        prev, seen = here, True
    return out
