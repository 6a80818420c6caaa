"""Compile a module with XLA: the stock pipeline, or "as written" (XLA's fusion
passes off, so the module's own fusion decisions are what runs), optionally with
a Python pass hooked inside XLA's pipeline.

    res = compile(module, backend="cpu", pipeline="as-written")
    res.optimized_module      # XLA's optimized module, in our IR
    res.cost, res.memory, res.compile_seconds
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import os
import re
import time
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from hlo_tools.ir import Module
from hlo_tools.opcode import HloOpcode
from hlo_tools.parser import parse
from hlo_tools.shape import parse_shape

from . import jax_internals, worker
from .errors import XlaCompileError
from .hook_stage import HookStage
from .mlir_rewrite import hlo_of
from .targets import device_description, target_config

PIPELINES = ("stock", "replace", "as-written")

#: The passes "as-written" disables, per backend: every XLA pass that decides what
#: is fused.  A module's own ``fusion`` instructions then reach codegen as written.
#: Names come from XLA's pipelines (xla/service/cpu/cpu_compiler.cc,
#: xla/service/gpu/gpu_compiler.cc; the GPU list is ../shared/gpu_specs/gpu_pass_list.txt).
#: Old names are kept beside new ones: XLA ignores names that no pass has.
AS_WRITTEN_DISABLED_PASSES: dict[str, tuple[str, ...]] = {
    "cpu": (
        "fusion",                   # CpuInstructionFusion (InstructionFusion's name)
        "multi_output_fusion",      # CpuMultiOutputFusion (older XLA:CPU)
        "dot-library-rewriter",     # YNNPACK/oneDNN kCustom fusions around dots (jax >= 0.11)
    ),
    "gpu": (
        "priority-fusion",          # XLA:GPU's main fusion pass
        "multi_output_fusion",      # sibling / producer-consumer multi-output fusion
        "sort-iota-fusion",
        "triton-gemm-rewriter",     # Triton GEMM fusions (dots then go to cuBLAS)
        "gemm-fusion",              # its older name
        "triton-softmax-rewriter",  # Triton softmax/normalization fusions
        "softmax-rewriter-triton",  # its older name
        "copy_fusion",              # fuses copies into existing fusions
        "horizontal-loop-fusion",   # older pipelines
        "horizontal-input-fusion",
    ),
}

#: The passes "replace" disables, per backend: only the generic fusion deciders a
#: Python fusion pipeline stands in for (a priority-fusion prototype), so that XLA
#: still does what sits around them: on GPU the Triton GEMM and softmax rewriters,
#: cuBLAS rewriting and its epilogue fusion, sort-iota and copy fusion; on CPU the
#: library rewriter's dot fusions.  docs/xla_gpu_modes.md has the table.
REPLACE_DISABLED_PASSES: dict[str, tuple[str, ...]] = {
    "cpu": ("fusion", "multi_output_fusion"),
    "gpu": ("priority-fusion", "multi_output_fusion", "horizontal-loop-fusion", "horizontal-input-fusion"),
}


def disabled_passes(backend: str, pipeline: str) -> tuple[str, ...]:
    """The XLA passes ``pipeline`` turns off on ``backend`` (none for "stock")."""
    if pipeline not in PIPELINES:
        raise ValueError(f"unknown pipeline {pipeline!r}: use one of {', '.join(PIPELINES)}")
    table = {"as-written": AS_WRITTEN_DISABLED_PASSES, "replace": REPLACE_DISABLED_PASSES}.get(pipeline)
    return table[_backend_key(backend)] if table else ()


def _backend_key(backend: str) -> str:
    b = {"cuda": "gpu"}.get(backend, backend)
    if b not in AS_WRITTEN_DISABLED_PASSES:
        raise ValueError(f"unknown backend {backend!r}: use 'cpu' or 'gpu'")
    return b


def parse_flags(flags) -> dict[str, Any]:
    """XLA debug options from a dict or from ``--xla_name=value`` strings."""
    if flags is None:
        return {}
    if isinstance(flags, dict):
        return dict(flags)
    if isinstance(flags, str):
        flags = flags.split()
    out: dict[str, Any] = {}
    for f in flags:
        key, _, value = f.lstrip("-").partition("=")
        if not key.startswith("xla_"):
            raise ValueError(f"not an XLA debug option: {f!r} (expected --xla_name=value)")
        low = value.lower()
        out[key] = True if low in ("", "true") else False if low == "false" else int(value) if value.lstrip("-").isdigit() else value
    return out


@dataclass
class Hook:
    """A Python pass run inside XLA's pipeline at ``stage`` (a ``HookStage``; its
    value, "pre-scheduler" or "post-scheduler", converts).  ``pass_`` has
    ``run(module) -> bool`` (a ``passes.Pass`` or ``PassManager``), or is a callable
    ``(Module) -> bool | Module | None``; a ``Module`` returned replaces XLA's.
    ``reprint`` hands the module back to XLA even when the pass reports no change
    (a round trip through our IR).  ``after``: the module as the pass left it, at
    its last call."""

    pass_: Any
    stage: HookStage = HookStage.POST_SCHEDULER
    reprint: bool = False
    calls: int = 0
    changed: int = 0
    seen: list[str] = field(default_factory=list)  # the texts XLA handed the hook
    after: Module | None = field(default=None, repr=False)
    error: BaseException | None = None

    def __post_init__(self):
        self.stage = HookStage(self.stage)  # ValueError for an unknown stage, before any compile

    def callback(self, proto: bytes) -> bytes | None:
        self.calls += 1
        try:
            text = jax_internals.text_from_proto(proto)
            self.seen.append(text)
            module = parse(text, source=f"<{self.stage} hook>")
            res = self.pass_.run(module) if hasattr(self.pass_, "run") else self.pass_(module)
            if isinstance(res, Module):
                module, changed = res, True
            else:
                changed = bool(res)  # a Pass (a PassManager too) answers changed-or-not
            self.after = module
            if not changed and not self.reprint:
                return None
            self.changed += changed
            return jax_internals.proto_from_text(module.to_text(tuple_sugar=False), module.name)
        except BaseException as e:  # noqa: BLE001 - never let an exception cross into XLA
            if self.error is None:
                self.error = e
            return None


_hook_ids = itertools.count()

_FUSION_RE = re.compile(r" fusion\((.*?)\), kind=k\w+, calls=")


@dataclass
class _Substitute:
    """The hook that replaces XLA's module by ours (``proto``), once."""

    proto: bytes
    stage: HookStage = HookStage.PRE_SCHEDULER
    calls: int = 0
    error: BaseException | None = None

    def callback(self, proto: bytes) -> bytes | None:
        self.calls += 1
        return self.proto if self.calls == 1 else None


