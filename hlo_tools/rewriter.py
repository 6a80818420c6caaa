"""The rewriter: the one route by which a pass edits the IR.

Every edit a pass needs is a method here (set an attribute or a literal, insert
before/after, replace an instruction and all its uses, erase, rename, set the
root, add or remove a computation, reorder).  Each goes through the IR method
that keeps the invariants and records that the module changed, so a pass
returns ``rewriter.changed`` instead of keeping its own flag.  The greedy
pattern driver (``apply_patterns_greedily``) hands the same object to its
``RewritePattern``s and revisits what they touched, like xDSL's and MLIR's.

    rw = Rewriter()
    rw.set_attribute(instr, "dimensions", (1, 0))
    rw.replace_instruction(old, Instruction.create("negate", old.shape, [x]))
    return rw.changed
"""

from __future__ import annotations

from typing import Callable, ClassVar, Iterable

from .ir import Computation, Instruction, Module
from .opcode import HloOpcode
from .shape import Shape
from .side_effects import SideEffects, side_effects


#: Instruction properties that are not views of an attribute (each has its own method).
_NOT_ATTRIBUTE_VIEWS = frozenset({"name", "shape", "literal", "operands", "users", "attributes", "raw_attributes",
                                  "control_predecessors", "control_successors", "called_computations",
                                  "called_computation_map", "fused_computation", "to_apply"})


