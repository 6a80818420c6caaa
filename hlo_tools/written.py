"""Names as the user wrote them: where an instruction of a module derived from
the user's file (by our passes, by an inliner, or by XLA's compile) sits in
that file, and in which computation.

Commands that report an instruction (bisect, regress, profile, analyze,
divergence) show the user's name, not the clone's: a pass's copy is
``sub.10.1`` or ``sub.10.clone`` where the file says ``sub.10``, a fusion is
``fusion.3`` where the file has the instruction it outputs, and XLA's compile
renames every instruction (jaxlib compiles through StableHLO, whose round
trip names instructions after their ``op_name`` metadata).  For that last
route ``stamp_names`` writes each instruction's name into its ``op_name``
before XLA sees the module; XLA keeps metadata on everything it clones and
fuses, so the stamp reads back from the optimized module.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterator

from .ir import Instruction, Module
from .opcode import HloOpcode

__all__ = ["Written", "WrittenNames", "stamp_names", "stamped_name", "twins"]

_CLONE_SUFFIX = re.compile(r"\.(?:clone|\d+)$")
_NAME_REF = re.compile(r"%([\w.\-]+)")


def stamp_names(module: Module) -> Module:
    """Sets every instruction's metadata to ``op_name="<its name>"`` (in place;
    returns ``module``), what ``stamped_name`` reads back after XLA optimized it.
    Other metadata (source lines, jax's op paths) goes: jax's ``op_name`` names a
    jax operation, which many instructions share."""
    for ins in module.instructions():
        ins.metadata = {"op_name": ins.name}
    return module


def stamped_name(ins: Instruction) -> str:
    """The name ``stamp_names`` wrote into ``op_name`` ("" without one).  The
    StableHLO round trip prefixes the op_name of what it inlines from a call with
    the call's path (``jit__threefry_split_.1/stack.5``); HLO names hold no "/",
    so the last component is the stamp."""
    return str((ins.metadata or {}).get("op_name") or "").rsplit("/", 1)[-1]


@dataclass(frozen=True)
class Written:
    """An instruction as the user's file has it.  ``via`` says how the reported
    instruction relates to it: "" it is the same, "copy" a clone of it (a pass or
    an inliner copied it), "fusion" a fusion whose output it computes, "stamp"
    XLA's instruction computing it (read from the stamped ``op_name``)."""

    name: str
    computation: str
    via: str = ""

    def __str__(self) -> str:
        return f"%{self.name} in %{self.computation}"

    def as_dict(self) -> dict:
        return {"name": self.name, "computation": self.computation, "via": self.via or None}


class WrittenNames:
    """The user's module, asked where a derived module's instruction sits in it."""

    def __init__(self, module: Module):
        self._where: dict[str, tuple[str, HloOpcode]] = {
            ins.name: (ins.parent.name, ins.opcode) for ins in module.instructions()}
        self._computations = {comp.name for comp in module.computations}

    def computation_of(self, name: str) -> str | None:
        """The computation the file puts ``name`` in (None: the file has no such name)."""
        found = self._where.get(name)
        return found[0] if found else None

    def find(self, ins: Instruction, *, stamped: bool = False) -> Written | None:
        """Where ``ins`` sits in the file: by its name (same opcode), as a clone of
        a name the file has (``.clone``/``.N`` suffixes of the same opcode), a
        fusion by the instruction its root computes, and with ``stamped`` (the
        module went through XLA after ``stamp_names``) by its stamped ``op_name``.
        None when nothing ties it to the file (a pass made it from nothing)."""
        if stamped:
            origin = stamped_name(_output_of(ins))
            comp = self.computation_of(origin)
            return Written(origin, comp, "" if origin == ins.name else "stamp") if comp else None
        found = self._where.get(ins.name)
        if found and found[1] is ins.opcode:
            return Written(ins.name, found[0])
        if ins.opcode is HloOpcode.FUSION and ins.fused_computation is not None and ins.fused_computation.root:
            inner = self.find(ins.fused_computation.root)
            return Written(inner.name, inner.computation, "fusion") if inner else None
        stem = next((s for s in _stems(ins.name) if s in self._where and self._where[s][1] is ins.opcode), None)
        return Written(stem, self._where[stem][0], "copy") if stem is not None else None

    def describe(self, ins: Instruction, *, stamped: bool = False) -> str:
        """``%name in %comp`` for the user's instruction, with the reported name
        when it differs: ``%sub.10 in %f (copied as %sub.10.1)``."""
        w = self.find(ins, stamped=stamped)
        if w is None:
            return f"%{ins.name} ({'XLA' if stamped else 'a pass'} made it; not in the file)"
        if not w.via:
            return str(w)
        how = {"copy": "copied as", "fusion": "output of", "stamp": "XLA's"}[w.via]
        return f"{w} ({how} %{ins.name})"

    def restore(self, module: Module) -> int:
        """Renames each copy in ``module`` (a clone's ``.clone``/``.N`` name), of an
        instruction or a computation, back to the user's name where ``module`` does
        not use that name; returns how many it renamed."""
        taken = {ins.name for ins in module.instructions()}
        comps = {comp.name for comp in module.computations}
        renamed = 0
        for comp in module.computations:
            stem = next((s for s in _stems(comp.name) if s in self._computations), None)
            if comp.name not in self._computations and stem is not None and stem not in comps:
                comps.discard(comp.name)
                comps.add(stem)
                comp.name = stem
                renamed += 1
            for ins in list(comp):
                w = self.find(ins)
                if w is not None and w.via == "copy" and w.name not in taken:
                    taken.discard(ins.name)
                    taken.add(w.name)
                    comp.rename_instruction(ins, w.name)
                    renamed += 1
        return renamed

    def describe_names(self, text: str, module: Module, *, stamped: bool = False) -> list[str]:
        """``describe`` for each ``%name`` of ``module`` that ``text`` mentions, in order."""
        named = {ins.name: ins for ins in module.instructions()}
        return [self.describe(named[n], stamped=stamped) for n in dict.fromkeys(_NAME_REF.findall(text)) if n in named]


def twins(plain: Module, stamped: Module) -> dict[tuple[str, str], Instruction] | None:
    """``stamped``'s instruction for each (computation, name) of ``plain``, where the
    two are XLA's optimized modules of one module compiled with and without
    ``stamp_names``: the same passes on the same graph give the same instructions
    in the same order, only named apart.  None when the two differ in anything
    but names (opcodes, shapes, counts): then nothing pairs them."""
    if len(plain.computations) != len(stamped.computations):
        return None
    out: dict[tuple[str, str], Instruction] = {}
    for a, b in zip(plain.computations, stamped.computations):
        ia, ib = a.instructions, b.instructions
        if len(ia) != len(ib):
            return None
        for x, y in zip(ia, ib):
            if x.opcode is not y.opcode or x.shape != y.shape:
                return None
            out[(a.name, x.name)] = y
    return out


def _stems(name: str) -> Iterator[str]:
    """``name`` less its clone suffixes, one more at a time: ``a.3.clone.1`` gives
    ``a.3.clone``, ``a.3``, ``a``."""
    while (shorter := _CLONE_SUFFIX.sub("", name)) != name:
        name = shorter
        yield name


def _output_of(ins: Instruction) -> Instruction:
    """What a kernel outputs: a fusion's root (nested fusions too), else itself;
    a stamped fusion carries the ``op_name`` of the instruction XLA fused last,
    its root carries the one whose value it returns."""
    while ins.opcode is HloOpcode.FUSION and ins.fused_computation is not None and ins.fused_computation.root:
        ins = ins.fused_computation.root
    return ins