@dataclass(frozen=True, eq=False)
class CompileResult:
    """One XLA compile: the optimized module, XLA's figures, and (when there is a
    device and it was compiled in this process) the loaded executable.

    ``contained``: compiled in the XLA worker; its executable stayed there (an
    executable cannot leave the process that loaded it), so run it with
    ``run_module`` / ``compare`` / ``benchmark`` and ``contained=True``.
    ``handed_over``: the source was a module XLA had already optimized, handed to
    XLA as written after its fusion passes (see ``compile``).  ``partitions``: SPMD
    partitions it was compiled for (more than one cannot be run by ``run``)."""

    module_name: str
    backend: str
    pipeline: str
    device: str
    target: str | None
    debug_options: dict[str, Any]
    compile_seconds: float
    optimized_text: str
    cost: dict[str, float]
    memory: dict[str, int]
    executable: Any = field(repr=False)
    device_handle: Any = field(repr=False)
    source_text: str = field(repr=False)
    hook: Hook | None = field(default=None, repr=False)
    contained: bool = False
    handed_over: bool = False
    partitions: int = 1

    @property
    def runnable(self) -> bool:
        return (self.executable is not None and self.device_handle is not None and self.target is None
                and self.partitions == 1 and self.partitioned_over == 1)

    @property
    def partitioned_over(self) -> int:
        """The devices an optimized module handed over was partitioned for by XLA
        (its ``num_partitions``: per-device shapes, collectives across them); 1
        for any other module (shardings alone compile and run on one device)."""
        if not self.handed_over:
            return 1
        m = _PARTITIONS_RE.search(self.source_text[:65536])
        return int(m.group(1)) if m else 1

    def __reduce__(self):
        """Pickles without the executable and device (they cannot leave this
        process): what crosses from the XLA worker is the optimized text and figures."""
        state = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        state.update(executable=None, device_handle=None, contained=True)
        return _rebuild_result, (state,)

    @cached_property
    def optimized_module(self) -> Module:
        """XLA's optimized module parsed into our IR."""
        return parse(self.optimized_text, source=f"<{self.module_name} optimized by XLA:{self.backend} {self.pipeline}>")

    def fusions(self) -> list[tuple[str, str]]:
        """``(name, kind)`` of each fusion in XLA's optimized entry computation."""
        out = []
        for comp in self.optimized_module.computations:
            for ins in comp:
                if ins.opcode is HloOpcode.FUSION:
                    out.append((ins.name, ins.attribute("kind") or "?"))
        return out


