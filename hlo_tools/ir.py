"""The HLO IR: Module, Computation, Instruction, with use-def kept consistent.

Every mutation of operands, users and instruction order goes through the methods
here (``replace_operand``, ``replace_all_uses_with``, ``add_instruction``,
``remove_instruction``), so a user list can never disagree with an operand list.
Attributes that passes do not model are kept as the exact text XLA printed.
"""

from __future__ import annotations

import html
import itertools
from typing import Callable, Container, Iterable, Iterator

from . import attributes as _attrs
from .errors import IrError
from .literal import LiteralError, check_literal
from .opcode import HloOpcode
from .printer import print_computation, print_instruction, print_module
from .text import split_raw_attributes
from .shape import Shape, parse_shape

#: Attributes whose values name computations; they are stored as objects so that
#: renaming or replacing a computation keeps references right.
COMPUTATION_ATTRS = frozenset(
    {
        "to_apply",
        "calls",
        "condition",
        "body",
        "select",
        "scatter",
        "branch_computations",
        "true_computation",
        "false_computation",
        "called_computations",
        "comparator",
    }
)


def literal_text(value: str | float | int | bool) -> str:
    """A constant's literal as HLO text: text unchanged, ``True`` as ``true``,
    numbers as Python prints them (``inf``, ``nan`` and ``-inf`` as XLA writes them)."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)  # 0.5, 1e-05, inf, -inf, nan: each as XLA's parser reads it
    raise TypeError(f"a literal is HLO text or a Python number, not {type(value).__name__}")


def _add_use(op: "Instruction", user: "Instruction") -> None:
    """``user`` reads ``op`` once more: with ``_drop_use``, the one place uses change."""
    users = op._users
    users[user] = users.get(user, 0) + 1


def _drop_use(op: "Instruction", user: "Instruction") -> None:
    """``user`` reads ``op`` once less (the entry goes with the last use)."""
    n = op._users[user] - 1
    if n:
        op._users[user] = n
    else:
        del op._users[user]



#: Metadata fields that locate the framework's source (OpMetadata in xla_data.proto).
_SOURCE_LOCATION_KEYS = ("source_file", "source_line", "source_end_line", "source_column", "source_end_column",
                         "stack_frame_id")

class Instruction:
    """One HLO instruction: a named value with an opcode, a shape and operands.

    ``operands`` is a tuple; change it with ``replace_operand`` or
    ``replace_all_uses_with``. ``users`` is a snapshot of the instructions that
    use this one, in the order they started using it.
    """

    __slots__ = (
        "_name",
        "_opcode",
        "_shape",
        "_operands",
        "_users",
        "_parent",
        "_attributes",
        "_raw_attributes",
        "_called",
        "_control_predecessors",
        "_control_successors",
        "async_wrapped_opcode",
        "parameter_number",
        "_literal",
        "_prev",
        "_next",
        "tuple_sugar",
        "__weakref__",
    )

    def __init__(
        self,
        name: str,
        opcode: HloOpcode,
        shape: Shape,
        operands: tuple["Instruction", ...] | list["Instruction"] = (),
        attributes: dict[str, str | None] | None = None,
        called: dict[str, tuple["Computation", ...]] | None = None,
        parameter_number: int | None = None,
        literal: str | None = None,
        async_wrapped_opcode: HloOpcode | None = None,
    ):
        self._init_slots(name, opcode, shape, tuple(operands))
        self._attributes = dict(attributes) if attributes else {}
        self._called = dict(called) if called else {}
        for key in self._called:
            self._attributes.setdefault(key, None)
        self.async_wrapped_opcode = async_wrapped_opcode
        self.parameter_number = parameter_number
        self._literal = literal
        for op in self._operands:
            _add_use(op, self)

    def _init_slots(self, name: str, opcode: HloOpcode, shape: Shape, operands: tuple["Instruction", ...]) -> None:
        """Every slot, once, at its default: the one list ``__init__``, the parser's
        constructor and ``_copy_detached`` start from (a new slot is added here)."""
        self._name = name
        self._opcode = opcode
        self._shape = shape
        self._operands = operands
        self._users: dict[Instruction, int] = {}
        self._parent: Computation | None = None
        self._attributes: dict[str, str | None] | None = {}
        self._raw_attributes: str | None = None
        self._called: dict[str, tuple[Computation, ...]] = {}
        self._control_predecessors: tuple[Instruction, ...] = ()
        self._control_successors: dict[Instruction, None] = {}
        self.async_wrapped_opcode: HloOpcode | None = None
        self.parameter_number: int | None = None
        self._literal: str | None = None
        self._prev: Instruction | None = None
        self._next: Instruction | None = None
        # A get-tuple-element the text wrote as an operand, ``%tuple#N`` (XLA's
        # dump syntax): printed the same way, never as a line of its own.
        self.tuple_sugar = False

    @classmethod
    def _from_parser(cls, name, opcode, shape, operands, raw_attributes, parameter_number, literal) -> "Instruction":
        """The parser's constructor: same invariants as __init__ (users updated),
        attributes kept as one raw string.  Hot: called once per parsed line."""
        self = object.__new__(cls)
        self._init_slots(name, opcode, shape, operands)
        if raw_attributes:
            self._attributes = None
            self._raw_attributes = raw_attributes
        self.parameter_number = parameter_number
        self._literal = literal
        for op in operands:
            _add_use(op, self)
        return self

    # -- construction helpers -------------------------------------------------
    @classmethod
    def create(cls, opcode: HloOpcode | str, shape: Shape | str, operands=(), name: str | None = None, *,
               literal: str | float | int | bool | None = None, **attributes) -> "Instruction":
        """Builds an instruction; keyword attributes are HLO attribute texts
        (``dimensions="{0}"``) or typed values that ``attributes.format_value`` knows.
        ``literal``: a constant's value, as HLO text (``"{1, 2}"``) or a Python
        number, checked against ``shape`` as XLA's parser checks it."""
        if isinstance(opcode, str):
            opcode = HloOpcode(opcode)
        if isinstance(shape, str):
            shape = parse_shape(shape)
        attrs = {k.replace("control_predecessors", "control-predecessors"): _attrs.format_value(k, v) for k, v in attributes.items()}
        instr = cls(name or opcode.value, opcode, shape, tuple(operands), attrs)
        if literal is not None:
            instr.literal = literal_text(literal)  # the setter checks the opcode and the shape
        return instr

    # -- guarded fields ---------------------------------------------------------
    @property
    def opcode(self) -> HloOpcode:
        """Fixed for the instruction's life, as in XLA: a different opcode is a
        new instruction (``Rewriter.replace_instruction``)."""
        return self._opcode

    @property
    def parent(self) -> "Computation | None":
        """The computation holding the instruction (None while detached); set by
        ``add_instruction`` and ``remove_instruction`` only."""
        return self._parent

    @property
    def name(self) -> str:
        return self._name

    @name.setter
    def name(self, value: str) -> None:
        """Renames; inside a computation through ``rename_instruction``, so
        ``get_instruction`` and the module's unique-name cache follow."""
        if self.parent is None:
            self._name = value
        else:
            self.parent.rename_instruction(self, value)

    @property
    def shape(self) -> Shape:
        return self._shape

    @shape.setter
    def shape(self, value: Shape) -> None:
        """Sets the result shape (the verifier checks it against the operands
        and users; ``replace_all_uses_with(..., allow_different_shape=True)``
        is the route when the users must follow)."""
        if not isinstance(value, Shape):
            raise IrError(f"the shape of %{self._name} must be a Shape, got {type(value).__name__}: parse_shape() it first")
        self._shape = value

    @property
    def literal(self) -> str | None:
        """A constant's literal, exactly as HLO text writes it (None otherwise)."""
        return self._literal

    @literal.setter
    def literal(self, value: str) -> None:
        """Sets a constant's literal, checked against its shape as XLA's parser does."""
        if self.opcode is not HloOpcode.CONSTANT:
            raise IrError(f"%{self._name} is a {self.opcode.value}, not a constant: it has no literal")
        try:
            check_literal(value, self._shape)
        except LiteralError as e:
            raise IrError(f"literal {value!r} of %{self._name} does not fit {self._shape}: {e}") from None
        self._literal = value

    # -- operands and users ---------------------------------------------------
    @property
    def operands(self) -> tuple["Instruction", ...]:
        return self._operands

    @operands.setter
    def operands(self, value) -> None:
        raise AttributeError("operands are read-only: use replace_operand(index, new) or replace_all_uses_with(new)")

    def operand(self, index: int) -> "Instruction":
        return self._operands[index]

    @property
    def operand_count(self) -> int:
        return len(self._operands)

    @property
    def users(self) -> tuple["Instruction", ...]:
        return tuple(self._users)

    @property
    def user_count(self) -> int:
        return len(self._users)

    def uses(self) -> list[tuple["Instruction", int]]:
        """(user, operand index) pairs, one per use."""
        return [(u, i) for u in self._users for i, op in enumerate(u._operands) if op is self]

    def replace_operand(self, index: int, new: "Instruction") -> None:
        """Makes operand ``index`` refer to ``new`` (XLA's ReplaceOperandWith)."""
        old = self._operands[index]
        if old is new:
            return
        if not new.shape.compatible(old.shape):
            raise IrError(
                f"replace_operand on %{self.name}: operand {index} %{old.name} has shape {old.shape}, "
                f"replacement %{new.name} has incompatible shape {new.shape}"
            )
        self._set_operand(index, new)

    def _set_operand(self, index: int, new: "Instruction") -> None:
        old = self._operands[index]
        ops = list(self._operands)
        ops[index] = new
        self._operands = tuple(ops)
        _drop_use(old, self)
        _add_use(new, self)

    def replace_operands(self, new_operands) -> None:
        """Replaces the whole operand list (shapes may change: for rewrites that
        also change this instruction's shape)."""
        for op in self._operands:
            _drop_use(op, self)
        self._operands = tuple(new_operands)
        for op in self._operands:
            _add_use(op, self)

    def replace_all_uses_with(self, new: "Instruction", *, allow_different_shape: bool = False) -> None:
        """Points every user (and the computation root) at ``new``.

        Shapes must be compatible unless ``allow_different_shape`` (XLA's
        ReplaceAllUsesWithDifferentShape).
        """
        if new is self:
            return
        if not allow_different_shape and not new.shape.compatible(self.shape):
            raise IrError(
                f"replace_all_uses_with: %{self.name} has shape {self.shape} but %{new.name} has {new.shape}; "
                "pass allow_different_shape=True if that is intended"
            )
        for user in list(self._users):
            if user is new:
                continue  # new may use self (e.g. a wrapping copy): keep that edge
            for i, op in enumerate(user._operands):
                if op is self:
                    user._set_operand(i, new)
        comp = self.parent
        if comp is not None and comp.root is self:
            comp.root = new

    # -- control dependencies ---------------------------------------------------
    @property
    def control_predecessors(self) -> tuple["Instruction", ...]:
        return self._control_predecessors

    @property
    def control_successors(self) -> tuple["Instruction", ...]:
        return tuple(self._control_successors)

    @property
    def has_control_dependencies(self) -> bool:
        """Control predecessors or successors (XLA's HasControlDependencies); no tuple made."""
        return bool(self._control_predecessors or self._control_successors)

    def add_control_predecessor(self, pred: "Instruction") -> None:
        if pred in self._control_predecessors:
            return
        self._control_predecessors += (pred,)
        pred._control_successors[self] = None
        self.attributes.setdefault("control-predecessors", None)

    def remove_control_predecessor(self, pred: "Instruction") -> None:
        if pred not in self._control_predecessors:
            raise IrError(f"%{pred.name} is not a control predecessor of %{self.name}")
        self._control_predecessors = tuple(p for p in self._control_predecessors if p is not pred)
        del pred._control_successors[self]
        if not self._control_predecessors:
            self.attributes.pop("control-predecessors", None)

    def drop_all_control_deps(self) -> None:
        """Removes this instruction's control edges, handing its predecessors to
        its successors so ordering constraints survive (XLA's
        SafelyDropAllControlDependencies)."""
        preds = self._control_predecessors
        for succ in list(self._control_successors):
            succ.remove_control_predecessor(self)
            for p in preds:
                succ.add_control_predecessor(p)
        for p in preds:
            self.remove_control_predecessor(p)

    # -- called computations ----------------------------------------------------
    @property
    def called_computations(self) -> tuple["Computation", ...]:
        called = self._called
        if not called:  # most instructions: asked millions of times by the analyses
            return ()
        if len(called) == 1:
            for comps in called.values():
                return tuple(comps)  # the tuple itself when it is one
        return tuple(c for comps in called.values() for c in comps)

    def called_computation(self, key: str) -> "Computation | None":
        comps = self._called.get(key)
        return comps[0] if comps else None

    @property
    def called_computation_map(self) -> dict[str, tuple["Computation", ...]]:
        return dict(self._called)

    def set_called_computations(self, key: str, comps) -> None:
        """Sets e.g. ``to_apply`` or ``calls``; the attribute prints from these objects."""
        comps = tuple(comps)
        if not comps:
            self._called.pop(key, None)
            self.attributes.pop(key, None)
            return
        self._called[key] = comps
        self.attributes.setdefault(key, None)

    @property
    def fused_computation(self) -> "Computation | None":
        """The fused computation of a fusion instruction (XLA's
        fused_instructions_computation)."""
        return self.called_computation("calls") if self.opcode is HloOpcode.FUSION else None

    @property
    def to_apply(self) -> "Computation | None":
        return self.called_computation("to_apply")

    # -- attributes: raw text plus typed views -----------------------------------
    @property
    def attributes(self) -> dict[str, str | None]:
        """Attribute name -> exact text, in print order (None: printed from the
        IR, e.g. called computations). The parser keeps an instruction's
        attributes as one raw string until something asks for them."""
        attrs = self._attributes
        if attrs is None:
            attrs = self._attributes = split_raw_attributes(self._raw_attributes)
            self._raw_attributes = None
        return attrs

    @property
    def raw_attributes(self) -> str | None:
        """The unparsed attribute text (``, key=value, ...``), while untouched."""
        return self._raw_attributes if self._attributes is None else None

    def attribute(self, key: str) -> str | None:
        """The attribute's text exactly as it will print (None if absent)."""
        if key in self._called or key == "control-predecessors":
            return _attrs.printed_value(self, key)
        return self.attributes.get(key)

    def set_attribute(self, key: str, value) -> None:
        """Sets an attribute from HLO text or a typed value; None removes it.
        Called computations and control edges are objects, not text: they have
        their own methods, so refusing them here keeps the two in step."""
        if key in COMPUTATION_ATTRS:
            raise IrError(f"%{self._name}: '{key}' names computations; use set_called_computations({key!r}, ...)")
        if key == "control-predecessors":
            raise IrError(f"%{self._name}: control edges change through add_control_predecessor / remove_control_predecessor")
        if value is None:
            self.attributes.pop(key, None)
        else:
            self.attributes[key] = _attrs.format_value(key, value)

    dimensions = _attrs.typed("dimensions", _attrs.parse_int_list, _attrs.format_int_list)
    slice = _attrs.typed("slice", _attrs.parse_slice, _attrs.format_slice)
    padding = _attrs.typed("padding", _attrs.parse_padding, _attrs.format_padding)
    window = _attrs.typed("window", _attrs.parse_window, _attrs.format_window)
    dim_labels = _attrs.typed("dim_labels", _attrs.parse_dim_labels, _attrs.format_dim_labels)
    comparison_direction = _attrs.typed("direction", str, str)
    fusion_kind = _attrs.typed("kind", str, str)
    custom_call_target = _attrs.typed("custom_call_target", _attrs.parse_string, _attrs.format_string)
    tuple_index = _attrs.typed("index", int, str)
    metadata = _attrs.typed("metadata", _attrs.parse_metadata, _attrs.format_metadata)
    sharding = _attrs.typed("sharding", _attrs.parse_sharding, _attrs.format_sharding)
    dynamic_slice_sizes = _attrs.typed("dynamic_slice_sizes", _attrs.parse_int_list, _attrs.format_int_list)

    @property
    def backend_config(self):
        """The backend config as parsed JSON when it is JSON, else its raw text."""
        return _attrs.parse_backend_config(self.attributes.get("backend_config"))

    @backend_config.setter
    def backend_config(self, value) -> None:
        self.set_attribute("backend_config", None if value is None else _attrs.format_backend_config(value))

    @property
    def dot_dimension_numbers(self) -> _attrs.DotDimensionNumbers | None:
        if self.opcode not in (HloOpcode.DOT, HloOpcode.RAGGED_DOT, HloOpcode.SCALED_DOT):
            return None
        return _attrs.DotDimensionNumbers.from_attributes(self.attributes)

    @dot_dimension_numbers.setter
    def dot_dimension_numbers(self, dnums: _attrs.DotDimensionNumbers) -> None:
        dnums.to_attributes(self.attributes)

    # -- queries ----------------------------------------------------------------
    @property
    def is_root(self) -> bool:
        return self.parent is not None and self.parent.root is self

    @property
    def opcode_text(self) -> str:
        """The opcode as printed, including async sugar like ``custom-call-start``."""
        if self.async_wrapped_opcode is not None:
            suffix = {HloOpcode.ASYNC_START: "-start", HloOpcode.ASYNC_UPDATE: "-update", HloOpcode.ASYNC_DONE: "-done"}
            return self.async_wrapped_opcode.value + suffix[self.opcode]
        return self.opcode.value

    def clone(self, suffix: str = "clone", *, new_operands=None, shape: Shape | None = None) -> "Instruction":
        """A detached copy (XLA's Clone / CloneWithNewOperands as one call): same
        attributes and called computations, ``name.suffix``, and either the same
        operands or ``new_operands``."""
        copy = Instruction(
            f"{self.name}.{suffix}" if suffix else self.name,
            self.opcode,
            shape or self.shape,
            tuple(self._operands if new_operands is None else new_operands),
            dict(self.attributes),
            dict(self._called),
            self.parameter_number,
            self.literal,
            self.async_wrapped_opcode,
        )
        copy.attributes.pop("control-predecessors", None)
        return copy

    def _copy_detached(self, called: dict[str, tuple["Computation", ...]]) -> "Instruction":
        """An exact copy of every field but the graph edges (operands, users,
        control edges, order), which ``copy_computation`` wires afterwards."""
        dup = object.__new__(Instruction)
        dup._init_slots(self._name, self._opcode, self._shape, ())
        dup._attributes = None if self._attributes is None else dict(self._attributes)
        dup._raw_attributes = self._raw_attributes
        dup._called = called
        dup.async_wrapped_opcode = self.async_wrapped_opcode
        dup.parameter_number = self.parameter_number
        dup._literal = self._literal
        dup.tuple_sugar = self.tuple_sugar
        return dup

    def to_text(self) -> str:
        return print_instruction(self).strip()

    def __str__(self) -> str:
        return self.to_text()

    def __repr__(self) -> str:
        return f"<Instruction %{self.name} = {self.shape} {self.opcode_text}({', '.join('%' + o.name for o in self._operands)})>"


