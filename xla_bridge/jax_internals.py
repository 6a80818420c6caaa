"""The bridge to XLA through jaxlib: the only module (with ``stablehlo.py``) that
touches ``jax._src``.

Every call into jaxlib internals is one small function here, with fallbacks for
the names that moved between jax 0.10, 0.11 and 0.12, so a rename in a new jax
release is one fix.  The user-facing layer is in ``compiler`` (compile),
``runner`` (inputs, run, compare), ``bench`` (timing) and ``results``
(the SQLite db); ``compile``, ``run``, ``compare`` and ``benchmark`` are
imported from the package: ``from xla_bridge import compile``.  ``worker`` runs them in a child
process when asked (``contained=True``, what the ``hlo`` commands and the fusion
study do), so that an XLA abort becomes ``XlaAbortError`` instead of the end of
the caller.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import re
from functools import lru_cache
from typing import Any, Callable

import numpy as np

from hlo_tools.errors import HloParseError

from . import worker
from .errors import XlaCompileError
from .hook_stage import HookStage


def _first_line(e: BaseException) -> str:
    """XLA's headline; where it ends with ':' (its parser's "Syntax error when trying
    to parse the text as a HloModule:") the line that says what, too."""
    lines = [ln.strip() for ln in str(e).strip().splitlines() if ln.strip()]
    if not lines:
        return type(e).__name__
    return f"{lines[0]} {lines[1]}" if lines[0].endswith(":") and len(lines) > 1 else lines[0]


# -- jaxlib handles ---------------------------------------------------------------

def _ensure_platforms() -> None:
    """With the CUDA plugin installed and no GPU, plain jax prints a cuDNN traceback
    on first use (it still falls back to CPU).  When the user set nothing and this
    machine has no NVIDIA device node, pick CPU before jax initialises its backends."""
    if os.environ.get("JAX_PLATFORMS") or os.path.exists("/dev/nvidiactl"):
        return
    import jax

    try:
        from jax._src import xla_bridge

        if getattr(xla_bridge, "_backends", None):  # already initialised: leave it
            return
        if not jax.config.jax_platforms:
            jax.config.update("jax_platforms", "cpu")
    except Exception:  # noqa: BLE001 - best effort; jax falls back to CPU anyway
        pass


@lru_cache(maxsize=1)
def _xc():
    _ensure_platforms()
    from jax._src.lib import xla_client

    return xla_client


@lru_cache(maxsize=1)
def _jaxlib_ext():
    """``jax._src.lib._jax`` (jax >= 0.7), formerly ``xla_extension``."""
    _xc()
    lib = importlib.import_module("jax._src.lib")
    for name in ("_jax", "xla_extension"):
        mod = getattr(lib, name, None)
        if mod is not None:
            return mod
    raise ImportError("jax._src.lib has neither _jax nor xla_extension")


def jax_versions() -> dict[str, str]:
    import jax
    import jaxlib

    return {"jax": jax.__version__, "jaxlib": jaxlib.__version__}


# -- XLA's parser and printer -----------------------------------------------------

def xla_module_from_text(text: str, source: str = "<string>"):
    """XLA's own parser (``HloModule``); raises HloParseError with XLA's message."""
    try:
        return _xc().hlo.hlo_module_from_text(text)
    except Exception as e:  # XlaRuntimeError / ValueError depending on the jaxlib version
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise HloParseError(f"XLA's parser rejects the text: {first}", source) from None


def canonical_text(text: str, *, rounds: int = 3) -> str:
    """XLA's canonical print of ``text``, iterated to its fixed point (XLA renumbers
    stack-frame tables for a round or two before the print stabilises)."""
    out = xla_module_from_text(text).to_string()
    for _ in range(rounds - 1):
        again = xla_module_from_text(out).to_string()
        if again == out:
            break
        out = again
    return out


def text_from_proto(proto: bytes) -> str:
    """HLO text of a serialized HloModuleProto."""
    return _xc().hlo.HloModule.from_serialized_hlo_module_proto(proto).to_string()


def proto_from_text(text: str, module_name: str = "?") -> bytes:
    """A serialized HloModuleProto of HLO text (through XLA's parser)."""
    try:
        return _xc().hlo.hlo_module_from_text(text).as_serialized_hlo_module_proto()
    except Exception as e:  # noqa: BLE001
        raise XlaCompileError(_first_line(e), module_name=module_name, stage="parse", xla_message=str(e)) from None