def _rebuild_result(state: dict) -> CompileResult:
    return CompileResult(**state)


def adopt_hook_state(hook: Hook, remote: Hook) -> None:
    """Copies what a hook learnt in the XLA worker (calls, texts seen, the pass
    object's own attributes, and the module it left) onto the caller's hook,
    so that code holding the hook or its pass reads them as after an in-process
    compile."""
    pass_ = hook.pass_
    hook.__dict__.update({k: v for k, v in remote.__dict__.items() if k != "pass_"})
    if type(remote.pass_) is type(pass_) and hasattr(pass_, "__dict__"):
        pass_.__dict__.update(remote.pass_.__dict__)


#: XLA's scheduler sets ``is_scheduled=true``: the module came out of XLA's pipeline
#: (an ``*after_optimizations*`` dump, or ``--dump-optimized``).
_SCHEDULED_RE = re.compile(r"^\s*HloModule\s+[^\n]*\bis_scheduled=true\b")
#: Traces of XLA:GPU's own optimizations (library calls and Triton fusions).
_GPU_OPTIMIZED_RE = re.compile(r'custom_call_target="__cublas|custom_call_target="__cudnn|"kind":"__triton')


_PARTITIONS_RE = re.compile(r"^\s*HloModule\s+[^\n]*\bnum_partitions=(\d+)")


#: The calls around a ``shard_map`` body (Shardy's and GSPMD's spelling): its
#: values have per-device shapes, so the module compiles only over its devices.
_MANUAL_RE = re.compile(r'custom_call_target="(xla\.sdy\.GlobalToLocalShape|SPMDFullToShardShape)"')


def manual_partitions(text: str) -> int:
    """The partitions a module with a ``shard_map`` (per-device shapes inside
    ``xla.sdy.GlobalToLocalShape`` or ``SPMDFullToShardShape`` calls) must be
    compiled over: its ``num_partitions``; 1 for any other module (shardings
    alone compile on one device)."""
    if not _MANUAL_RE.search(text):
        return 1
    m = _PARTITIONS_RE.search(text[:65536])
    return int(m.group(1)) if m else 1


def is_optimized(text: str) -> bool:
    """True for a module XLA has already optimized (scheduled): XLA's pipeline
    cannot run on it again (its layout-changing bitcasts and fusions break the
    passes before layout assignment), so ``compile`` hands it over as written."""
    return _SCHEDULED_RE.search(text[:65536]) is not None


def _leaf_text(shape_text: str, lines: list[str], k: list[int]) -> str:
    """Appends instructions making a zero value of ``shape_text``; returns its name."""
    shape = parse_shape(shape_text)
    k[0] += 1
    name = f"%standin.{k[0]}"
    if shape.is_tuple:
        parts = [_leaf_text(s.to_text(), lines, k) for s in shape.tuple_shapes]
        lines.append(f"  {name} = {shape.to_text()} tuple({', '.join(parts)})")
    elif shape.is_token:
        lines.append(f"  {name} = token[] after-all()")
    else:
        lines.append(f"  {name}.zero = {shape.element_type.value}[] constant(0)")
        lines.append(f"  {name} = {shape.to_text()} broadcast({name}.zero), dimensions={{}}")
    return name


