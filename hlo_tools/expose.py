"""Make intermediate values outputs, so that running a module reads them.

XLA hands back only what the entry computation's root produces: to see the value
of an instruction in the middle of a module (to find where two modules start to
disagree), the instruction has to become an output.  ``expose`` builds that
module: a copy whose root is a tuple of the original root's outputs followed by
the chosen intermediates, the rest untouched.  Materializing a value can change
how XLA fuses around it, not what it computes.

    probed = expose(module, ["sub.11", "exp.4"])
    probed.module             # root: (original outputs..., sub.11, exp.4)
    probed.original_outputs   # how many of the outputs are the original ones
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from .errors import IrError
from .ir import Instruction, Module
from .opcode import HloOpcode
from .rewriter import Rewriter
from .shape import Shape


@dataclass(frozen=True)
class Exposed:
    """A module with intermediates as outputs: outputs ``0 .. original_outputs-1``
    are the original root's array leaves, then one per name in ``probes``."""

    module: Module
    original_outputs: int
    probes: tuple[str, ...]


def readable(instr: Instruction) -> bool:
    """Whether ``instr``'s value can be an output of its own: an array (a tuple is
    read through its elements, a token has no value)."""
    return instr.shape.is_array


def _leaves(instr: Instruction, rw: Rewriter) -> list[Instruction]:
    """``instr`` itself, or for a tuple its array leaves through get-tuple-elements."""
    if not instr.shape.is_tuple:
        return [instr] if instr.shape.is_array else []
    out: list[Instruction] = []
    for i, sub in enumerate(instr.shape.tuple_shapes):
        gte = Instruction.create(HloOpcode.GET_TUPLE_ELEMENT, sub, [instr], name=f"{instr.name}.expose", index=i)
        rw.append(instr.parent, gte)
        out += _leaves(gte, rw)
    return out


def _copy(v: Instruction, rw: Rewriter) -> Instruction:
    copy = Instruction.create(HloOpcode.COPY, v.shape, [v], name=f"{v.name}.expose_copy")
    rw.append(v.parent, copy)
    return copy


def _distinct(values: list[Instruction], rw: Rewriter) -> list[Instruction]:
    """``values`` with a ``copy`` in place of each repeat and each parameter: every
    output its own buffer. Copy insertion does that in XLA's pipeline; a module
    XLA already scheduled skips it, and XLA:CPU's client aborts on two outputs in
    one buffer ("Unexpected duplicate")."""
    seen: set[int] = set()
    out = []
    for v in values:
        if id(v) in seen or v.opcode is HloOpcode.PARAMETER:
            v = _copy(v, rw)
        seen.add(id(v))
        out.append(v)
    return out


def expose(module: Module, names: Iterable[str]) -> Exposed:
    """A copy of ``module`` whose entry root is a tuple of the original outputs
    (the root's array leaves) and the entry instructions named in ``names``, in
    that order, each probe through a ``copy`` (its own buffer, even where it is
    a bitcast of an output in a scheduled module).  The entry layout and
    input/output aliasing are dropped (the
    result shape changed; XLA picks default layouts).  Raises ``IrError`` for a
    name the entry does not have or a value that is not an array."""
    names = tuple(names)
    copy = module.clone()
    entry = copy.entry
    rw = Rewriter()
    probes: list[Instruction] = []
    for name in names:
        instr = entry.get_instruction(name)
        if instr is None:
            raise IrError(f"module {module.name}: the entry has no instruction %{name} to expose")
        if not readable(instr):
            raise IrError(f"%{name} is {instr.shape.to_text()}: only arrays can be exposed (read a tuple's elements)")
        probes.append(instr)
    old_root = entry.root
    outputs = list(old_root.operands) if old_root.opcode is HloOpcode.TUPLE else [old_root]
    leaves = [leaf for o in outputs for leaf in _leaves(o, rw)]
    values = _distinct(leaves, rw) + [_copy(p, rw) for p in probes]
    root = Instruction.create(HloOpcode.TUPLE, Shape.tuple_of([v.shape for v in values]), values, name="expose.root")
    rw.append(entry, root)
    rw.set_root(entry, root)
    rw.erase_if_dead(old_root)
    for key in ("entry_computation_layout", "input_output_alias"):
        rw.set_module_attribute(copy, key, None)
    return Exposed(copy, len(leaves), names)
