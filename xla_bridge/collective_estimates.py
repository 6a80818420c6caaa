"""XLA:GPU's own estimate of each collective's time, read from XLA while it
schedules a sharded module for deviceless GPUs (no GPU needed): the VLOG lines of
xla/service/gpu/model/sol_latency_estimator.cc and analytical_latency_estimator.cc.

How it reads them, options and limits: docs/xla_collective_estimates.md#how-it-works
"""

from __future__ import annotations

import atexit
import contextlib
import os
import re
import tempfile
import threading
from dataclasses import dataclass, field
from typing import Any, Iterator

from hlo_tools.errors import HloError
from hlo_tools.ir import Instruction, Module
from hlo_tools.opcode import HloOpcode
from hlo_tools.parser import parse

from . import worker
from .errors import XlaAbortError

#: estimator name -> the XLA debug options that select it.
ESTIMATORS: dict[str, dict[str, Any]] = {
    "sol": {},  # XLA's default on Hopper/Blackwell
    "analytical": {"xla_gpu_enable_analytical_latency_estimator": True},
}

#: The log sources read (file base names for TF_CPP_VMODULE, with their levels).
_VMODULE = "sol_latency_estimator=10,analytical_latency_estimator=10,gpu_hlo_schedule=1"
_LOG_ENV = {"TF_CPP_VMODULE": _VMODULE, "TF_CPP_MIN_LOG_LEVEL": "0"}

_COLLECTIVE_KINDS = {
    HloOpcode.ALL_REDUCE: "all-reduce", HloOpcode.ALL_REDUCE_START: "all-reduce",
    HloOpcode.ALL_GATHER: "all-gather", HloOpcode.ALL_GATHER_START: "all-gather",
    HloOpcode.REDUCE_SCATTER: "reduce-scatter", HloOpcode.ALL_TO_ALL: "all-to-all",
    HloOpcode.COLLECTIVE_PERMUTE: "collective-permute", HloOpcode.COLLECTIVE_PERMUTE_START: "collective-permute",
    HloOpcode.COLLECTIVE_BROADCAST: "collective-broadcast",
}
_RAGGED = getattr(HloOpcode, "RAGGED_ALL_TO_ALL", None)
if _RAGGED is not None:
    _COLLECTIVE_KINDS[_RAGGED] = "ragged-all-to-all"
_STARTS = {HloOpcode.ALL_REDUCE_START, HloOpcode.ALL_GATHER_START, HloOpcode.COLLECTIVE_PERMUTE_START,
           HloOpcode.ASYNC_START}
_DONES = {HloOpcode.ALL_REDUCE_DONE, HloOpcode.ALL_GATHER_DONE, HloOpcode.COLLECTIVE_PERMUTE_DONE,
          HloOpcode.ASYNC_DONE}


class EstimateLogError(HloError):
    """XLA's scheduler log had no estimator lines for the module (wrong module name,
    an XLA whose log lines changed, or a worker started without the log settings)."""


@dataclass(frozen=True)
class CollectiveEstimate:
    """One collective of the scheduled module and XLA's estimate for it."""

    name: str  # instruction name in the scheduled module (the start, or the sync op)
    scheduling_name: str  # the name XLA's scheduler (and its log) used
    kind: str  # all-reduce, all-gather, reduce-scatter, all-to-all, collective-permute, ...
    opcode: str  # as printed: all-gather-start, reduce-scatter-start, fusion-start, all-gather, ...
    asynchronous: bool  # a start/done pair in the scheduled module (False: XLA made it synchronous)
    triton: bool  # XLA's Triton collective kernel (``__triton_collective`` fusion), not NCCL
    result_bytes: int  # per device: what the collective produces (the done's shape)
    operand_bytes: int  # per device: what it reads
    groups: str  # replica_groups or source_target_pairs, as printed
    seconds: float | None  # XLA's estimate; None when XLA fell back (see ``fallback``)
    fallback: str = ""  # why XLA had no estimate (its status message), else ""