def stand_in(text: str, name: str) -> str:
    """A trivial module with ``text``'s entry signature (parameters unused, outputs
    zeros): what XLA compiles up to the hook where the real module is handed over."""
    params, result = jax_internals.entry_signature(text, name)
    lines: list[str] = []
    for i, p in enumerate(params):
        lines.append(f"  %p.{i} = {p} parameter({i})")
    _leaf_text(result, lines, [0])
    lines[-1] = "  ROOT " + lines[-1].strip()  # the value of the whole result shape is made last
    sig = ", ".join(f"p.{i}: {p}" for i, p in enumerate(params))
    return f"HloModule {name}\n\nENTRY %main ({sig}) -> {result} {{\n" + "\n".join(lines) + "\n}\n"


def _text_and_name(module: Module | str) -> tuple[str, str]:
    if isinstance(module, Module):
        return module.to_text(tuple_sugar=False), module.name  # every XLA version parses plain GTEs
    if isinstance(module, str):
        return module, jax_internals.module_name_of_text(module)
    raise TypeError(f"compile() takes a Module or HLO text, got {type(module).__name__}")


def compile(  # noqa: A001 - the name users expect
    module: Module | str,
    backend: str = "cpu",
    pipeline: str = "stock",
    *,
    flags=None,
    target: str | None = None,
    hook: Hook | tuple | None = None,
    dump_dir: str | None = None,
    contained: bool = False,
    partitions: int = 1,
) -> CompileResult:
    """Compiles ``module`` with XLA.

    ``pipeline``: "stock" (XLA's full pipeline), "replace" (only XLA's generic fusion
    deciders off: ``REPLACE_DISABLED_PASSES``) or "as-written" (every fusion decider
    off: ``AS_WRITTEN_DISABLED_PASSES``).  ``flags``: any XLA debug options, as a dict
    or ``--xla_x=y`` strings; ``xla_disable_hlo_passes`` adds to the as-written list.
    ``target``: a GPU name (``h100``...) to compile XLA:GPU without a GPU (implies
    backend "gpu"; nothing can run).  ``hook``: ``(pass, stage)`` or a ``Hook``, run
    inside XLA's pipeline and cleared afterwards whatever happens.  ``dump_dir``:
    XLA dumps every pass there.  ``partitions``: compile a sharded module with XLA's
    SPMD partitioner over that many CPU devices (one replica; e.g. 8 host devices
    with ``--xla_force_host_platform_device_count=8``).  Raises XlaCompileError with
    XLA's message.

    ``contained``: compile in the XLA worker process (``worker``), where an XLA
    abort raises ``XlaAbortError`` instead of ending this process; the result then
    has no executable here (``CompileResult.contained``), and a hook's pass must be
    importable by name (a ``Pass``, ``PassManager``, module-level function); what the
    hook saw comes back onto ``hook`` (``adopt_hook_state``).

    A module XLA already optimized (``is_scheduled=true``: an ``after_optimizations``
    dump) cannot go through XLA's pipeline again; on CPU it is handed to XLA as
    written at the pre-scheduler hook, after XLA compiled a stand-in with its
    signature (``stand_in``), so only scheduling and code generation run on it
    (``CompileResult.handed_over``; needs jax >= 0.12). A ``StableHloModule`` is
    converted to our IR first.
    """
    text, name = _text_and_name(hlo_of(module))
    if target is not None:
        backend = "gpu"
    bkey = _backend_key(backend)
    parse_flags(flags)  # a malformed flag fails here, before anything starts
    if isinstance(hook, tuple):
        hook = Hook(*hook)
    if target is None and partitions < (n := manual_partitions(text)):
        call = _MANUAL_RE.search(text).group(1)
        raise XlaCompileError(f"a shard_map over {n} devices ({call} calls: per-device shapes inside): XLA "
                              f"compiles the module over all {n} only, and nothing here runs a module over several "
                              f"devices; `hlo compile` compiles it (over {n} host devices), other commands need a "
                              "dump made on one device", module_name=name, backend=bkey, stage="compile")
    if contained and not worker.in_worker():
        res = worker.contained(
            compile, (text, backend, pipeline),
            dict(flags=flags, target=target, hook=hook, dump_dir=os.path.abspath(dump_dir) if dump_dir else None,
                 partitions=partitions),
            phase="compiling", module=name, backend=bkey)
        if hook is not None and res.hook is not None:
            adopt_hook_state(hook, res.hook)
            res = dataclasses.replace(res, hook=hook)
        return res
    opts = parse_flags(flags)
    disabled = [p for p in str(opts.pop("xla_disable_hlo_passes", "") or "").split(",") if p]
    disabled = list(dict.fromkeys([*disabled_passes(bkey, pipeline), *disabled]))
    if disabled:
        opts["xla_disable_hlo_passes"] = ",".join(disabled)
    if dump_dir:
        opts.setdefault("xla_dump_to", str(dump_dir))
        opts.setdefault("xla_dump_hlo_pass_re", ".*")
    if bkey == "gpu" and "xla_gpu_cuda_data_dir" not in opts and jax_internals.cuda_data_dir():
        opts["xla_gpu_cuda_data_dir"] = jax_internals.cuda_data_dir()
    deviceless = bkey == "gpu" and (target is not None or not jax_internals.backend_available("gpu"))
    if deviceless and target is None:
        target = "h100"
    if partitions > 1 and (bkey != "cpu" or deviceless):
        raise ValueError("partitions: SPMD compiles are done on XLA:CPU (host devices) only")

    hooks = [hook] if hook is not None else []
    compile_text = text
    substitute = None
    handed_over = is_optimized(text)
    if handed_over:
        compile_text, substitute = _hand_over(text, name, bkey)
        hooks.insert(0, substitute)
    elif bkey == "gpu" and _FUSION_RE.search(text):
        # XLA:GPU is a PJRT plugin fed portable StableHLO, where mhlo.fusion does not
        # legalize.  Send a stand-in with each fusion turned into a call (same
        # semantics), and hand XLA the module as written, fusions and all, at its
        # first hook, which on GPU runs early (simplification-2, before layout
        # assignment and fusion).  Without the hook, "stock" compiles the stand-in
        # (XLA inlines the calls and fuses as it likes); "as-written" cannot be done.
        compile_text = _FUSION_RE.sub(r" call(\1), to_apply=", text)
        if jax_internals.hook_supported():
            substitute = _Substitute(jax_internals.proto_from_text(text, name))
            hooks.insert(0, substitute)
        elif pipeline != "stock":
            raise XlaCompileError(f"'{pipeline}' on GPU for a module with fusion instructions needs the pipeline "
                                  f"hook (jax.extend.xla, jax >= 0.12); this is jax {jax_internals.jax_versions()['jax']}",
                                  module_name=name, backend=bkey, stage="hook")

    def do_compile():
        if deviceless:
            cfg = target_config(target)
            t0 = time.perf_counter()
            exe, dev = jax_internals.compile_deviceless_gpu(compile_text, cfg, opts, module_name=name)
            return exe, None, device_description(cfg), time.perf_counter() - t0
        client = jax_internals.get_client(bkey)
        devices = client.local_devices()[:partitions]
        if len(devices) < partitions:
            raise ValueError(f"{partitions} partitions need {partitions} {bkey} devices; jax sees {len(devices)} "
                             "(on CPU: XLA_FLAGS=--xla_force_host_platform_device_count=N)")
        mlir_bytes = jax_internals.hlo_to_stablehlo_bytes(compile_text, name)
        t0 = time.perf_counter()
        exe = jax_internals.compile_stablehlo(client, mlir_bytes, devices, opts,
                                              shardy=jax_internals.uses_shardy(compile_text))
        return exe, devices[0], jax_internals.device_name(devices[0]), time.perf_counter() - t0

    worker.note("compiling", name)
    try:
        with contextlib.ExitStack() as stack:
            for h in hooks:
                stack.enter_context(jax_internals.registered_hook(h.callback, name=f"hlo-pass-lab-hook-{next(_hook_ids)}",
                                                        stage=h.stage, platform=bkey))
            exe, dev, dev_name, seconds = do_compile()
    except XlaCompileError as e:
        if e.module_name == "?":
            raise XlaCompileError(str(e.xla_message).splitlines()[0], module_name=name, backend=bkey, stage=e.stage,
                                  xla_message=e.xla_message) from None
        raise
    except Exception as e:  # noqa: BLE001 - jaxlib raises XlaRuntimeError / JaxRuntimeError / ValueError
        if hook is not None and hook.error is not None:
            raise XlaCompileError(f"the hooked pass raised {type(hook.error).__name__}: {hook.error}",
                                  module_name=name, backend=bkey, stage="hook") from hook.error
        raise XlaCompileError(jax_internals._first_line(e) + _hint(str(e)), module_name=name, backend=bkey, stage="compile",
                              xla_message=str(e)) from None
    if hook is not None and hook.error is not None:
        raise XlaCompileError(f"the hooked pass raised {type(hook.error).__name__}: {hook.error}",
                              module_name=name, backend=bkey, stage="hook") from hook.error
    if substitute is not None and not substitute.calls:
        what = "XLA's optimized module" if handed_over else "the module's own fusions"
        raise XlaCompileError(f"XLA:{bkey.upper()} never called the pipeline hook, so {what} could not be "
                              "handed over (this needs jax.extend.xla, jax >= 0.12)",
                              module_name=name, backend=bkey, stage="hook")
    opt_text = jax_internals.optimized_text(exe)
    cost = jax_internals.cost_analysis(exe) if not deviceless else {}
    return CompileResult(
        module_name=name, backend=bkey, pipeline=pipeline, device=dev_name, target=target if deviceless else None,
        debug_options=opts, compile_seconds=seconds, optimized_text=opt_text, cost=cost,
        memory=jax_internals.memory_stats(exe), executable=exe, device_handle=dev, source_text=text, hook=hook,
        handed_over=handed_over, partitions=partitions)


