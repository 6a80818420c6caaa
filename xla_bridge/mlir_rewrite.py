"""StableHLO modules rewritten through MLIR's own Python bindings (jaxlib's
``RewritePatternSet``, ``PatternRewriter``, ``walk_and_apply_patterns``).

    m = StableHloModule.load("f.mlir")          # text or bytecode, optionally .gz
    for op in m.ops(): ...                       # every op of every function
    n = apply_patterns(m, patterns)              # portable patterns (passes.portable)
    m.verify(); m.to_text(); m.to_hlo()          # MLIR's verifier; text; our IR for XLA

A portable pattern is any object with ``root`` (an HLO opcode name: ``reshape``)
and ``rewrite(op, builder) -> bool``; it sees ops through ``MlirOp`` (the same
questions ``passes.portable.HloOp`` answers for our IR) and builds through
``MlirBuilder``, so one pattern runs at both levels. The module path of MLIR's
rewrite API is private and may move between jaxlib releases: ``rewrite_api`` is
the one place that looks for it.
"""

from __future__ import annotations

import importlib
import io
import re
from functools import lru_cache
from pathlib import Path
from types import ModuleType
from typing import Any, Iterator

from hlo_tools.errors import HloError, HloParseError, VerificationError
from hlo_tools.formats import read_module_bytes
from hlo_tools.ir import Module

from . import jax_internals
from .proto import located_mlir_error, stablehlo_source
from .stablehlo import to_module

#: where jaxlib releases have kept MLIR's Python rewrite API, newest first
_REWRITE_MODULES = ("jaxlib.mlir.rewrite", "jaxlib.mlir._mlir_libs._mlir.rewrite")
#: MLIR element type spellings seen, by HLO's name: what a builder writes back
_TO_MLIR = {"pred": "i1"}
_COMPLEX = {"complex<f32>": "c64", "complex<f64>": "c128"}
_INT = re.compile(r"(u|s)?i(\d+)")
#: HLO opcodes whose StableHLO op has another name
_STABLEHLO_OP = {"broadcast": "broadcast_in_dim"}
_HLO_OPCODE = {v: k for k, v in _STABLEHLO_OP.items()}


class StableHloError(HloError):
    """MLIR's rewrite API is missing from this jaxlib, or MLIR refused a module."""


@lru_cache(maxsize=1)
def rewrite_api() -> ModuleType:
    """MLIR's Python rewrite module in this jaxlib (its path is private)."""
    jax_internals._xc()
    for name in _REWRITE_MODULES:
        try:
            mod = importlib.import_module(name)
        except ImportError:
            continue
        if hasattr(mod, "RewritePatternSet") and hasattr(mod, "walk_and_apply_patterns"):
            return mod
    import jaxlib

    raise StableHloError(f"jaxlib {getattr(jaxlib, '__version__', '?')} has no MLIR rewrite API "
                         f"(looked for {', '.join(_REWRITE_MODULES)}): StableHLO rewrites need jax 0.12 or newer")



class StableHloModule:
    """A StableHLO module held by MLIR, with the few questions a pass manager asks
    (``instruction_count``, ``verify``, ``to_text``) answered as for our IR."""

    level = "stablehlo"

    def __init__(self, data: str | bytes, source: str = "<stablehlo>"):
        from jaxlib.mlir import ir

        self.source = source
        self.context = jax_internals.ir_context()
        with self.context:
            try:
                self.module = ir.Module.parse(data)
            except Exception as e:  # noqa: BLE001 - MLIR raises MLIRError or ValueError with its diagnostics
                what = "not a StableHLO module MLIR can read: "
                located = located_mlir_error(str(e), data, source, what)
                raise located or HloParseError(what + str(e).strip().splitlines()[-1], source, 1, 1) from None

    @classmethod
    def load(cls, path: str | Path) -> "StableHloModule":
        """A ``.mlir`` file: text or bytecode, optionally gzip'd."""
        return cls(stablehlo_source(read_module_bytes(path), str(path)), str(path))

    @property
    def name(self) -> str:
        attr = self.module.operation.attributes
        return str(attr["sym_name"]).strip('"') if "sym_name" in attr else "module"

    def ops(self) -> Iterator[Any]:
        """Every op inside the module's functions, in order (nested regions too)."""
        for top in self.module.body.operations:
            yield from _inside(top)

    @property
    def instruction_count(self) -> int:
        return sum(1 for _ in self.ops())

    def verify(self) -> None:
        """MLIR's verifier; a failure is a ``VerificationError`` with its diagnostics."""
        with self.context:
            try:
                ok = self.module.operation.verify()
            except Exception as e:  # noqa: BLE001 - newer bindings raise MLIRError with the diagnostics
                raise VerificationError(f"{self.source}: MLIR's verifier: {e}") from None
        if not ok:
            raise VerificationError(f"{self.source}: MLIR's verifier rejected the module")

    def to_text(self) -> str:
        return str(self.module)

    def to_bytecode(self) -> bytes:
        buf = io.BytesIO()
        self.module.operation.write_bytecode(buf)
        return buf.getvalue()

    def clone(self) -> "StableHloModule":
        return StableHloModule(self.to_text(), self.source)

    def apply_patterns(self, patterns) -> int:
        """``apply_patterns(self, patterns)``: what ``passes.portable.PortablePass`` calls."""
        return apply_patterns(self, patterns)

    def to_hlo(self) -> Module:
        """Our IR of it (XLA converts), for compile, run, compare and bench."""
        return to_module(self.to_text(), source=self.source)


def _inside(op) -> Iterator[Any]:
    """The ops in ``op``'s regions, each followed by those in its own."""
    for region in op.operation.regions:
        for block in region.blocks:
            for inner in block.operations:
                yield inner
                yield from _inside(inner)


