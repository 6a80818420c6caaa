"""Kernels as standalone modules, to time or price them one at a time.

The roofline predicts each kernel of an optimized module on its own; the only way
to check such a prediction is to run that kernel on its own too.
``extract_kernel(instr)`` turns one kernel of an optimized module (a fusion, a
dot, a copy, a custom-call...) into a module whose entry computation is just
that kernel: one parameter per distinct operand, the kernel cloned as ROOT, and
its fused computation and every computation it calls (reducers, comparators,
nested fusions) deep-copied along, so the new module shares nothing with the
original. Compiled "as written" (XLA's fusion passes off), XLA runs exactly that
kernel.

``fused_region(instructions)`` is the other direction: a standalone module whose
entry holds one fusion made of the given instructions (a region of one
computation; built by ``hlo_tools.outline.region_module``), so the cost model can
price a fusion that does not exist yet, as XLA's priority fusion does when it
weighs a producer -> consumer merge.
"""

from __future__ import annotations

from typing import Iterable

from hlo_tools.ir import Computation, Instruction, Module
from hlo_tools.opcode import HloOpcode
from hlo_tools.outline import region_module
from hlo_tools.shape import Shape

from .fusion_kind import fusion_kind
from .cost import is_kernel

_H = HloOpcode


def _retarget_calls(clone: Instruction, memo: dict[int, Computation]) -> None:
    for key, comps in clone.called_computation_map.items():
        clone.set_called_computations(key, [memo[id(c)] for c in comps])


def _entry_parameters(entry: Computation, operands: Iterable[Instruction]) -> dict[int, Instruction]:
    """One entry parameter per distinct operand, in order of first use."""
    params: dict[int, Instruction] = {}
    for op in operands:
        if id(op) in params:
            continue
        n = len(params)
        p = Instruction(f"p{n}.{op.name}", _H.PARAMETER, op.shape, parameter_number=n)
        entry.add_instruction(p, unique=False)
        params[id(op)] = p
    return params


def extract_kernel(instr: Instruction, *, name: str | None = None) -> Module:
    """A standalone module whose ROOT is a copy of the kernel ``instr``.

    Operands become entry parameters (a value used twice is one parameter), so
    the module reads exactly what the kernel reads and writes what it writes.
    Raises ValueError for an instruction that is not a kernel
    (``cost.is_kernel``): parameters, tuples, bitcasts and the like emit no code.
    """
    if not is_kernel(instr):
        raise ValueError(f"%{instr.name} ({instr.opcode_text}) is not a kernel: it emits no code of its own")
    module = Module(name or f"kernel_{instr.name}")
    memo: dict[int, Computation] = {}
    for comp in instr.called_computations:
        module.deep_clone_computation(comp, memo)
    entry = Computation("main", is_entry=True)
    params = _entry_parameters(entry, instr.operands)
    kernel = instr.clone("", new_operands=[params[id(o)] for o in instr.operands])
    _retarget_calls(kernel, memo)
    entry.add_instruction(kernel, unique=False)
    entry.root = kernel
    module.add_computation(entry, entry=True)
    return module


def kernels_of(module: Module) -> list[Instruction]:
    """The entry computation's kernels, in program order."""
    return [i for i in module.entry if is_kernel(i)]


def fused_region(instructions: Iterable[Instruction], *, root: Instruction | None = None, name: str = "region",
                 kind: str | None = None, merge_custom: bool = False) -> Module:
    """A standalone module whose entry computes ``instructions`` (members of one
    computation) as one fusion (``hlo_tools.outline.region_module``, the one
    outliner): values they use from outside become parameters. The fusion's
    output is ``root`` when given (members also used outside are then duplicated
    into the fusion, as XLA does when it fuses a producer with other users);
    otherwise every member used outside the region (or the last member), a tuple
    when several, as XLA's multi-output fusion. Its kind is ``kind``, else kInput
    for a reduction output and kLoop otherwise (``fusion_kind`` without kOutput: a
    dot's region is priced as a loop).

    A member that is itself a (non-custom, or with ``merge_custom`` any) fusion is
    merged: its body is copied in, as XLA's MergeFusionInstruction does (a consumer
    fused into a Triton fusion). Used to price a fusion before it exists; the
    module is for the cost model (it is not meant to run)."""
    return region_module(instructions, kind=kind or _pricing_kind, root=root, name=name, merge_custom=merge_custom)


def _pricing_kind(region: list[Instruction], outputs: list[Instruction]) -> str:
    return fusion_kind(region, outputs, output_fusion=False)


def stand_in(module: Module) -> Module:
    """A module with ``module``'s entry signature whose result is zeros.

    Kernels of an optimized module carry layouts inside their fused computations
    that XLA's StableHLO route drops (XLA:CPU then rejects or even aborts on them).
    Compile this stand-in instead and hand XLA the exact module in a pipeline
    hook; only the signature has to survive the route."""
    out = Module(module.name)
    entry = Computation(module.entry.name, is_entry=True)
    for p in module.entry.parameters:
        entry.add_instruction(Instruction(p.name, _H.PARAMETER, p.shape, parameter_number=p.parameter_number),
                              unique=False)
    entry.root = _zeros(entry, module.entry.root.shape)
    out.add_computation(entry, entry=True)
    return out


def _zeros(comp: Computation, shape: Shape) -> Instruction:
    if shape.is_tuple:
        parts = [_zeros(comp, s) for s in shape.tuple_shapes]
        return comp.add_instruction(Instruction("tuple", _H.TUPLE, shape, parts))
    scalar = Shape.array(shape.element_type, ())
    zero = comp.add_instruction(Instruction("zero", _H.CONSTANT, scalar,
                                            literal="false" if shape.element_type.value == "pred" else "0"))
    return comp.add_instruction(Instruction("zeros", _H.BROADCAST, shape, [zero], {"dimensions": "{}"}))