@dataclass
class XlaCollectiveEstimates:
    """What ``xla_collective_estimates`` read from one XLA compile."""

    module_name: str
    target: str
    topology: str
    estimator: str
    device: str
    options: dict[str, Any]
    scheduled_text: str  # the module XLA scheduled (names of ``seconds`` are its instructions)
    collectives: list[CollectiveEstimate] = field(default_factory=list)
    conflicts: dict[str, list[float]] = field(default_factory=dict)  # scheduling name -> differing values
    unmatched: dict[str, float] = field(default_factory=dict)  # logged names not in the scheduled module -> us
    log_lines: int = 0

    @property
    def seconds(self) -> dict[str, float]:
        """``{instruction name: XLA's estimated seconds}`` for every collective XLA estimated."""
        return {c.name: c.seconds for c in self.collectives if c.seconds is not None}

    def by_kind(self) -> dict[str, dict[str, float]]:
        """Per kind: count, summed result bytes and summed estimated seconds."""
        out: dict[str, dict[str, float]] = {}
        for c in self.collectives:
            row = out.setdefault(c.kind, {"count": 0, "result_bytes": 0, "seconds": 0.0, "estimated": 0})
            row["count"] += 1
            row["result_bytes"] += c.result_bytes
            if c.seconds is not None:
                row["seconds"] += c.seconds
                row["estimated"] += 1
        return out


# -- the log -------------------------------------------------------------------------

_LINE_RE = re.compile(r"^[IWEF]\d{4} [\d:.]+\s+(\d+) ([\w.]+):\d+\] (.*)$")
_FINGERPRINT_RE = re.compile(r"Fingerprint before LHS for module (.+)\((\d+)\) = ")
_SOL_RE = re.compile(r"GetLatencyBetween: Computed collective time for (\S+): (\S+) us$")
_SOL_FAILED_RE = re.compile(r"Failed to compute collective time: (.*) for (\S+)$")
_ANALYTICAL_RE = re.compile(r"Analytical estimator calculated latency between (\S+) and (\S+) to be: (\S+) us\.?$")


@dataclass
class ParsedLog:
    """Per scheduled module name: the microseconds each collective got (every value
    seen, in order; the scheduler asks more than once) and XLA's failures."""

    micros: dict[str, dict[str, list[float]]] = field(default_factory=dict)
    failures: dict[str, dict[str, str]] = field(default_factory=dict)
    lines: int = 0


def parse_estimator_log(text: str) -> ParsedLog:
    """Reads the estimator lines of an XLA log (see the module docstring for which)."""
    out = ParsedLog()
    module_of_thread: dict[str, str] = {}
    for line in text.splitlines():
        m = _LINE_RE.match(line)
        if m is None:
            continue
        thread, source, message = m.groups()
        if source == "gpu_hlo_schedule.cc":
            f = _FINGERPRINT_RE.search(message)
            if f:
                module_of_thread[thread] = f.group(1)
            continue
        module = module_of_thread.get(thread, "?")
        value = name = None
        if source == "sol_latency_estimator.cc":
            if s := _SOL_RE.search(message):
                name, value = s.group(1), s.group(2)
            elif s := _SOL_FAILED_RE.search(message):
                out.failures.setdefault(module, {})[s.group(2)] = s.group(1)
                out.lines += 1
        elif source == "analytical_latency_estimator.cc":
            if a := _ANALYTICAL_RE.search(message):
                name, value = a.group(1), a.group(3)
        if name is None:
            continue
        try:
            us = float(value)
        except ValueError:
            continue
        out.micros.setdefault(module, {}).setdefault(name, []).append(us)
        out.lines += 1
    return out


# -- the compile, in a worker that logs ----------------------------------------------------

_worker: worker.Worker | None = None
_worker_lock = threading.Lock()


def _logging_worker() -> worker.Worker:
    """A worker of its own: the CUDA plugin reads TF_CPP_VMODULE only when the
    process starts, and the shared worker must not log this much."""
    global _worker
    with _worker_lock:
        if _worker is None or _worker.owner != os.getpid():
            _worker = worker.Worker()
            atexit.register(_worker.close)
        return _worker


@contextlib.contextmanager
def _environment(values: dict[str, str]) -> Iterator[None]:
    """``values`` in os.environ for the block (the worker, if it starts, inherits them)."""
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _options_flag(options: dict[str, Any]) -> str:
    for k, v in options.items():
        if not re.fullmatch(r"[a-z_]+", str(k)) or not re.fullmatch(r"[0-9.]+", str(v)):
            raise ValueError(f"latency estimator option {k}={v}: expected a lower-case name and a number")
    return "--xla_gpu_analytical_latency_estimator_options=" + ",".join(f"{k}={v}" for k, v in options.items())