def hlo_to_stablehlo_bytes(text: str, module_name: str = "?") -> bytes:
    """HLO text -> XLA HloModule -> StableHLO bytecode that ``compile_and_load`` takes.
    Fusion instructions survive as ``mhlo.fusion`` ops (compilable in-process on CPU)."""
    proto = proto_from_text(text, module_name)
    try:
        return _jaxlib_ext().mlir.hlo_to_stablehlo(proto)
    except Exception as e:  # noqa: BLE001
        raise XlaCompileError(_first_line(e), module_name=module_name, stage="convert", xla_message=str(e)) from None


def print_options():
    """XLA's default print options with large constants printed in full (the
    default elides them as ``{...}``, which no parser reads back) and metadata on."""
    opts = _xc().hlo.HloPrintOptions()
    opts.print_large_constants = True
    opts.print_metadata = True
    return opts


def stablehlo_to_hlo_text(mlir_module: str | bytes) -> str:
    """StableHLO / MHLO text or bytecode -> HLO text (XLA's print).  MLIR locations
    (``loc("jit(f)/add")``) become ``metadata={op_name=...}``, and are kept."""
    comp = _jaxlib_ext().mlir.mlir_module_to_xla_computation(mlir_module, use_tuple_args=False, return_tuple=False)
    get = getattr(comp, "get_hlo_module", None)
    if get is None:  # older jaxlib: only the text print (no metadata)
        return comp.as_hlo_text(print_large_constants=True)
    return get().to_string(print_options())


def entry_signature(text: str, module_name: str = "?") -> tuple[list[str], str]:
    """The entry computation's parameter shapes and result shape, with layouts, as
    XLA's parser reads ``text`` (no need for our parser to read the module)."""
    proto = proto_from_text(text, module_name)
    shape = _xc().XlaComputation(proto).program_shape()
    return [str(s) for s in shape.parameter_shapes()], str(shape.result_shape())


# -- clients, compile, run ----------------------------------------------------------

_PLATFORM = {"cpu": "cpu", "gpu": "cuda", "cuda": "cuda", "rocm": "rocm"}


def get_client(backend: str = "cpu"):
    """The PJRT client jax uses for ``backend`` ("cpu" or "gpu")."""
    _xc()
    from jax._src import xla_bridge

    try:
        return xla_bridge.get_backend(backend)
    except RuntimeError as e:
        raise XlaCompileError(_first_line(e), backend=backend, stage="compile", xla_message=str(e)) from None


def backend_available(backend: str) -> bool:
    """True when jax has a client (hence a device) for ``backend``; never raises."""
    try:
        return bool(get_client(backend).local_devices())
    except Exception:  # noqa: BLE001
        return False


def device_name(device) -> str:
    return getattr(device, "device_kind", None) or str(device)


def make_compile_options(debug_options: dict[str, Any]):
    """``CompileOptions`` with XLA debug options set: attributes jaxlib exposes are
    set directly, the rest go through ``env_option_overrides`` (by name, as jax's
    ``compiler_options`` does)."""
    opts = _xc().CompileOptions()
    dbg = opts.executable_build_options.debug_options
    overrides = []
    for key, value in debug_options.items():
        if hasattr(dbg, key):
            setattr(dbg, key, value)
        else:
            overrides.append((key, value if isinstance(value, (bool, int, float)) else str(value)))
    if overrides:
        opts.env_option_overrides = overrides
    return opts


def uses_shardy(text: str) -> bool:
    """Whether a module was exported by Shardy (jax >= 0.7's partitioner): its
    ``xla.sdy.*`` custom calls and attributes are read back only by XLA's Shardy
    pipeline (``use_shardy_partitioner``); the GSPMD path aborts on its named
    shardings (hlo_sharding_util: ``!sharding.UseNamedShardingLeaf()``)."""
    return "xla.sdy." in text


def set_spmd_partitions(opts, devices: list, *, shardy: bool = False) -> None:
    """With more than one device: one replica, one SPMD partition per device
    (XLA's SPMD partitioner splits a sharded module over them; ``shardy``: Shardy's)."""
    if len(devices) <= 1:
        return
    opts.num_replicas, opts.num_partitions = 1, len(devices)
    build = opts.executable_build_options
    build.use_spmd_partitioning, build.num_partitions, build.num_replicas = True, len(devices), 1
    if shardy and hasattr(build, "use_shardy_partitioner"):
        build.use_shardy_partitioner = True
    build.device_assignment = _xc().DeviceAssignment.create(np.array([[d.id for d in devices]], dtype=np.int32))