class Computation:
    """A named list of instructions with parameters and a root.

    Instruction order (the text order, or the schedule in a scheduled module) is
    a linked list: insertion and removal are O(1), and ``instructions`` returns a
    snapshot, so a pass may mutate while it iterates.
    """

    def __init__(self, name: str, *, is_entry: bool = False):
        self.name = name
        self.is_entry = is_entry
        self.parent: Module | None = None
        self._root: Instruction | None = None
        self.attributes: dict[str, str] = {}  # e.g. execution_thread="main_thread"
        self._head: Instruction | None = None
        self._tail: Instruction | None = None
        self._count = 0
        self._names: dict[str, Instruction] = {}

    # -- order ------------------------------------------------------------------
    def __iter__(self) -> Iterator[Instruction]:
        node = self._head
        while node is not None:
            nxt = node._next
            yield node
            node = nxt

    @property
    def instructions(self) -> list[Instruction]:
        return list(self)

    @property
    def instruction_count(self) -> int:
        return self._count

    def __len__(self) -> int:
        return self._count

    @property
    def parameters(self) -> list[Instruction]:
        """Parameter instructions ordered by parameter number."""
        params = [i for i in self if i.opcode is HloOpcode.PARAMETER]
        return sorted(params, key=lambda p: p.parameter_number)

    def parameter(self, number: int) -> Instruction:
        for p in self.parameters:
            if p.parameter_number == number:
                return p
        raise IrError(f"computation %{self.name} has no parameter {number}")

    @property
    def root(self) -> Instruction | None:
        """The instruction whose value the computation returns."""
        return self._root

    @root.setter
    def root(self, instr: Instruction) -> None:
        self.set_root(instr)

    def get_instruction(self, name: str) -> Instruction | None:
        return self._names.get(name)

    # -- mutation -----------------------------------------------------------------
    def unique_name(self, base: str) -> str:
        """``base``, or ``base.N`` if that name is taken anywhere in the module."""
        taken = self.parent._instruction_names() if self.parent is not None else set(self._names)
        if base not in taken:
            return base
        for n in itertools.count(1):
            cand = f"{base}.{n}"
            if cand not in taken:
                return cand
        raise AssertionError  # pragma: no cover

    def add_instruction(self, instr: Instruction, *, before: Instruction | None = None, after: Instruction | None = None, unique: bool = True) -> Instruction:
        """Inserts a detached instruction (at the end, or before/after another).

        Its operands must already be in this computation. With ``unique`` the
        name gets a suffix if it would collide.
        """
        if instr.parent is not None:
            raise IrError(f"%{instr.name} already belongs to computation %{instr.parent.name}; clone() it first")
        for op in instr._operands:
            if op.parent is not self:
                raise IrError(f"operand %{op.name} of %{instr.name} is not in computation %{self.name}")
        if unique:
            instr._name = self.unique_name(instr._name)
        elif instr._name in self._names:
            raise IrError(f"computation %{self.name} already has an instruction named %{instr.name}")
        self._link(instr, before=before, after=after)
        if self.parent is not None:
            self.parent._count_name(instr.name, 1)
        return instr

    def _link(self, instr: Instruction, *, before: Instruction | None = None, after: Instruction | None = None) -> None:
        instr._parent = self
        self._names[instr.name] = instr
        self._count += 1
        if before is not None:
            if before.parent is not self:
                raise IrError(f"%{before.name} is not in computation %{self.name}")
            instr._prev, instr._next = before._prev, before
            if before._prev is None:
                self._head = instr
            else:
                before._prev._next = instr
            before._prev = instr
            return
        if after is not None:
            if after.parent is not self:
                raise IrError(f"%{after.name} is not in computation %{self.name}")
            instr._prev, instr._next = after, after._next
            if after._next is None:
                self._tail = instr
            else:
                after._next._prev = instr
            after._next = instr
            return
        instr._prev, instr._next = self._tail, None
        if self._tail is None:
            self._head = instr
        else:
            self._tail._next = instr
        self._tail = instr

    def remove_instruction(self, instr: Instruction) -> None:
        """Removes an instruction that nothing uses (XLA's RemoveInstruction).

        Refuses while users remain or while it is the root; its control edges are
        handed on (see ``drop_all_control_deps``).
        """
        if instr.parent is not self:
            raise IrError(f"%{instr.name} is not in computation %{self.name}")
        if instr._users:
            names = ", ".join("%" + u.name for u in instr._users)
            raise IrError(f"cannot remove %{instr.name}: it still has users ({names}); replace_all_uses_with first")
        if instr is self._root:
            raise IrError(f"cannot remove %{instr.name}: it is the root of %{self.name}; set a new root first")
        instr.drop_all_control_deps()
        for op in instr._operands:
            _drop_use(op, instr)
        instr._operands = ()
        if instr._prev is None:
            self._head = instr._next
        else:
            instr._prev._next = instr._next
        if instr._next is None:
            self._tail = instr._prev
        else:
            instr._next._prev = instr._prev
        instr._prev = instr._next = None
        instr._parent = None
        del self._names[instr.name]
        self._count -= 1
        self._forget_name(instr.name)

    def _forget_name(self, name: str) -> None:
        if self.parent is not None:
            self.parent._count_name(name, -1)

    def replace_instruction(self, old: Instruction, new: Instruction) -> Instruction:
        """Adds ``new`` before ``old`` if detached, moves all uses to it and removes ``old``."""
        if new.parent is None:
            self.add_instruction(new, before=old)
        old.replace_all_uses_with(new)
        self.remove_instruction(old)
        return new

    def rename_instruction(self, instr: Instruction, name: str) -> None:
        """Renames ``instr`` (``instr.name = x`` comes here too): the name index
        and the module's unique-name cache follow."""
        if instr.parent is not self:
            raise IrError(f"%{instr.name} is not in computation %{self.name}")
        if not isinstance(name, str) or not name:
            raise IrError(f"an instruction name must be a non-empty string, got {name!r}")
        if name in self._names and self._names[name] is not instr:
            raise IrError(f"computation %{self.name} already has an instruction named %{name}")
        old = instr._name
        if old == name:
            return
        if self._names.get(old) is instr:
            del self._names[old]
            self._forget_name(old)
        instr._name = name
        self._names[name] = instr
        if self.parent is not None:
            self.parent._count_name(name, 1)

    def set_instruction_order(self, order: list[Instruction]) -> None:
        """Reorders the instructions (a schedule's sequence, XLA's
        HloSchedule::set_sequence); ``order`` must be a permutation of them."""
        if len(order) != self._count or {id(i) for i in order} != {id(i) for i in self}:
            raise IrError(f"the order for %{self.name} is not a permutation of its {self._count} instructions")
        prev = None
        for instr in order:
            instr._prev = prev
            if prev is None:
                self._head = instr
            else:
                prev._next = instr
            prev = instr
        if prev is not None:
            prev._next = None
        self._tail = prev

    def set_root(self, instr: Instruction) -> None:
        """Makes ``instr`` (an instruction of this computation) the root."""
        if instr is None or instr.parent is not self:
            what = "None" if instr is None else f"%{instr.name}"
            raise IrError(f"{what} is not in computation %{self.name}: the root must be one of its instructions")
        self._root = instr

    # -- traversal ------------------------------------------------------------------
    def post_order(self) -> list[Instruction]:
        """Operands (and control predecessors) before users, starting from the
        instructions nothing uses, in instruction order (XLA's
        MakeInstructionPostOrder)."""
        return dfs_post_order(self, lambda node: node._operands + node._control_predecessors)

    def is_topologically_ordered(self) -> bool:
        seen: set[int] = set()
        for instr in self:
            for dep in instr._operands + instr._control_predecessors:
                if id(dep) not in seen:
                    return False
            seen.add(id(instr))
        return True

    def make_embedded_computations_post_order(self, *, known: Container[int] = (),
                                              via: Callable[["Instruction"], Iterable["Computation"]] | None = None
                                              ) -> list["Computation"]:
        """Computations this one calls, transitively, callees first; those whose id is
        in ``known`` (a caller's memo) are neither listed nor walked into, so asking
        for each computation of a call chain in turn stays linear. ``via``: the
        computations an instruction counts as calling (default: all it calls)."""
        out: list[Computation] = []
        seen: set[int] = set()

        def callees(comp: Computation):
            if via is not None:
                return (callee for instr in comp for callee in via(instr))
            # most instructions call nothing: their empty map is skipped without a call
            return (callee for instr in comp if instr._called for comps in instr._called.values() for callee in comps)

        # an explicit stack (call chains of any depth): each callee after its own callees
        stack: list[tuple[Computation | None, Iterator[Computation]]] = [(None, callees(self))]
        while stack:
            comp, pending = stack[-1]
            callee = next(pending, None)
            if callee is None:
                stack.pop()
                if comp is not None:
                    out.append(comp)
            elif id(callee) not in seen and id(callee) not in known:
                seen.add(id(callee))
                stack.append((callee, callees(callee)))
        return out

    def to_text(self) -> str:
        return print_computation(self)

    def __repr__(self) -> str:
        return f"<Computation %{self.name}: {self._count} instructions>"