class Rewriter:
    """Edits the IR and remembers whether it did.

    ``computation`` (optional) scopes the worklist: instructions an edit touched
    in that computation are queued in ``worklist`` for the greedy driver to
    revisit.  ``changed`` becomes True at the first edit that changed something."""

    def __init__(self, computation: Computation | None = None) -> None:
        self.computation = computation
        self.changed = False
        self.worklist: list[Instruction] = []
        self._effects: SideEffects | None = None

    def _touch(self, instrs: Iterable[Instruction]) -> None:
        scope = self.computation
        for i in instrs:
            if i.parent is not None and (scope is None or i.parent is scope):
                self.worklist.append(i)

    @property
    def effects(self) -> SideEffects:
        """The side-effect oracle ``erase_if_dead`` consults (one per rewriter,
        memoized over called computations)."""
        if self._effects is None:
            self._effects = side_effects()
        return self._effects

    # -- inserting ---------------------------------------------------------------
    def insert_before(self, anchor: Instruction, new: Instruction, *, unique: bool = True) -> Instruction:
        """Adds the detached ``new`` just before ``anchor`` (a name suffix if taken)."""
        anchor.parent.add_instruction(new, before=anchor, unique=unique)
        self.changed = True
        self._touch([new])
        return new

    def insert_after(self, anchor: Instruction, new: Instruction, *, unique: bool = True) -> Instruction:
        """Adds the detached ``new`` just after ``anchor``."""
        anchor.parent.add_instruction(new, after=anchor, unique=unique)
        self.changed = True
        self._touch([new])
        return new

    def append(self, comp: Computation, new: Instruction, *, unique: bool = True) -> Instruction:
        """Adds the detached ``new`` at the end of ``comp``."""
        comp.add_instruction(new, unique=unique)
        self.changed = True
        self._touch([new])
        return new

    # -- replacing -------------------------------------------------------------
    def replace_all_uses_with(self, old: Instruction, new: Instruction, *, allow_different_shape: bool = False) -> None:
        """Points every user of ``old`` (and its computation's root) at ``new``."""
        if old is new:
            return
        users = old.users
        was_root = old.is_root
        old.replace_all_uses_with(new, allow_different_shape=allow_different_shape)
        if users or was_root:
            self.changed = True
        self._touch(users)
        self._touch([new])

    def replace_operand(self, instr: Instruction, index: int, new: Instruction, *, erase_dead: bool = True) -> None:
        """Makes operand ``index`` of ``instr`` refer to ``new``; the old operand
        goes if nothing uses it any more (unless ``erase_dead`` is False)."""
        old = instr.operand(index)
        if old is new:
            return
        instr.replace_operand(index, new)
        self.changed = True
        self._touch([instr, new])
        if erase_dead:
            self.erase_if_dead(old)

    def replace_operands(self, instr: Instruction, operands: Iterable[Instruction]) -> None:
        """Replaces the whole operand list (for a rewrite that also changes
        ``instr``'s shape: call ``set_shape`` too)."""
        operands = tuple(operands)
        if operands == instr.operands:
            return
        instr.replace_operands(operands)
        self.changed = True
        self._touch([instr, *operands])

    def replace_instruction(self, old: Instruction, new: Instruction, *, allow_different_shape: bool = False) -> Instruction:
        """XLA's ``ReplaceInstruction``: ``old``'s uses move to ``new``, ``old`` goes, and
        so do operands of ``old`` that became dead. A detached ``new`` is inserted
        before ``old`` and takes its metadata (XLA's ``SetupDerivedInstruction``); an
        existing value (``x + 0`` => ``x``) is used as it is. Returns ``new``."""
        if new.parent is None:
            meta = old.attribute("metadata")
            if meta is not None and new.attribute("metadata") is None:
                new.set_attribute("metadata", meta)
            self.insert_before(old, new)
        self.replace_all_uses_with(old, new, allow_different_shape=allow_different_shape)
        if old.users:
            return new  # ``new`` itself uses ``old`` (a wrapping copy): it stays
        operands = old.operands
        self.erase(old)
        for op in operands:
            self.erase_if_dead(op)
        return new

    # -- erasing -------------------------------------------------------------------
    def erase(self, instr: Instruction) -> None:
        """Removes ``instr``, which nothing may use (XLA's RemoveInstruction);
        its control edges are handed on."""
        instr.parent.remove_instruction(instr)
        self.changed = True

    def is_dead(self, instr: Instruction) -> bool:
        """Nothing uses it and removing it changes no behaviour: not the root, a
        parameter, ordered by control edges, or side-effecting
        (``hlo_tools.side_effects``, the rule dce uses too)."""
        comp = instr.parent
        if comp is None or instr.users or instr is comp.root or instr.opcode is HloOpcode.PARAMETER:
            return False
        return not instr.control_successors and not self.effects.instruction(instr)

    def erase_if_dead(self, instr: Instruction) -> None:
        """Removes ``instr`` and then its operands while they are dead (``is_dead``)."""
        stack = [instr]
        while stack:
            x = stack.pop()
            if not self.is_dead(x):
                continue
            operands = x.operands
            x.parent.remove_instruction(x)
            self.changed = True
            stack.extend(operands)
            self._touch(operands)

    # -- fields ----------------------------------------------------------------------
    def set_attribute(self, instr: Instruction, key: str, value) -> None:
        """Sets an attribute from HLO text or a typed value (None removes it)."""
        before = instr.attribute(key)
        instr.set_attribute(key, value)
        if instr.attribute(key) != before:
            self.changed = True
            self._touch([instr])

    def set_field(self, instr: Instruction, field: str, value) -> None:
        """Sets one of the instruction's typed attribute views
        (``dimensions``, ``slice``, ``dot_dimension_numbers``, ``metadata``,
        ``backend_config``...), which write the attribute text in XLA's spelling."""
        if field in _NOT_ATTRIBUTE_VIEWS or not isinstance(getattr(Instruction, field, None), property):
            raise AttributeError(f"{field!r} is not a typed attribute of an instruction; see Rewriter's other set_ methods")
        before = list(instr.attributes.items())
        setattr(instr, field, value)
        if list(instr.attributes.items()) != before:
            self.changed = True
            self._touch([instr])

    def set_literal(self, instr: Instruction, text: str) -> None:
        """Sets a constant's literal (checked against its shape)."""
        if instr.literal != text:
            instr.literal = text
            self.changed = True
            self._touch([instr, *instr.users])

    def set_shape(self, instr: Instruction, shape: Shape) -> None:
        """Sets the result shape (layout changes included); users are revisited."""
        if instr.shape != shape:
            instr.shape = shape
            self.changed = True
            self._touch([instr, *instr.users])

    def rename(self, instr: Instruction, name: str) -> None:
        if instr.name != name:
            instr.parent.rename_instruction(instr, name)
            self.changed = True

    def set_root(self, comp: Computation, instr: Instruction) -> None:
        if comp.root is not instr:
            comp.set_root(instr)
            self.changed = True

    def set_called_computations(self, instr: Instruction, key: str, comps: Iterable[Computation]) -> None:
        comps = tuple(comps)
        if instr.called_computation_map.get(key, ()) != comps:
            instr.set_called_computations(key, comps)
            self.changed = True

    def add_control_predecessor(self, instr: Instruction, pred: Instruction) -> None:
        if pred not in instr.control_predecessors:
            instr.add_control_predecessor(pred)
            self.changed = True

    def remove_control_predecessor(self, instr: Instruction, pred: Instruction) -> None:
        instr.remove_control_predecessor(pred)
        self.changed = True

    def drop_all_control_deps(self, instr: Instruction) -> None:
        if instr.has_control_dependencies:
            instr.drop_all_control_deps()
            self.changed = True

    def set_instruction_order(self, comp: Computation, order: list[Instruction]) -> None:
        """Reorders ``comp`` (a schedule's sequence)."""
        if list(comp) != list(order):
            comp.set_instruction_order(order)
            self.changed = True

    # -- computations and the module --------------------------------------------------
    def add_computation(self, module: Module, comp: Computation, *, entry: bool = False) -> Computation:
        module.add_computation(comp, entry=entry)
        self.changed = True
        return comp

    def remove_computation(self, module: Module, comp: Computation) -> None:
        """Removes a computation nothing calls (not the entry)."""
        self.remove_computations(module, [comp])

    def remove_computations(self, module: Module, comps: Iterable[Computation]) -> None:
        """Removes computations that only each other call (one scan for callers)."""
        comps = list(comps)
        if comps:
            module.remove_computations(comps)
            self.changed = True

    def set_scheduled(self, module: Module, scheduled: bool = True) -> None:
        """Marks the module scheduled (``is_scheduled=true``: its instruction
        order is the schedule) or not."""
        if module.is_scheduled != scheduled:
            module.is_scheduled = scheduled
            self.changed = True

    def set_module_attribute(self, module: Module, key: str, value: str | None) -> None:
        """Sets (None: removes) a module attribute such as ``entry_computation_layout``."""
        if module.attributes.get(key) == value:
            return
        if value is None:
            module.attributes.pop(key)
        else:
            module.attributes[key] = value
        self.changed = True