def compile_stablehlo(client, mlir_bytes: bytes, devices: list, debug_options: dict[str, Any], *,
                      shardy: bool = False):
    """Compile and load on ``devices``: one device, or one per SPMD partition (XLA's
    SPMD partitioner splits a sharded module over them, one replica; ``shardy``:
    Shardy's); jaxlib's errors pass through unchanged."""
    opts = make_compile_options(debug_options)
    set_spmd_partitions(opts, devices, shardy=shardy)
    fn = getattr(client, "compile_and_load", None) or client.compile  # compile_and_load: jax >= 0.6
    return fn(mlir_bytes, _xc().DeviceList(tuple(devices)), opts)



def optimized_text(executable) -> str:
    """XLA's optimized module as text, large constants in full (so it reads back)."""
    return executable.hlo_modules()[0].to_string(print_options())


def cost_analysis(executable) -> dict[str, float]:
    """XLA's cost analysis of a compiled executable as ``{name: value}`` ({} if none)."""
    try:
        ca = executable.cost_analysis()
    except Exception:  # noqa: BLE001 - deviceless GPU and some plugins have none
        return {}
    if isinstance(ca, (list, tuple)):  # older jaxlib: one dict per program
        ca = ca[0] if ca else {}
    return {str(k): float(v) for k, v in dict(ca or {}).items()}


def cost_analysis_of_text(text: str, *, contained: bool = False) -> dict[str, float]:
    """XLA's HloCostAnalysis of a module's text, through the CPU client (works for
    any module XLA parses, e.g. XLA:GPU's optimized module compiled without a GPU).
    ``contained``: in the XLA worker, where an abort raises ``XlaAbortError``."""
    if contained and not worker.in_worker():
        return worker.contained(cost_analysis_of_text, (text,), phase="analysing",
                                    module=module_name_of_text(text))
    ext = _jaxlib_ext()
    fn = getattr(ext, "hlo_module_cost_analysis", None)
    if fn is None:
        return {}
    try:
        return {str(k): float(v) for k, v in dict(fn(get_client("cpu"), _xc().hlo.hlo_module_from_text(text))).items()}
    except Exception:  # noqa: BLE001
        return {}


def memory_stats(executable) -> dict[str, int]:
    """``CompiledMemoryStats`` as a dict of its ``*_in_bytes`` fields ({} if none)."""
    try:
        st = executable.get_compiled_memory_stats()
    except Exception:  # noqa: BLE001
        return {}
    return {k: int(getattr(st, k)) for k in dir(st) if k.endswith("_in_bytes") and isinstance(getattr(st, k), int)}


@lru_cache(maxsize=1)
def _x64_context():
    """A context manager enabling 64-bit types (jax otherwise truncates s64/f64
    inputs to 32 bits), under its name in this jax."""
    try:
        from jax._src.config import enable_x64

        return lambda: enable_x64(True)
    except ImportError:
        from jax.experimental import enable_x64

        return enable_x64


def device_put(array, device):
    """A device buffer holding ``array`` exactly (64-bit types kept)."""
    import jax

    if getattr(array, "dtype", None) is not None and array.dtype.itemsize >= 8:
        with _x64_context()():
            return jax.device_put(array, device)
    return jax.device_put(array, device)


def executor(executable) -> Callable[[list], list]:
    """The bound call that runs an executable on device buffers and returns device
    arrays (the thing a benchmark times)."""
    return executable.execute


def block_until_ready(outputs) -> None:
    for x in outputs:
        x.block_until_ready()


# -- the pipeline hook --------------------------------------------------------------

@lru_cache(maxsize=1)
def _xla_transform():
    """``jax._src.xla_transform`` (jax 0.12, public as ``jax.extend.xla``), or None."""
    _xc()
    for name in ("jax._src.xla_transform", "jax.extend.xla"):
        try:
            mod = importlib.import_module(name)
        except ImportError:
            continue
        if hasattr(mod, "register_hlo_module_transformation"):
            return mod
    return None


def hook_supported() -> bool:
    """True when this jax can run a Python pass inside XLA's pipeline."""
    return _xla_transform() is not None