def compile_logging(text: str, target: str, topology: str, partitions: int, flags: dict[str, Any],
                    log_path: str) -> tuple[str, str]:
    """In the worker: compiles ``text`` for ``partitions`` deviceless GPUs with XLA's
    stderr (its log) sent to ``log_path``; returns (scheduled text, device name)."""
    from . import jax_internals  # noqa: PLC0415 - in the worker only: xla imports jax
    from .compiler import parse_flags  # noqa: PLC0415 - one spelling of flags, imported with xla
    from .targets import device_description, target_config  # noqa: PLC0415 - reads the plugin

    name = jax_internals.module_name_of_text(text)
    cfg = target_config(target)
    opts = parse_flags(flags)
    if "xla_gpu_cuda_data_dir" not in opts and jax_internals.cuda_data_dir():
        opts["xla_gpu_cuda_data_dir"] = jax_internals.cuda_data_dir()
    worker.note("compiling", name)
    saved = os.dup(2)
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.dup2(fd, 2)
        exe, _ = jax_internals.compile_deviceless_gpu(text, cfg, opts, module_name=name, topology=topology,
                                            partitions=partitions)
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(fd)
    return jax_internals.optimized_text(exe), device_description(cfg)


def _topology_devices(topology: str) -> int:
    if not re.fullmatch(r"\d+(x\d+)*", topology):
        raise ValueError(f"topology {topology!r}: expected e.g. '1x1x8' (slices x hosts x GPUs per host)")
    n = 1
    for part in topology.split("x"):
        n *= int(part)
    return n


def xla_collective_estimates(module: Module | str, target: str = "h100", topology: str = "1x1x8", *,
                             estimator: str = "sol", options: dict[str, Any] | None = None,
                             flags: dict[str, Any] | None = None) -> XlaCollectiveEstimates:
    """XLA's own estimate of every collective in ``module`` (HLO text or a Module,
    sharded: e.g. a ``before_optimizations`` dump) compiled for the GPUs of
    ``topology`` (all of them, one SPMD partition each) of ``target`` without a GPU.
    ``estimator``: "sol" (XLA's default) or "analytical"; ``options``: XLA's latency
    estimator options (module docstring); ``flags``: more XLA debug options.
    Raises XlaCompileError / XlaAbortError (contained) with XLA's message."""
    if estimator not in ESTIMATORS:
        raise ValueError(f"unknown estimator {estimator!r}: use {' or '.join(ESTIMATORS)}")
    text = module.to_text(tuple_sugar=False) if isinstance(module, Module) else module
    name = module.name if isinstance(module, Module) else _module_name(text)
    partitions = _topology_devices(topology)
    options = dict(options or {})
    env = dict(_LOG_ENV)
    if options:
        env["XLA_FLAGS"] = " ".join(filter(None, [os.environ.get("XLA_FLAGS", ""), _options_flag(options)]))
    all_flags = {**ESTIMATORS[estimator], **(flags or {})}
    fd, log_path = tempfile.mkstemp(prefix="hlo-xla-estimates-", suffix=".log")
    os.close(fd)
    try:
        args = (text, target, topology, partitions, all_flags, log_path)
        if worker.in_worker():
            if os.environ.get("TF_CPP_VMODULE") != _VMODULE:
                raise EstimateLogError("xla_collective_estimates runs its own logging worker; call it from the "
                                       "main process, not from inside the XLA worker")
            scheduled, device = compile_logging(*args)
        else:
            with _environment(env):
                try:
                    scheduled, device = _logging_worker().call(compile_logging, args, {}, phase="compiling",
                                                               module=name, backend="gpu")
                except XlaAbortError as e:
                    with open(log_path, encoding="utf-8", errors="replace") as f:
                        message = worker.abort_message(f.read(), e.exit_status)
                    raise XlaAbortError(message, phase=e.phase, module=e.module, backend="gpu",
                                        exit_status=e.exit_status) from None
        with open(log_path, encoding="utf-8", errors="replace") as f:
            log = parse_estimator_log(f.read())
    finally:
        with contextlib.suppress(OSError):
            os.unlink(log_path)
    return _estimates(parse(scheduled, source=f"<{name} scheduled for {target}>"), scheduled, log,
                      target=target, topology=topology, estimator=estimator, device=device, options=options)


