"""Module statistics for ``hlo stats`` and the demo report."""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass

from .ir import Module


@dataclass(frozen=True)
class ModuleStats:
    name: str
    computations: int
    instructions: int
    entry_instructions: int
    fusions: int
    parameter_bytes: int
    output_bytes: int
    opcodes: dict[str, int]

    def as_dict(self) -> dict:
        return asdict(self)


def module_stats(module: Module) -> ModuleStats:
    """Counts over all computations; bytes are the entry's parameters and root."""
    hist = Counter(i.opcode_text for i in module.instructions())
    entry = module.entry
    return ModuleStats(
        name=module.name,
        computations=len(module.computations),
        instructions=module.instruction_count,
        entry_instructions=entry.instruction_count,
        fusions=hist.get("fusion", 0),
        parameter_bytes=sum(p.shape.byte_size for p in entry.parameters),
        output_bytes=entry.root.shape.byte_size if entry.root is not None else 0,
        opcodes=dict(hist.most_common()),
    )