@contextlib.contextmanager
def registered_hook(callback: Callable[[bytes], bytes | None], *, name: str, stage: HookStage, platform: str):
    """Registers ``callback`` as an HLO module transformation for the block, and
    always clears it afterwards (it applies to every compile while registered)."""
    mod = _xla_transform()
    if mod is None:
        raise XlaCompileError("this jax has no HLO module transformation hook (jax.extend.xla needs jax >= 0.12)",
                              stage="hook")
    st = getattr(mod.PipelineStage, HookStage(stage).jax_name)
    plat = _PLATFORM.get(platform, platform)
    mod.register_hlo_module_transformation(callback, name=name, stage=st, platforms=plat)
    try:
        yield
    finally:
        mod.clear_hlo_module_transformation(name, stage=st, platforms=plat)


# -- XLA:GPU without a GPU ------------------------------------------------------------

def cuda_plugin_available() -> bool:
    """True when jax's CUDA PJRT plugin is installed (needed to compile for GPU)."""
    return _spec("jax_plugins.xla_cuda12") is not None or _spec("jax_cuda12_plugin") is not None


def _spec(name: str):
    """``find_spec`` that says None, not ModuleNotFoundError, when a parent package is absent."""
    import importlib.util

    try:
        return importlib.util.find_spec(name)
    except ModuleNotFoundError:
        return None


def cuda_plugin_library() -> str | None:
    """Path of ``xla_cuda_plugin.so`` (its data holds XLA's GPU target configs)."""
    spec = _spec("jax_plugins.xla_cuda12")
    if spec is None or not spec.submodule_search_locations:
        return None
    for d in spec.submodule_search_locations:
        p = os.path.join(d, "xla_cuda_plugin.so")
        if os.path.exists(p):
            return p
    return None


def cuda_data_dir() -> str | None:
    """Where ptxas/libdevice are, as jax finds them (the nvidia-cuda-nvcc wheel) or
    a system toolkit; None lets XLA search its defaults."""
    try:
        from jax._src.lib import cuda_path

        if cuda_path:
            return cuda_path
    except ImportError:
        pass
    for d in ("/usr/local/cuda", os.environ.get("CUDA_HOME") or ""):
        if d and os.path.exists(os.path.join(d, "nvvm", "libdevice")):
            return d
    return None


@lru_cache(maxsize=8)
def gpu_topology(target_config_text: str, topology: str = "1x1x1"):
    """A deviceless CUDA topology for a GpuTargetConfigProto text (compile-only)."""
    from jax.experimental import topologies

    return topologies.get_topology_desc("", platform="cuda", target_config=target_config_text, topology=topology)


def compile_deviceless_gpu(text: str, target_config_text: str, debug_options: dict[str, Any], *,
                           module_name: str = "?", topology: str = "1x1x1", partitions: int = 1):
    """Compiles HLO text for a GPU described by ``target_config_text`` without a
    GPU; returns the compile-only executable (optimized HLO, no running) and the
    first device.  ``partitions`` > 1: a sharded module, split by XLA's SPMD
    partitioner over the first that many devices of ``topology`` (e.g. "1x1x8")."""
    mlir_bytes = hlo_to_stablehlo_bytes(text, module_name)
    try:
        topo = gpu_topology(target_config_text, topology)
        devices = list(topo.devices)[:max(1, partitions)]
    except Exception as e:  # noqa: BLE001
        raise XlaCompileError(_first_line(e), module_name=module_name, backend="gpu", stage="compile",
                              xla_message=str(e)) from None
    if len(devices) < partitions:
        raise ValueError(f"{partitions} partitions need {partitions} devices; topology {topology} has {len(devices)}")
    from jaxlib.mlir import ir

    opts = make_compile_options(debug_options)
    set_spmd_partitions(opts, devices, shardy=uses_shardy(text))
    with ir_context():
        ir_module = ir.Module.parse(mlir_bytes)
        return devices[0].client.compile(ir_module, _xc().DeviceList(tuple(devices)), opts), devices[0]


def ir_context():
    """An MLIR context that knows jax's dialects (StableHLO, MHLO, func, ...)."""
    _xc()
    from jax._src.interpreters import mlir as jax_mlir

    return jax_mlir.make_ir_context()


def profiler_modules():
    """jaxlib's ``_profiler`` (``ProfilerSession``) and ``_profile_data`` (``ProfileData``)
    modules, for XLA's own trace events (``trace``)."""
    from jax._src.lib import _profile_data, _profiler

    return _profiler, _profile_data


_MODULE_NAME_RE = re.compile(r"^\s*HloModule\s+([^\s,]+)", re.M)


def module_name_of_text(text: str) -> str:
    m = _MODULE_NAME_RE.search(text)
    return m.group(1) if m else "?"