class RewritePattern:
    """A rewrite: ``match_and_rewrite`` returns True when it changed the IR, and
    makes every change through the rewriter. ``opcode`` (one, or a set): the driver
    calls it only on instructions with that opcode (None: on every instruction)."""

    opcode: ClassVar[HloOpcode | frozenset[HloOpcode] | None] = None

    def match_and_rewrite(self, instr: Instruction, rewriter: Rewriter) -> bool:
        raise NotImplementedError


def _by_opcode(patterns: list[RewritePattern]) -> Callable[[HloOpcode], list[RewritePattern]]:
    """The patterns to try on an opcode, in their given order (XLA's one handler per opcode)."""
    table: dict[HloOpcode, list[RewritePattern]] = {}

    def lookup(code: HloOpcode) -> list[RewritePattern]:
        found = table.get(code)
        if found is None:
            found = table[code] = [p for p in patterns if p.opcode is None or p.opcode is code
                                   or (isinstance(p.opcode, frozenset) and code in p.opcode)]
        return found

    return lookup


class RewriteDidNotConverge(RuntimeError):
    """The greedy driver hit its rewrite cap (patterns that undo each other?)."""


def apply_patterns_greedily(target: Module | Computation, patterns: Iterable[RewritePattern], *, max_rewrites: int = 1_000_000) -> bool:
    """Applies the patterns until none matches anywhere; returns whether
    anything changed.  Visits instructions operands-first, and revisits what a
    rewrite touched.  Raises RewriteDidNotConverge past ``max_rewrites``."""
    for_opcode = _by_opcode(list(patterns))
    comps = target.computations if isinstance(target, Module) else [target]
    changed = False
    rewrites = 0
    for comp in list(comps):
        rewriter = Rewriter(comp)
        rewriter.worklist = list(reversed(comp.post_order()))
        while rewriter.worklist:
            instr = rewriter.worklist.pop()
            if instr.parent is not comp:
                continue
            for pat in for_opcode(instr.opcode):
                if pat.match_and_rewrite(instr, rewriter):
                    rewrites += 1
                    if rewrites > max_rewrites:
                        raise RewriteDidNotConverge(f"more than {max_rewrites} rewrites in %{comp.name}; last by {type(pat).__name__} at %{instr.name}")
                    break
        changed |= rewriter.changed
    return changed
