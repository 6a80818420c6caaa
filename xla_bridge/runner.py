"""Run compiled modules and compare their outputs.

    cmp = compare(original, rewritten, pipeline_b="as-written")
    cmp.verdict      # "exact", "close" or "mismatch"
    print(cmp)       # per output: max abs / rel error, where, tolerance
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Sequence

import numpy as np

from hlo_tools.ir import Module
from hlo_tools.parser import parse
from hlo_tools.precision import computed_through

from . import jax_internals, worker
from hlo_analysis.units import finite, html_table
from .errors import NoDeviceError, XlaCompileError
from .compiler import CompileResult, compile, parse_flags
from .inputs import make_inputs, numpy_dtype
from .mlir_rewrite import hlo_of

#: (rtol, atol) per element type: |a - b| <= atol * max(1, max|b|) + rtol * |b|.
#: Loose enough for a different fusion/accumulation order, tight enough that a
#: wrong rewrite (swapped operands, a dropped term) fails by orders of magnitude.
TOLERANCES: dict[str, tuple[float, float]] = {
    "float64": (1e-9, 1e-12),
    "float32": (1e-4, 1e-5),
    "complex64": (1e-4, 1e-5),
    "complex128": (1e-9, 1e-12),
    "float16": (2e-3, 1e-3),
    "bfloat16": (2e-2, 1e-2),
    "float8_e4m3fn": (1.3e-1, 6e-2),
    "float8_e4m3": (1.3e-1, 6e-2),
    "float8_e4m3fnuz": (1.3e-1, 6e-2),
    "float8_e4m3b11fnuz": (1.3e-1, 6e-2),
    "float8_e3m4": (7e-2, 3e-2),
    "float8_e5m2": (2.5e-1, 1.3e-1),
    "float8_e5m2fnuz": (2.5e-1, 1.3e-1),
}


def tolerance(dtype: np.dtype) -> tuple[float, float]:
    """(rtol, atol) for a dtype; (0, 0) (exact) for integers and pred."""
    return TOLERANCES.get(np.dtype(dtype).name, (0.0, 0.0) if np.dtype(dtype).kind in "biu" else (1e-2, 1e-2))


def loosest(dtype: np.dtype, through: Iterable[str] = ()) -> str:
    """Of ``dtype`` (a float output's) and the float types its value was computed
    through (``hlo_tools.precision.computed_through``), the one whose tolerance
    is loosest: a float32 output of bf16 arithmetic is compared at bf16's.
    Integer outputs stay exact."""
    name = np.dtype(dtype).name
    if np.dtype(dtype).kind not in "fc":
        return name
    return max([name, *(t for t in through if t in TOLERANCES)], key=lambda t: TOLERANCES.get(t, (0.0, 0.0)))


def output_precisions(module: Module) -> list[list[str]]:
    """Per output of ``module``, the numpy names of the float types it is computed
    through: what ``compare_outputs(through=...)`` takes."""
    return [sorted(n for n in map(_numpy_name, types) if n) for types in computed_through(module)]


def _numpy_name(t) -> str:
    try:
        return numpy_dtype(t).name
    except (TypeError, AttributeError, ImportError):  # a type this ml_dtypes lacks: no tolerance to take from it
        return ""


def run(compiled, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """Runs a ``CompileResult`` on host arrays; returns host arrays, one per output."""
    if not compiled.runnable:
        raise XlaCompileError(_not_runnable(compiled), module_name=compiled.module_name, backend=compiled.backend,
                              stage="run")
    worker.note("running", compiled.module_name)
    try:
        bufs = [jax_internals.device_put(x, compiled.device_handle) for x in inputs]
        outs = jax_internals.executor(compiled.executable)(bufs)
        return [np.asarray(o) for o in outs]
    except Exception as e:  # noqa: BLE001 - jaxlib's runtime errors
        raise XlaCompileError(jax_internals._first_line(e), module_name=compiled.module_name, backend=compiled.backend,
                              stage="run", xla_message=str(e)) from None


def _not_runnable(compiled) -> str:
    if (n := getattr(compiled, "partitioned_over", 1)) > 1:
        return (f"XLA partitioned this module over {n} devices (num_partitions={n}: per-device shapes, collectives "
                "across them) and nothing here runs a module over several devices; run the module before "
                "optimizations (its shardings alone run on one device)")
    if getattr(compiled, "partitions", 1) > 1:
        return f"compiled for {compiled.partitions} SPMD partitions: run_module and compare run one device"
    if getattr(compiled, "contained", False) and compiled.target is None:
        return ("compiled in the XLA worker (contained=True), where its executable stays: use run_module, compare "
                "or benchmark with contained=True to run it there")
    return f"compiled for {compiled.target or compiled.backend} without a device: nothing can run"


def require_device(backend: str) -> None:
    """Raises at once when nothing can run on ``backend`` here (no GPU), rather
    than after a long compile; ``compile`` alone still works without one."""
    if backend != "cpu" and not jax_internals.backend_available(backend):
        raise NoDeviceError(backend)


def run_module(module, inputs: list[np.ndarray] | None = None, *, backend: str = "cpu", pipeline: str = "stock",
               flags=None, seed: int = 0, contained: bool = False) -> list[np.ndarray]:
    """Compiles ``module`` (a Module or HLO text) and runs it on ``inputs`` (default
    ``make_inputs(module, seed)``); returns host arrays.  ``contained``: both in the
    XLA worker, where an abort raises ``XlaAbortError`` instead of ending this process."""
    if contained and not worker.in_worker():
        parse_flags(flags)
        return worker.contained(run_module, (module, inputs),
                                    dict(backend=backend, pipeline=pipeline, flags=flags, seed=seed),
                                    phase="compiling", module=_name_of(module), backend=backend)
    require_device(backend)
    m = _module_of(module)
    if inputs is None:
        inputs = make_inputs(m, seed=seed)[0]
    return run(compile(module, backend, pipeline, flags=flags), inputs)


def _name_of(x) -> str:
    if isinstance(x, Module):
        return x.name
    if isinstance(x, str):
        return jax_internals.module_name_of_text(x)
    return getattr(x, "module_name", "?")


@dataclass(frozen=True)
class OutputDiff:
    """How one output of B differs from the same output of A."""

    index: int
    shape: tuple[int, ...]
    dtype: str
    exact: bool
    ok: bool
    max_abs: float
    max_rel: float
    mismatches: int          # elements outside tolerance
    size: int
    worst: tuple[int, ...]   # where |a - b| is largest
    expected: float          # A at ``worst``
    actual: float            # B at ``worst``
    rtol: float
    atol: float
    note: str = ""
    #: the type whose tolerance applied, when not the output's own (computed through it)
    tolerance_of: str = ""
    #: elements that are NaN or infinite in A (equal only where B holds the same at the same place)
    non_finite: int = 0

    def __str__(self) -> str:
        head = f"output {self.index} {self.dtype}{list(self.shape)}: "
        if self.note:
            return head + self.note
        nf = f" ({self.non_finite} of {self.size} NaN/inf in both, at the same places)" if self.non_finite else ""
        if self.exact:
            return head + "bitwise equal" + nf
        status = "within tolerance" if self.ok else f"MISMATCH in {self.mismatches}/{self.size} elements"
        basis = f", {self.tolerance_of}'s: computed through {self.tolerance_of}" if self.tolerance_of else ""
        return (head + f"{status}{nf}; max abs err {self.max_abs:.3g}, max rel err {self.max_rel:.3g} at {list(self.worst)} "
                f"(A {self.expected:.6g}, B {self.actual:.6g}; rtol {self.rtol:g}, atol {self.atol:g}{basis})")


@dataclass(frozen=True)
class Comparison:
    """The verdict of running A and B on the same inputs: ``exact`` (bitwise
    equal), ``close`` (within tolerance) or ``mismatch``."""

    verdict: str
    outputs: tuple[OutputDiff, ...] = ()
    message: str = ""
    names: tuple[str, str] = ("A", "B")
    inputs: list = field(default_factory=list, repr=False, compare=False)

    @property
    def ok(self) -> bool:
        return self.verdict in ("exact", "close")

    @property
    def failing(self) -> list[OutputDiff]:
        return [o for o in self.outputs if not o.ok]

    @property
    def first_difference(self) -> str:
        """The first output outside tolerance (or why none could be compared), in words."""
        return str(self.failing[0]).strip() if self.failing else self.message

    def __str__(self) -> str:
        lines = [f"{self.names[0]} vs {self.names[1]}: {self.verdict}" + (f" ({self.message})" if self.message else "")]
        lines += ["  " + str(o) for o in self.outputs]
        return "\n".join(lines)

    def as_dict(self) -> dict:
        """The comparison as JSON-ready data (``hlo compare --json``); no inputs."""
        return finite({"a": self.names[0], "b": self.names[1], "verdict": self.verdict, "ok": self.ok,
                       "message": self.message,
                       "outputs": [{"index": o.index, "shape": list(o.shape), "dtype": o.dtype, "exact": o.exact,
                                    "ok": o.ok, "max_abs": o.max_abs, "max_rel": o.max_rel,
                                    "mismatches": o.mismatches, "size": o.size, "worst": list(o.worst),
                                    "expected": o.expected, "actual": o.actual, "rtol": o.rtol, "atol": o.atol,
                                    "note": o.note, "tolerance_of": o.tolerance_of, "non_finite": o.non_finite}
                                   for o in self.outputs]})

    def _repr_html_(self) -> str:
        rows = [(o.index, f"{o.dtype}{list(o.shape)}", "bitwise equal" if o.exact else "ok" if o.ok else
                 f"MISMATCH {o.mismatches}/{o.size}", f"{o.max_abs:.3g}", f"{o.max_rel:.3g}", o.note)
                for o in self.outputs]
        title = f"{self.names[0]} vs {self.names[1]}: {self.verdict}"
        return html_table(title, ("output", "shape", "status", "max abs err", "max rel err", "note"), rows,
                          [self.message] if self.message else [])


def _as_float(x: np.ndarray) -> np.ndarray:
    if x.dtype.kind == "c":
        return x.astype(np.complex128)
    if x.dtype.kind == "b":
        return x.astype(np.int64)
    return x.astype(np.float64)  # ints too: errors are reported as floats


def diff_output(index: int, a: np.ndarray, b: np.ndarray, rtol: float | None = None, atol: float | None = None,
                through: Iterable[str] = ()) -> OutputDiff:
    """Compares output ``b`` with the reference ``a``, at the tolerance of the
    loosest float type among ``a``'s and ``through`` (the types the output was
    computed through) unless ``rtol``/``atol`` are given."""
    a, b = np.asarray(a), np.asarray(b)
    basis = loosest(a.dtype, through)
    r0, a0 = TOLERANCES[basis] if basis in TOLERANCES else tolerance(a.dtype)
    rtol = r0 if rtol is None else rtol
    atol = a0 if atol is None else atol
    base = dict(index=index, shape=tuple(a.shape), dtype=a.dtype.name, rtol=rtol, atol=atol,
                tolerance_of=basis if basis != a.dtype.name and (r0, a0) == (rtol, atol) else "")
    if a.shape != b.shape or a.dtype != b.dtype:
        return OutputDiff(**base, exact=False, ok=False, max_abs=float("inf"), max_rel=float("inf"), mismatches=a.size,
                          size=a.size, worst=(), expected=float("nan"), actual=float("nan"),
                          note=f"MISMATCH: A is {a.dtype.name}{list(a.shape)}, B is {b.dtype.name}{list(b.shape)}")
    if a.size == 0:
        return OutputDiff(**base, exact=True, ok=True, max_abs=0.0, max_rel=0.0, mismatches=0, size=0, worst=(),
                          expected=0.0, actual=0.0)
    fa, fb = _as_float(a), _as_float(b)
    exact = bool(np.array_equal(fa, fb, equal_nan=fa.dtype.kind in "fc"))
    both_nan = np.isnan(fa) & np.isnan(fb) if fa.dtype.kind in "fc" else np.zeros(a.shape, bool)
    same_inf = (fa == fb)  # equal infinities (and equal finite values)
    err = np.where(both_nan | same_inf, 0.0, np.abs(fa - fb))
    err = np.where(np.isnan(err), np.inf, err)  # NaN on one side only
    mag = np.abs(fa)
    mag = np.where(np.isfinite(mag), mag, 0.0)  # a NaN/inf reference allows no slack
    finite_mag = mag
    scale = max(1.0, float(finite_mag.max()) if finite_mag.size else 1.0)
    bad = err > atol * scale + rtol * mag
    worst = np.unravel_index(int(np.argmax(err)), a.shape) if a.ndim else ()
    max_abs = float(err.max())
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = np.where(err == 0, 0.0, err / np.maximum(mag, np.finfo(np.float64).tiny))
    max_rel = float(rel.max())

    def scalar(x):
        v = x[worst] if a.ndim else x[()]
        return float(abs(v)) if np.iscomplexobj(v) else float(v)

    n_bad = int(bad.sum())
    base["non_finite"] = int((~np.isfinite(fa)).sum()) if fa.dtype.kind in "fc" else 0
    return OutputDiff(**base, exact=exact, ok=exact or n_bad == 0, max_abs=max_abs, max_rel=max_rel, mismatches=n_bad,
                      size=int(a.size), worst=tuple(int(i) for i in worst), expected=scalar(fa), actual=scalar(fb))


def compare_outputs(a: list[np.ndarray], b: list[np.ndarray], *, rtol: float | None = None, atol: float | None = None,
                    names: tuple[str, str] = ("A", "B"), through: Sequence[Iterable[str]] | None = None) -> Comparison:
    """Compares two runs' outputs, A being the reference.  ``through``: per output,
    the float types it was computed through (``output_precisions`` of A's module);
    each output is compared at the loosest of them and its own."""
    if len(a) != len(b):
        return Comparison("mismatch", (), f"{names[0]} has {len(a)} outputs, {names[1]} has {len(b)}", names)
    if through is None or len(through) != len(a):
        through = [()] * len(a)
    diffs = tuple(diff_output(i, x, y, rtol, atol, t) for i, (x, y, t) in enumerate(zip(a, b, through)))
    if all(d.exact for d in diffs):
        verdict = "exact"
    elif all(d.ok for d in diffs):
        verdict = "close"
    else:
        verdict = "mismatch"
    return Comparison(verdict, diffs, "", names)


def _compiled(x, backend: str, pipeline: str, flags, target, hook=None):
    if isinstance(x, CompileResult):
        if hook is not None:
            raise TypeError("a hook applies to a module being compiled, not to a CompileResult")
        return x
    return compile(x, backend, pipeline, flags=flags, target=target, hook=hook)


def _module_of(x) -> Module:
    if isinstance(x, Module):
        return x
    if isinstance(x, CompileResult):
        return parse(x.source_text, source=f"<{x.module_name}>")
    return parse(x)


def entry_parameter_shapes(m: Module) -> list[str]:
    """The entry's parameter shapes without layouts: what inputs two modules must share to run on the same ones."""
    return [p.shape.without_layout().to_text() for p in m.entry.parameters]


def labels(a_name: str, b_name: str, pipeline_a: str, pipeline_b: str) -> tuple[str, str]:
    """How A and B are named in verdicts and errors (by pipeline when the names agree)."""
    if a_name != b_name:
        return a_name, b_name
    if pipeline_a == pipeline_b:
        return f"{a_name} (A)", f"{b_name} (B)"
    return f"{a_name} ({pipeline_a})", f"{b_name} ({pipeline_b})"


def compare(a, b, *, backend: str = "cpu", pipeline_a: str = "stock", pipeline_b: str = "stock", flags=None,
            inputs: list[np.ndarray] | None = None, seed: int = 0, rtol: float | None = None,
            atol: float | None = None, contained: bool = False) -> Comparison:
    """Compiles A and B (Modules, HLO texts or CompileResults), runs both on the
    same inputs (``make_inputs(A, seed)`` unless given) and compares every output.
    Compile and run errors raise ``XlaCompileError``; differing outputs, output
    counts or parameter lists are a ``mismatch`` verdict, not an exception.
    ``contained``: all of it in the XLA worker (Modules and texts only), where an
    abort raises ``XlaAbortError`` naming A or B instead of ending this process.
    ``StableHloModule``s are converted to our IR first."""
    a, b = hlo_of(a), hlo_of(b)
    if contained and not worker.in_worker():
        if isinstance(a, CompileResult) or isinstance(b, CompileResult):
            raise TypeError("compare(contained=True) compiles in the XLA worker: give Modules or HLO texts, "
                            "not CompileResults (their executables cannot move there)")
        parse_flags(flags)
        kwargs = dict(backend=backend, pipeline_a=pipeline_a, pipeline_b=pipeline_b, flags=flags, inputs=inputs,
                      seed=seed, rtol=rtol, atol=atol)
        return worker.contained(compare, (a, b), kwargs, phase="compiling",
                                    module=labels(_name_of(a), _name_of(b), pipeline_a, pipeline_b)[0], backend=backend)
    require_device(backend)
    ma, mb = _module_of(a), _module_of(b)
    names = labels(ma.name, mb.name, pipeline_a, pipeline_b)
    with worker.naming(names[0]):
        ca = _compiled(a if not isinstance(a, Module) else ma, backend, pipeline_a, flags, None)
    with worker.naming(names[1]):
        cb = _compiled(b if not isinstance(b, Module) else mb, backend, pipeline_b, flags, None)
    if inputs is None:
        sa, sb = entry_parameter_shapes(ma), entry_parameter_shapes(mb)
        if sa != sb:
            return Comparison("mismatch", (), f"parameters differ: ({', '.join(sa)}) vs ({', '.join(sb)})", names)
        inputs = make_inputs(ma, seed=seed)[0]
    with worker.naming(names[0]):
        out_a = run(ca, inputs)
    with worker.naming(names[1]):
        out_b = run(cb, inputs)
    out = compare_outputs(out_a, out_b, rtol=rtol, atol=atol, names=names, through=output_precisions(ma))
    return Comparison(out.verdict, out.outputs, out.message, names, inputs)