def hlo_of(module):
    """A ``StableHloModule`` as our IR (XLA converts); anything else as it is: what
    lets compile, compare and bench take StableHLO modules as they take HLO ones."""
    return module.to_hlo() if isinstance(module, StableHloModule) else module


# -- the view portable patterns see ---------------------------------------------------------
def hlo_element_type(mlir_name: str) -> str:
    """HLO's name of an MLIR element type: ``i1`` pred, ``iN``/``siN`` sN, ``uiN`` uN,
    fp8/fp4 names lower-cased (``f8E4M3FN`` f8e4m3fn), ``complex<f32>`` c64."""
    if mlir_name == "i1":
        name = "pred"
    elif (m := _INT.fullmatch(mlir_name)) is not None:
        name = f"{'u' if m.group(1) == 'u' else 's'}{m.group(2)}"
    else:
        name = _COMPLEX.get(mlir_name, mlir_name.lower())
    _TO_MLIR.setdefault(name, mlir_name)
    return name


def _hlo_type(t) -> tuple[str, tuple[int, ...]]:
    from jaxlib.mlir import ir

    shaped = ir.RankedTensorType(t)
    return hlo_element_type(str(shaped.element_type)), tuple(shaped.shape)


class MlirOp:
    """A value of a StableHLO module as a portable pattern sees it (the answers
    ``passes.portable.HloOp`` gives for an HLO instruction)."""

    def __init__(self, value):
        self.value = value
        owner = value.owner
        self.op = getattr(owner, "operation", None) if not hasattr(owner, "arguments") else None

    @property
    def opcode(self) -> str:
        if self.op is None:
            return "parameter"
        name = self.op.name
        name = name.split(".", 1)[1] if name.startswith("stablehlo.") else name
        return _HLO_OPCODE.get(name, name)

    @property
    def operands(self) -> list["MlirOp"]:
        return [MlirOp(v) for v in self.op.operands] if self.op is not None else []

    @property
    def element_type(self) -> str:
        return _hlo_type(self.value.type)[0]

    @property
    def dims(self) -> tuple[int, ...]:
        return _hlo_type(self.value.type)[1]

    @property
    def user_count(self) -> int:
        # distinct readers, as HLO counts users (MLIR's Operation hashes by the op it wraps)
        return len({u.owner.operation for u in self.value.uses})

    @property
    def dimensions(self) -> tuple[int, ...]:
        """HLO's ``dimensions``: a transpose's permutation, a broadcast's operand-to-output map."""
        attrs = self.op.attributes
        key = "permutation" if "permutation" in attrs else "broadcast_dimensions"
        return tuple(int(x) for x in attrs[key])

    @property
    def name(self) -> str:
        return self.value.get_name() if hasattr(self.value, "get_name") else self.opcode


def _tensor_type(etype: str, dims: tuple[int, ...]):
    from jaxlib.mlir import ir

    return ir.RankedTensorType.get(list(dims), ir.Type.parse(_TO_MLIR.get(etype, etype)))


class MlirBuilder:
    """Builds ops before the matched root and replaces it (``passes.portable.HloBuilder``'s twin)."""

    def __init__(self, rewriter, root):
        self.rewriter = rewriter
        self.root = root

    def _build(self, make) -> MlirOp:
        """``make(stablehlo)``'s op, built before the root at its location."""
        from jaxlib.mlir.dialects import stablehlo

        with self.rewriter.ip, self.root.location:
            return MlirOp(make(stablehlo).result)

    def reshape(self, x: MlirOp, dims: tuple[int, ...]) -> MlirOp:
        return self._build(lambda s: s.ReshapeOp(_tensor_type(x.element_type, dims), x.value))

    def convert(self, x: MlirOp, etype: str) -> MlirOp:
        return self._build(lambda s: s.ConvertOp(_tensor_type(etype, x.dims), x.value))

    def transpose(self, x: MlirOp, permutation: tuple[int, ...]) -> MlirOp:
        dims = tuple(x.dims[p] for p in permutation)
        return self._build(lambda s: s.TransposeOp(x.value, list(permutation),
                                                   results=[_tensor_type(x.element_type, dims)]))

    def broadcast(self, x: MlirOp, dims: tuple[int, ...], dimensions: tuple[int, ...]) -> MlirOp:
        return self._build(lambda s: s.BroadcastInDimOp(_tensor_type(x.element_type, dims), x.value, list(dimensions)))

    def replace(self, root: MlirOp, new: MlirOp) -> None:
        """``root``'s uses read ``new``; ``root`` and the operands it alone read go."""
        producers = [o for o in root.operands if o.op is not None]
        self.rewriter.replace_op(root.op, [new.value])
        for p in producers:
            if p.user_count == 0:
                self.rewriter.erase_op(p.op)


def apply_patterns(module: StableHloModule, patterns) -> int:
    """Runs portable ``patterns`` over ``module`` with MLIR's walk driver (each op
    visited once, a pattern per op at most); the number of rewrites."""
    api = rewrite_api()
    count = [0]

    def wrap(pattern):
        def fn(op, rewriter):  # MLIR's convention: a falsy return is a match
            if pattern.rewrite(MlirOp(op.result), MlirBuilder(rewriter, op)):
                count[0] += 1
                return False
            return True
        return fn

    with module.context:
        ps = api.RewritePatternSet(module.context)
        for p in patterns:
            ps.add(f"stablehlo.{_STABLEHLO_OP.get(p.root, p.root)}", wrap(p))
        api.walk_and_apply_patterns(module.module.operation, ps.freeze())
    return count[0]
