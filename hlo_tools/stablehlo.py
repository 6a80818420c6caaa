"""StableHLO in and out, and modules from jax functions.

    module = to_module(mlir_text_or_bytecode)     # StableHLO/MHLO -> our IR
    text = from_module(module)                    # our IR -> StableHLO text
    module = from_jax(fn, *example_args)          # jax function -> pre-optimization module
"""

from __future__ import annotations

from . import xla
from .ir import Module


def to_module(mlir_module: str | bytes, source: str = "<stablehlo>") -> Module:
    """A StableHLO (or MHLO) module, as text or bytecode, converted by XLA to HLO
    and parsed into our IR."""
    from .parser import parse

    try:
        text = xla.stablehlo_to_hlo_text(mlir_module)
    except Exception as e:  # noqa: BLE001 - jaxlib raises its own runtime errors
        raise xla.XlaCompileError(xla._first_line(e), module_name=source, stage="convert", xla_message=str(e)) from None
    return parse(text, source=source)


def from_module(module: Module | str) -> str:
    """StableHLO text of a module (fusions appear as ``mhlo.fusion``)."""
    text = module.to_text(tuple_sugar=False) if isinstance(module, Module) else module
    name = module.name if isinstance(module, Module) else xla.module_name_of_text(text)
    bytecode = xla.hlo_to_stablehlo_bytes(text, name)
    return mlir_text(bytecode)


def mlir_text(bytecode: bytes) -> str:
    """Prints MLIR bytecode as text (jax's MLIR context knows the dialects)."""
    xla._xc()
    from jax._src.interpreters import mlir as jax_mlir
    from jaxlib.mlir import ir

    with jax_mlir.make_ir_context():
        return str(ir.Module.parse(bytecode))


def from_jax(fn, *example_args, **example_kwargs) -> Module:
    """The module jax lowers ``fn`` to, before XLA's optimizations.  Arguments may
    be arrays or abstract ``jax.ShapeDtypeStruct``s."""
    xla._xc()  # picks the CPU platform first when no GPU is present
    import jax

    lowered = jax.jit(fn).lower(*example_args, **example_kwargs)
    name = getattr(fn, "__name__", "fn")
    try:
        text = lowered.as_text(dialect="hlo")  # keeps jax's names (jax >= 0.4.3x)
    except TypeError:
        text = xla.stablehlo_to_hlo_text(lowered.as_text())
    from .parser import parse

    return parse(text, source=f"<from_jax {name}>")
