"""Binary and StableHLO module files to HLO text, through jaxlib.

``read_text``/``load`` accept every module file a user has: HLO text through
``hlo_tools.parser``, protos and StableHLO converted by XLA (in the XLA worker,
so that a proto XLA CHECK-fails on ends the worker, not the caller).  XLA prints
the module; our parser then reads that text like any other.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from hlo_tools.errors import HloParseError
from hlo_tools import formats
from hlo_tools.formats import find_module_proto
from hlo_tools.ir import Module
from hlo_tools.parser import decode_text, parse
from .errors import XlaAbortError
from .jax_internals import _xc, stablehlo_to_hlo_text
from .worker import contained

_NOT_A_MODULE = ("not an HLO module: not UTF-8 text, and not a serialized HloModuleProto, HloProto or HloSnapshot "
                 "(XLA dumps also write memory-usage reports, compile options and topologies as .pb)")


def _xla_client():
    try:
        return _xc()
    except ImportError as e:
        raise ImportError(f"reading binary or StableHLO modules needs jaxlib: {e}") from None


def hlo_text_from_proto(data: bytes, source: str) -> str:
    """HLO text of a serialized ``HloModuleProto`` (or an ``HloProto`` or
    ``HloSnapshot`` holding one); an ``HloParseError`` at ``source``:1:1 otherwise."""
    blob = find_module_proto(data)
    if blob is None:
        raise HloParseError(_NOT_A_MODULE, source, 1, 1)
    try:
        # In the XLA worker: a proto XLA CHECK-fails on ends the worker, not us.
        return contained(_proto_to_text, (blob,), phase="reading", module=source)
    except XlaAbortError as e:
        raise HloParseError(f"XLA aborted while reading this HloModuleProto: {e.message}", source, 1, 1) from None
    except ImportError as e:
        raise HloParseError(str(e), source, 1, 1) from None
    except Exception as e:  # noqa: BLE001 - jaxlib raises its own runtime error types
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise HloParseError(f"XLA cannot read this HloModuleProto: {first}", source, 1, 1) from None


def _proto_to_text(blob: bytes) -> str:
    """XLA's print of a serialized HloModuleProto (runs in the XLA worker)."""
    return _xla_client().hlo.HloModule.from_serialized_hlo_module_proto(blob).to_string()


#: MLIR's located diagnostic, as XLA's conversion (``-:3:5: error: ...``) and
#: MLIR's parser (``error: "-":3:5: ...``) print it
_MLIR_ERROR_RE = re.compile(r'(?:^|\s)"?-"?:(\d+):(\d+):\s*(?:error:\s*)?(.*)')


def stablehlo_source(data: bytes, source: str) -> str | bytes:
    """A StableHLO file's bytes as MLIR reads them: bytecode as it is, text decoded;
    ``HloParseError`` when they are neither."""
    if data[:4] == formats.MLIR_BYTECODE_MAGIC:
        return data
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise HloParseError("not UTF-8 text, and not MLIR bytecode", source, 1, e.start + 1) from None


def located_mlir_error(message: str, module: str | bytes, source: str, what: str) -> HloParseError | None:
    """MLIR's diagnostic in ``message`` as an ``HloParseError`` at its line and column
    of ``module`` (text; None for bytecode or a message without a location)."""
    m = _MLIR_ERROR_RE.search(message)
    if m is None or not isinstance(module, str):
        return None
    line, col = int(m.group(1)), int(m.group(2))
    lines = module.splitlines()
    text = lines[line - 1] if 0 < line <= len(lines) else ""
    return HloParseError(f"{what}{m.group(3).strip()}", source, max(line, 1), max(col, 1), text)


def hlo_text_from_stablehlo(data: bytes, source: str) -> str:
    """HLO text of a StableHLO (or MHLO) module, MLIR text or bytecode, as XLA
    converts it; MLIR's own errors become ``HloParseError`` at their line and column."""
    module = stablehlo_source(data, source)
    try:
        return contained(stablehlo_to_hlo_text, (module,), phase="reading", module=source)
    except XlaAbortError as e:
        raise HloParseError(f"XLA aborted while converting this StableHLO module: {e.message}", source, 1, 1) from None
    except ImportError as e:
        raise HloParseError(f"reading StableHLO modules needs jaxlib: {e}", source, 1, 1) from None
    except Exception as e:  # noqa: BLE001 - jaxlib raises its own runtime error types
        msg = str(e)
        located = located_mlir_error(msg, module, source, "StableHLO: ")
        if located is not None:
            raise located from None
        m = _MLIR_ERROR_RE.search(msg)
        first = m.group(3).strip() if m else (msg.strip().splitlines() or [type(e).__name__])[0]
        raise HloParseError(f"XLA cannot convert this StableHLO module: {first}", source, 1, 1) from None


def read_text(path: str | os.PathLike, *, max_bytes: int | None = None) -> str:
    """HLO text of a module file, whatever form it has on disk: HLO text, a
    serialized HloModuleProto/HloProto (``*.hlo.pb``, converted by XLA), or
    StableHLO (``*.mlir``, text or bytecode), each optionally gzip'd.  Every
    problem with the file is an HloParseError naming it (``hlo_tools.parser.read_hlo_text``)."""
    p = Path(path)
    data = formats.read_module_bytes(p, max_bytes=max_bytes)
    kind = formats.module_format(p, data)
    if kind == "proto":
        return hlo_text_from_proto(data, str(p))
    if kind == "stablehlo":
        return hlo_text_from_stablehlo(data, str(p))
    return decode_text(data, str(p))


def load(path: str | os.PathLike) -> Module:
    """A module from any module file (see ``read_text``)."""
    return parse(read_text(path), source=str(path))