def _hand_over(text: str, name: str, backend: str) -> tuple[str, _Substitute]:
    """The stand-in to compile and the hook that swaps in XLA's optimized module."""
    if backend != "cpu":
        raise XlaCompileError("this module was already optimized by XLA (is_scheduled=true): XLA's pipeline cannot "
                              "run on it again, and handing it over as written is done for XLA:CPU only; compile "
                              "its before_optimizations dump for GPU instead",
                              module_name=name, backend=backend, stage="compile")
    if _GPU_OPTIMIZED_RE.search(text):
        raise XlaCompileError("this module was optimized by XLA:GPU (cuBLAS/cuDNN calls or Triton fusions), which "
                              "XLA:CPU cannot run, and an optimized module is handed over to XLA:CPU only; compile "
                              "its before_optimizations dump instead", module_name=name, backend=backend,
                              stage="compile")
    if not jax_internals.hook_supported():
        raise XlaCompileError("this module was already optimized by XLA (is_scheduled=true): XLA's pipeline cannot "
                              "run on it again, and handing it over as written needs the pipeline hook "
                              f"(jax.extend.xla, jax >= 0.12; this is jax {jax_internals.jax_versions()['jax']}); compile its "
                              "before_optimizations dump instead", module_name=name, backend=backend, stage="hook")
    return stand_in(text, name), _Substitute(jax_internals.proto_from_text(text, name), stage=HookStage.PRE_SCHEDULER)


def _hint(message: str) -> str:
    """What to do about XLA errors whose cause is not in their words."""
    if "layout minor_to_major field contains" in message:
        return (" (the module has been through XLA's layout assignment, e.g. a per-pass dump after it, and XLA's "
                "pipeline cannot run on it again: use its before_optimizations or after_optimizations dump)")
    return ""