def dfs_post_order(comp: "Computation", deps_of) -> list[Instruction]:
    """Depth-first post order from the instructions nothing uses (in instruction
    order), visiting ``deps_of(node)`` in the order given.  Instructions on a
    cycle are appended at the end (the verifier reports the cycle)."""
    visited: set[int] = set()
    order: list[Instruction] = []
    for start in comp:
        if start._users or start._control_successors:
            continue
        stack = [(start, False)]
        while stack:
            node, expanded = stack.pop()
            if expanded:
                order.append(node)
                continue
            if id(node) in visited:
                continue
            visited.add(id(node))
            stack.append((node, True))
            for dep in reversed(deps_of(node)):
                if id(dep) not in visited:
                    stack.append((dep, False))
    if len(order) != comp._count:
        order.extend(i for i in comp if id(i) not in visited)
    return order


def copy_computation(comp: Computation, memo: dict[int, Computation]) -> Computation:
    """A detached deep copy of ``comp`` under the same name, with the same
    instruction order, names and attribute text; the computations it calls are
    copied first (once each: ``memo`` maps ids of copied computations to their
    copies, so a reducer called from several places is copied once)."""
    done = memo.get(id(comp))
    if done is not None:
        return done
    # callees first, found with a stack: call chains of any depth copy without recursion
    for callee in comp.make_embedded_computations_post_order(known=memo):
        if id(callee) not in memo:
            _copy_one(callee, memo)
    return _copy_one(comp, memo)


