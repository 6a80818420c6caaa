"""StableHLO in and out, and modules from jax functions.

    module = to_module(mlir_text_or_bytecode)     # StableHLO/MHLO -> our IR
    text = from_module(module)                    # our IR -> StableHLO text
    module = from_jax(fn, *example_args)          # jax function -> pre-optimization module
"""

from __future__ import annotations

from functools import lru_cache

from . import jax_internals
from hlo_tools.ir import Module
from hlo_tools.parser import parse


def to_module(mlir_module: str | bytes, source: str = "<stablehlo>") -> Module:
    """A StableHLO (or MHLO) module, as text or bytecode, converted by XLA to HLO
    and parsed into our IR."""
    try:
        text = jax_internals.stablehlo_to_hlo_text(mlir_module)
    except Exception as e:  # noqa: BLE001 - jaxlib raises its own runtime errors
        raise jax_internals.XlaCompileError(jax_internals._first_line(e), module_name=source, stage="convert", xla_message=str(e)) from None
    return parse(text, source=source)


def from_module(module: Module | str, *, debug_info: bool = True) -> str:
    """StableHLO text of a module (fusions appear as ``mhlo.fusion``).  With
    ``debug_info`` its metadata is printed as MLIR locations (``loc("jit(f)/add")``),
    which ``to_module`` turns back into metadata."""
    text = module.to_text(tuple_sugar=False) if isinstance(module, Module) else module
    name = module.name if isinstance(module, Module) else jax_internals.module_name_of_text(text)
    bytecode = jax_internals.hlo_to_stablehlo_bytes(text, name)
    return mlir_text(bytecode, debug_info=debug_info)


def mlir_text(bytecode: bytes, *, debug_info: bool = False) -> str:
    """Prints MLIR bytecode as text (jax's MLIR context knows the dialects);
    ``debug_info`` prints the locations too."""
    from jaxlib.mlir import ir

    with jax_internals.ir_context():
        module = ir.Module.parse(bytecode)
        return module.operation.get_asm(enable_debug_info=debug_info) if debug_info else str(module)


def from_jax(fn, *example_args, **example_kwargs) -> Module:
    """The module jax lowers ``fn`` to, before XLA's optimizations.  Arguments may
    be arrays or abstract ``jax.ShapeDtypeStruct``s."""
    jax_internals._xc()  # picks the CPU platform first when no GPU is present
    import jax

    _hide_from_jax_tracebacks()

    lowered = jax.jit(fn).lower(*example_args, **example_kwargs)
    name = getattr(fn, "__name__", "fn")
    text = _hlo_text_with_metadata(lowered)
    return parse(text, source=f"<from_jax {name}>")


def _hlo_text_with_metadata(lowered) -> str:
    """HLO text of a jax ``Lowered`` keeping jax's names and every
    ``metadata={op_name=... source_file=...}`` (pattern labels and diffs read them).
    ``as_text(dialect="hlo", debug_info=True)`` does it (jax 0.10-0.12; without
    ``debug_info`` jax prints no metadata); a jax without that keyword gets the
    StableHLO printed with its locations, converted by XLA (locations become metadata)."""
    try:
        return lowered.as_text(dialect="hlo", debug_info=True)
    except TypeError:  # no debug_info keyword in this jax
        pass
    try:
        return jax_internals.stablehlo_to_hlo_text(lowered.as_text(debug_info=True))
    except TypeError:
        from jax._src.interpreters import mlir as jax_mlir

        return jax_internals.stablehlo_to_hlo_text(jax_mlir.module_to_string(lowered.compiler_ir("stablehlo"),
                                                                   enable_debug_info=True))


@lru_cache(maxsize=1)
def _hide_from_jax_tracebacks() -> None:
    """jax records the Python stack of each op as its source metadata, leaving out
    its own frames; leave ours out too, so metadata points at the user's code."""
    try:
        from jax._src import source_info_util

        source_info_util.register_exclusion(__file__)
    except Exception:  # noqa: BLE001 - only the stack frames' contents depend on it
        pass