_MODULE_RE = re.compile(r"^\s*HloModule\s+([^\s,]+)", re.M)


def _module_name(text: str) -> str:
    m = _MODULE_RE.search(text)
    return m.group(1) if m else "?"


# -- the scheduled module's collectives ----------------------------------------------------


def _wrapped(inst: Instruction) -> tuple[str, Instruction] | None:
    """(kind, the instruction holding its groups) of the collective an async-start
    wraps: printed as ``reduce-scatter-start`` (the start carries the attributes),
    or a ``fusion-start`` whose fusion's root is the collective (XLA's Triton kernels)."""
    wrapped = inst.async_wrapped_opcode
    if wrapped in _COLLECTIVE_KINDS:
        return _COLLECTIVE_KINDS[wrapped], inst
    for comp in inst.called_computations:
        root = comp.root
        if root is not None and root.opcode in _COLLECTIVE_KINDS:
            return _COLLECTIVE_KINDS[root.opcode], root
    return None


def _groups(inst: Instruction) -> str:
    attrs = inst.attributes
    for key in ("replica_groups", "source_target_pairs"):
        if key in attrs:
            return str(attrs[key])
    return ""


def collectives_of(module: Module) -> list[tuple[Instruction, str, Instruction, Instruction | None]]:
    """(the op the scheduler priced, its kind, the instruction with its groups, its done) for each
    collective of a scheduled module, in computation order; the collectives inside
    async wrappers and fusions are their start's, not counted again."""
    wrapped_comps = set()
    for comp in module.computations:
        for inst in comp.instructions:
            if inst.opcode in (HloOpcode.ASYNC_START, HloOpcode.FUSION):
                wrapped_comps.update(id(c) for c in inst.called_computations)
                for c in inst.called_computations:
                    for i2 in c.instructions:
                        if i2.opcode == HloOpcode.FUSION:
                            wrapped_comps.update(id(cc) for cc in i2.called_computations)
    out = []
    for comp in module.computations:
        if id(comp) in wrapped_comps:
            continue
        for inst in comp.instructions:
            if inst.opcode in _STARTS:
                if inst.opcode == HloOpcode.ASYNC_START:
                    found = _wrapped(inst)
                else:
                    found = _COLLECTIVE_KINDS[inst.opcode], inst
                if found is None:
                    continue
                done = next((u for u in inst.users if u.opcode in _DONES), None)
                out.append((inst, found[0], found[1], done))
            elif inst.opcode in _COLLECTIVE_KINDS:
                out.append((inst, _COLLECTIVE_KINDS[inst.opcode], inst, None))
    return out


def _estimates(module: Module, scheduled: str, log: ParsedLog, **info: Any) -> XlaCollectiveEstimates:
    micros = log.micros.get(module.name, {})
    failures = log.failures.get(module.name, {})
    if not micros and not failures:
        seen = ", ".join(sorted(log.micros)) or "none"
        raise EstimateLogError(f"XLA's scheduler log has no collective estimates for module {module.name!r} "
                               f"(modules with estimates: {seen}); is TF_CPP_VMODULE honoured by this XLA?")
    result = XlaCollectiveEstimates(module_name=module.name, scheduled_text=scheduled, log_lines=log.lines, **info)
    for op, kind, coll, done in collectives_of(module):
        sname = (op.metadata or {}).get("scheduling_name", op.name)
        values = micros.get(sname) or micros.get(op.name) or []
        if len(set(values)) > 1:
            result.conflicts[sname] = values
        triton = op.opcode == HloOpcode.ASYNC_START and "__triton_collective" in str(op.backend_config or "")
        result.collectives.append(CollectiveEstimate(
            name=op.name, scheduling_name=sname, kind=kind, opcode=op.opcode_text,
            asynchronous=done is not None, triton=triton,
            result_bytes=(done or op).shape.byte_size,
            operand_bytes=sum(o.shape.byte_size for o in op.operands),
            groups=_groups(coll) or _groups(op),
            seconds=values[-1] * 1e-6 if values else None,
            fallback="" if values else failures.get(sname, "no estimate in XLA's log")))
    joined = {c.scheduling_name for c in result.collectives} | {c.name for c in result.collectives}
    result.unmatched = {n: v[-1] for n, v in micros.items() if n not in joined}
    return result