def _copy_one(comp: Computation, memo: dict[int, Computation]) -> Computation:
    """``copy_computation`` of ``comp`` whose callees are copied already (a callee
    that is not, on a call cycle, is copied here)."""
    new = Computation(comp.name, is_entry=comp.is_entry)
    memo[id(comp)] = new  # before the body: a computation may (wrongly) call itself
    new.attributes = dict(comp.attributes)
    mapping: dict[int, Instruction] = {}
    for instr in comp:
        called = {key: tuple(memo[id(c)] if id(c) in memo else copy_computation(c, memo) for c in comps)
                  for key, comps in instr._called.items()}
        mapping[id(instr)] = dup = instr._copy_detached(called)
        new._link(dup)
    for instr in comp:
        dup = mapping[id(instr)]
        dup._operands = tuple(mapping[id(o)] for o in instr._operands)
        dup._users = {mapping[id(u)]: n for u, n in instr._users.items() if id(u) in mapping}
        dup._control_predecessors = tuple(mapping[id(p)] for p in instr._control_predecessors)
        dup._control_successors = {mapping[id(u)]: None for u in instr._control_successors}
    if comp._root is not None:
        new._root = mapping[id(comp._root)]
    return new


class Module:
    """An HLO module: computations (callees before callers), an entry, and the
    module-level attributes (``entry_computation_layout``, ``is_scheduled``,
    ``input_output_alias``, ...) kept as XLA printed them."""

    def __init__(self, name: str):
        self.name = name
        self.attributes: dict[str, str] = {}
        self.computations: list[Computation] = []
        self.entry: Computation | None = None
        self.stack_frames: list[tuple[str, list[str]]] = []  # (section name, lines), verbatim
        self.print_operand_shapes = False  # print `f32[2] %x` operands (older XLA style)
        self._names_cache: dict[str, int] | None = None

    def release(self) -> None:
        """Empties the module, breaking the reference cycles between its objects
        (operands and users, the instruction list, parents), so that its memory
        returns at once by reference counting instead of waiting for a cyclic
        collection that walks every object: a third of the time, for a tool done
        with a large module (``hlo scan``'s workers). The module is empty after."""
        for comp in self.computations:
            node = comp._head
            while node is not None:
                nxt = node._next
                node._users = node._control_successors = node._prev = node._next = node._parent = None
                node._operands = node._control_predecessors = ()
                node._called = {}
                node = nxt
            comp._head = comp._tail = comp._root = comp.parent = None
            comp._names = {}
            comp._count = 0
        self.computations = []
        self.entry = None
        self._names_cache = None

    # -- computations --------------------------------------------------------------
    def add_computation(self, comp: Computation, *, entry: bool = False) -> Computation:
        if any(c.name == comp.name for c in self.computations):
            raise IrError(f"module {self.name} already has a computation named %{comp.name}")
        comp.parent = self
        if entry:
            comp.is_entry = True
            self.entry = comp
            self.computations.append(comp)
        else:
            idx = self.computations.index(self.entry) if self.entry in self.computations else len(self.computations)
            self.computations.insert(idx, comp)
        self._names_cache = None
        return comp

    def deep_clone_computation(self, comp: Computation, memo: dict[int, Computation] | None = None) -> Computation:
        """Copies ``comp`` from another module into this one, with every
        computation it calls (callees first, each once: ``memo`` maps the ids
        of copied computations to their copies); names are made unique here
        (XLA's HloModule::DeepCloneComputation).  Returns the copy of ``comp``."""
        memo = {} if memo is None else memo
        for callee in (*comp.make_embedded_computations_post_order(), comp):
            if id(callee) not in memo:
                copy = copy_computation(callee, memo)
                copy.is_entry = False
                copy.name = self.unique_computation_name(copy.name)
                self.add_computation(copy)
        return memo[id(comp)]

    def get_computation(self, name: str) -> Computation | None:
        for c in self.computations:
            if c.name == name:
                return c
        return None

    def remove_computation(self, comp: Computation) -> None:
        """Removes a computation that nothing calls (not the entry)."""
        self.remove_computations([comp])

    def remove_computations(self, comps: Iterable[Computation]) -> None:
        """Removes several computations at once (one scan for callers): none may
        be the entry or be called from a computation that stays."""
        comps = list(comps)
        gone = {id(c) for c in comps}
        if self.entry is not None and id(self.entry) in gone:
            raise IrError(f"cannot remove the entry computation %{self.entry.name}")
        for c in self.computations:
            if id(c) in gone:
                continue
            for instr in c:
                for callee in instr.called_computations:
                    if id(callee) in gone:
                        raise IrError(f"cannot remove %{callee.name}: it is called by %{instr.name}")
        for comp in comps:
            if comp.parent is not self:
                raise IrError(f"%{comp.name} is not a computation of module {self.name}")
        self.computations[:] = [c for c in self.computations if id(c) not in gone]
        for comp in comps:
            comp.parent = None
        self._names_cache = None

    def unique_computation_name(self, base: str) -> str:
        names = {c.name for c in self.computations}
        if base not in names:
            return base
        for n in itertools.count(1):
            if f"{base}.{n}" not in names:
                return f"{base}.{n}"
        raise AssertionError  # pragma: no cover

    def _instruction_names(self) -> dict[str, int]:
        """Instruction name -> how many computations use it (for unique names)."""
        if self._names_cache is None:
            cache: dict[str, int] = {}
            for c in self.computations:
                for n in c._names:
                    cache[n] = cache.get(n, 0) + 1
            self._names_cache = cache
        return self._names_cache

    def _count_name(self, name: str, delta: int) -> None:
        cache = self._names_cache
        if cache is None:
            return
        n = cache.get(name, 0) + delta
        if n > 0:
            cache[name] = n
        else:
            cache.pop(name, None)

    # -- module attributes ------------------------------------------------------------
    @property
    def is_scheduled(self) -> bool:
        return self.attributes.get("is_scheduled") == "true"

    @is_scheduled.setter
    def is_scheduled(self, value: bool) -> None:
        if value:
            if "is_scheduled" not in self.attributes:
                items = list(self.attributes.items())
                self.attributes = {"is_scheduled": "true", **dict(items)}
        else:
            self.attributes.pop("is_scheduled", None)

    @property
    def entry_computation_layout(self) -> str | None:
        return self.attributes.get("entry_computation_layout")

    @property
    def input_output_alias(self) -> str | None:
        return self.attributes.get("input_output_alias")

    def schedule(self) -> dict[str, list[str]]:
        """The schedule of a scheduled module: instruction order per computation."""
        if not self.is_scheduled:
            return {}
        return {c.name: [i.name for i in c] for c in self.computations}

    # -- traversal ----------------------------------------------------------------------
    def instructions(self) -> Iterator[Instruction]:
        for c in self.computations:
            yield from c

    @property
    def instruction_count(self) -> int:
        return sum(c.instruction_count for c in self.computations)

    def fusion_computations(self) -> list[Computation]:
        """The computations fusion instructions call: XLA's ``IsFusionComputation``,
        answered for the whole module at once."""
        found: dict[int, Computation] = {}
        for instr in self.instructions():
            if instr.fused_computation is not None:
                found.setdefault(id(instr.fused_computation), instr.fused_computation)
        return list(found.values())

    def walk(self, computation: Computation | None = None, *, into_called: bool = True) -> Iterator[Instruction]:
        """Instructions of ``computation`` (default: the entry) in order, descending
        into fusion bodies and other called computations first when ``into_called``."""
        comp = computation or self.entry
        seen: set[int] = set()

        def visit(c: Computation) -> Iterator[Instruction]:
            for instr in c:
                if into_called:
                    for callee in instr.called_computations:
                        if id(callee) not in seen:
                            seen.add(id(callee))
                            yield from visit(callee)
                yield instr

        yield from visit(comp)

    def strip_source_locations(self) -> None:
        """Drops where the framework's code sits on the machine that traced it: the
        stack-frame tables and each instruction's ``source_file``/``source_line``
        and ``stack_frame_id`` (``op_name`` stays). For a module that leaves the
        machine, such as an upstream test: local paths are no part of the HLO."""
        self.stack_frames = []
        for comp in self.computations:
            for instr in comp:
                meta = instr.attributes.get("metadata")
                if not meta or not any(k in meta for k in _SOURCE_LOCATION_KEYS):
                    continue
                kept = {k: v for k, v in instr.metadata.items() if k not in _SOURCE_LOCATION_KEYS}
                instr.metadata = kept or None

    def clone(self) -> "Module":
        """A deep copy that shares nothing with this module and prints
        byte-for-byte the same: names, instruction order, unparsed attribute
        text, control edges and use order are all kept."""
        copy = Module(self.name)
        copy.attributes = dict(self.attributes)
        copy.stack_frames = [(name, list(lines)) for name, lines in self.stack_frames]
        copy.print_operand_shapes = self.print_operand_shapes
        memo: dict[int, Computation] = {}
        for comp in self.computations:
            copy_computation(comp, memo)
        for comp in self.computations:
            new = memo[id(comp)]
            new.parent = copy
            copy.computations.append(new)
        copy.entry = memo.get(id(self.entry)) if self.entry is not None else None
        return copy

    def to_text(self, **options) -> str:
        return print_module(self, **options)

    def __str__(self) -> str:
        return self.to_text()

    def __repr__(self) -> str:
        return f"<Module {self.name}: {len(self.computations)} computations, {self.instruction_count} instructions>"

    def _repr_html_(self) -> str:
        """A notebook's view: the module's size, entry signature and commonest opcodes."""
        esc = html.escape
        ops: dict[str, int] = {}
        for i in self.instructions():
            ops[i.opcode_text] = ops.get(i.opcode_text, 0) + 1
        entry = self.entry
        sig = ""
        if entry is not None:
            shapes = [p.shape.to_text(False) for p in entry.parameters]
            params = ", ".join(shapes[:6]) + (f", ... {len(shapes) - 6} more" if len(shapes) > 6 else "")
            root = entry.root.shape.to_text(False) if entry.root is not None else "?"
            sig = f"({params}) -> {root}"
        param_bytes = sum(p.shape.byte_size for p in entry.parameters) if entry is not None else 0
        out_bytes = entry.root.shape.byte_size if entry is not None and entry.root is not None else 0
        top = sorted(ops.items(), key=lambda kv: -kv[1])[:8]
        rows = [("instructions", f"{self.instruction_count:,} ({entry.instruction_count if entry else 0:,} in the entry)"),
                ("computations", f"{len(self.computations):,}"), ("fusions", f"{ops.get('fusion', 0):,}"),
                ("parameters", f"{param_bytes:,} bytes"), ("outputs", f"{out_bytes:,} bytes"),
                ("opcodes", ", ".join(f"{op} {n}" for op, n in top))]
        body = "".join(f"<tr><th style='text-align:left'>{esc(k)}</th><td style='text-align:left'>{esc(v)}</td></tr>"
                       for k, v in rows)
        return (f"<div class='hlo-module'><b>HloModule {esc(self.name)}</b> <code>{esc(sig)}</code>"
                f"<table>{body}</table></div>")
