"""The XLA worker: one child process where XLA compiles and runs, so that an XLA
abort (a C++ ``CHECK`` failure, ``LOG(FATAL)``, a crash) ends the worker instead of
the caller; ``contained(fn, args, phase=..., module=...)`` runs ``fn`` there.

Protocol, lifetime and why a persistent child: docs/xla_bridge.md#the-worker
"""

from __future__ import annotations

import atexit
import contextlib
import contextvars
import io
import json
import os
import pickle
import re
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from typing import Any, Callable, Iterator

from hlo_tools.errors import HloError
from hlo_tools.ir import Module
from hlo_tools.parser import parse

from .errors import XlaAbortError

#: Environment variables that shape XLA in the worker (read once, at its start): a
#: change restarts it.  (Not those jax itself sets on import, e.g. TF_CPP_MIN_LOG_LEVEL.)
_ENV_PREFIXES = ("XLA_", "JAX_", "CUDA_VISIBLE_DEVICES", "HLO_")

#: Set in the worker process (the child reads and clears its marker variable).
_IN_WORKER = False
_MARKER = "HLO_XLA_WORKER"

_HEADER = struct.Struct("<Q")

#: What an older jaxlib's worker prints at start-up on a machine without a GPU,
#: before any request: absl's INFO lines and its note about them.  Not forwarded.
_STARTUP_NOISE = re.compile(r"^(I\d{4} |WARNING: All log messages before absl::InitializeLog\(\))")
#: XLA warns once per instruction whose metadata names a stack frame its module's
#: table lacks (after_optimizations dumps of third-party train steps: dozens of
#: lines a command); said once, counted.
_STACK_FRAME_WARNING = re.compile(r"^W\d{4} [^\n]*\] Invalid stack_frame_id \d+")


class XlaWorkerError(HloError):
    """The worker could not be started, or a request could not be sent to it
    (e.g. a hook's pass that is a lambda: it cannot leave this process)."""


class RemoteError(HloError):
    """An exception raised in the worker whose class cannot be rebuilt here; its
    message names the original type, and the worker's traceback is a note."""


def in_worker() -> bool:
    """True in the worker process itself (a ``contained`` call there runs in place)."""
    return _IN_WORKER


# -- pickling: IR modules as their text --------------------------------------------


def _module_from_text(text: str, source: str) -> Module:
    return parse(text, source=source)


class _Pickler(pickle.Pickler):
    """Pickles ``hlo_tools.ir.Module`` as its printed text (a module's object graph
    is too deep for pickle, and its text round-trips exactly)."""

    def reducer_override(self, obj):
        if isinstance(obj, Module):
            return _module_from_text, (obj.to_text(), f"<{obj.name}>")
        return NotImplemented


def _dumps(obj: Any) -> bytes:
    buf = io.BytesIO()
    _Pickler(buf, protocol=pickle.HIGHEST_PROTOCOL).dump(obj)
    return buf.getvalue()


def _write_frame(f, payload: bytes) -> None:
    f.write(_HEADER.pack(len(payload)))
    f.write(payload)
    f.flush()


def _read_exact(f, n: int) -> bytes | None:
    chunks, left = [], n
    while left:
        b = f.read(left)
        if not b:
            return None
        chunks.append(b)
        left -= len(b)
    return b"".join(chunks)


def _read_frame(f) -> bytes | None:
    head = _read_exact(f, _HEADER.size)
    if head is None:
        return None
    return _read_exact(f, _HEADER.unpack(head)[0])


# -- exceptions across the pipe -------------------------------------------------------


def _rebuild_exception(cls: type, args: tuple, state: dict) -> BaseException:
    """An exception as the worker raised it: its class, ``args`` and attributes,
    without calling ``__init__`` (custom signatures, e.g. keyword-only fields)."""
    e = cls.__new__(cls)
    BaseException.__init__(e, *args)
    e.__dict__.update(state)
    return e


def _exception_payload(e: BaseException) -> bytes:
    tb = "".join(traceback.format_exception(type(e), e, e.__traceback__))
    try:
        data = _dumps(("err", (type(e), e.args, dict(e.__dict__)), tb))
        pickle.loads(data)  # the class must import on the other side too
        return data
    except Exception:  # noqa: BLE001 - an attribute or class that does not pickle
        return _dumps(("err", None, f"{type(e).__module__}.{type(e).__qualname__}: {e}", tb))


def _raise_remote(payload: tuple) -> None:
    _, exc, tb = payload[0], payload[1], payload[-1]
    if exc is None:
        err: BaseException = RemoteError(payload[2])
    else:
        err = _rebuild_exception(*exc)
    if not isinstance(err, HloError) and hasattr(err, "add_note"):
        err.add_note("raised in the XLA worker:\n" + tb.rstrip())
    raise err


# -- what an abort said ------------------------------------------------------------------

_FATAL_LINE = re.compile(r"^[F]\d{4} [\d:.]+\s+\d+ ([^\]]+)\] (.*)$")


def abort_message(stderr: str, returncode: int | None) -> str:
    """The line that says why XLA ended the process: the last ``Check failed``
    (with its source file), else the last fatal log line (``F0000 ...``), else
    Python's fatal error, else the signal."""
    lines = [ln.rstrip() for ln in stderr.splitlines() if ln.strip()]
    for ln in reversed(lines):
        m = _FATAL_LINE.match(ln)
        if m and "Check failed" in m.group(2):
            return f"{m.group(2).strip()} ({m.group(1)})"
    for ln in reversed(lines):
        if "Check failed" in ln:
            return ln[ln.index("Check failed"):].strip()
    for ln in reversed(lines):
        m = _FATAL_LINE.match(ln)
        if m:
            return f"{m.group(2).strip()} ({m.group(1)})"
    for ln in reversed(lines):
        if ln.startswith("Fatal Python error:"):
            return ln
    if returncode is not None and returncode < 0:
        try:
            return f"the worker was killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"the worker was killed by signal {-returncode}"
    return f"the worker exited with status {returncode}"


# -- notes from inside the worker ---------------------------------------------------------

_LABEL: contextvars.ContextVar[str | None] = contextvars.ContextVar("hlo_xla_worker_label", default=None)
_reply_to = None  # the worker's reply pipe
_last_note: tuple[str, str] | None = None


def note(phase: str, module: str) -> None:
    """Tells the parent what the worker is about to do ("compiling", "running") and
    to which module, so that an abort names them.  A no-op outside the worker."""
    global _last_note
    if _reply_to is None:
        return
    item = (phase, _LABEL.get() or module)
    if item != _last_note:
        _last_note = item
        _write_frame(_reply_to, _dumps(("note", *item)))


@contextlib.contextmanager
def naming(label: str) -> Iterator[None]:
    """Within the block, notes name ``label`` instead of the module's own name
    (e.g. "jit_step (B, as-written)" when A and B share one)."""
    token = _LABEL.set(label)
    try:
        yield
    finally:
        _LABEL.reset(token)


# -- the parent's side ------------------------------------------------------------------

#: Callbacks ``(phase, module)`` told what the worker is doing, in the parent
#: (``listening``): a command's progress line follows them.
_listeners: list[Callable[[str, str], None]] = []


@contextlib.contextmanager
def listening(callback: Callable[[str, str], None]) -> Iterator[None]:
    """Within the block, ``callback(phase, module)`` hears each call's start and
    each note the worker sends ("compiling", "running"), as they arrive."""
    _listeners.append(callback)
    try:
        yield
    finally:
        _listeners.remove(callback)


def _tell(where: tuple[str, str]) -> None:
    for callback in list(_listeners):
        try:
            callback(*where)
        except Exception:  # noqa: BLE001 - a progress display must never fail the call it shows
            pass



def _env_key() -> tuple:
    """What the worker was started with: a change restarts it."""
    env = tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith(_ENV_PREFIXES)))
    return env + tuple(sorted(_user_pass_files().items()))


def _foreign_paths(paths: list[str]) -> list[str]:
    """The entries of ``sys.path`` another environment may share: not this
    interpreter's standard library or site-packages (a version environment has its
    own jax, numpy ...), only the project and the user's own folders."""
    prefixes = {os.path.realpath(p) + os.sep for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)}
    return [p for p in paths if not any(os.path.realpath(p).startswith(x) for x in prefixes)
            and "site-packages" not in p and "dist-packages" not in p]


def _child_env(python: str | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env[_MARKER] = "1"
    env["HLO_WORKER_PARENT"] = str(os.getpid())
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    paths = [os.path.abspath(p) if p else os.getcwd() for p in sys.path]
    if python is not None:  # another environment: its own packages, our code through the path
        paths = _foreign_paths(paths)
        env.pop("PYTHONHOME", None)
    env["HLO_WORKER_SYS_PATH"] = json.dumps(paths)
    env[_FILES_ENV] = json.dumps(_user_pass_files())
    env["PYTHONPATH"] = os.pathsep.join([here] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    jax = sys.modules.get("jax")
    if "JAX_PLATFORMS" not in env and jax is not None:  # set in this process through jax.config
        with contextlib.suppress(Exception):
            if jax.config.jax_platforms:
                env["JAX_PLATFORMS"] = str(jax.config.jax_platforms)
    return env


class Worker:
    """One worker process and the pipes to it; ``call`` starts it when needed.
    ``python``: the interpreter it runs under (None: this one's); another one is an
    XLA version's environment (``versions``)."""

    def __init__(self, python: str | None = None) -> None:
        self.python = python
        self.proc: subprocess.Popen | None = None
        self.starts = 0
        self.calls = 0
        self.last_start_seconds = 0.0
        self._lock = threading.Lock()
        self._env_key: tuple = ()
        self._stderr_fd: int | None = None
        self.owner = os.getpid()  # a forked child must not share these pipes

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.alive else None

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def _start(self) -> None:
        self._stop()
        fd, path = tempfile.mkstemp(prefix="hlo-xla-worker-", suffix=".stderr")
        os.close(fd)
        self._stderr_fd = os.open(path, os.O_RDWR | os.O_APPEND)
        os.unlink(path)  # anonymous: nothing to clean up, whatever happens
        t0 = time.perf_counter()
        try:
            self.proc = subprocess.Popen([self.python or sys.executable, "-m", "xla_bridge.worker_main"],
                                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr_fd,
                                         env=_child_env(self.python), close_fds=True)
        except OSError as e:
            raise XlaWorkerError(f"cannot start the XLA worker ({self.python or sys.executable}): {e}") from None
        self._env_key = _env_key()
        self.starts += 1
        self.last_start_seconds = time.perf_counter() - t0

    def _stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is not None:
            with contextlib.suppress(Exception):
                proc.stdin.close()
            try:
                proc.wait(timeout=2)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            with contextlib.suppress(Exception):
                proc.stdout.close()
        if self._stderr_fd is not None:
            os.close(self._stderr_fd)
            self._stderr_fd = None

    def close(self) -> None:
        with self._lock:
            self._stop()

    def _stderr_size(self) -> int:
        return os.fstat(self._stderr_fd).st_size if self._stderr_fd is not None else 0

    def _stderr_since(self, offset: int) -> str:
        if self._stderr_fd is None:
            return ""
        size = self._stderr_size()
        data = os.pread(self._stderr_fd, max(0, size - offset), offset) if size > offset else b""
        return data.decode("utf-8", "replace")

    def _forward_stderr(self, offset: int) -> None:
        """What the worker wrote while serving a call that succeeded (XLA's and
        Python's warnings) goes to our stderr, as it would in-process."""
        text = self._stderr_since(offset)
        if text and self.python is not None:  # jaxlib 0.11's CUDA plugin logs "no cuda drivers" at INFO on start
            text = "".join(ln for ln in text.splitlines(keepends=True) if not _STARTUP_NOISE.match(ln))
        if "Invalid stack_frame_id" in text:
            lines = text.splitlines(keepends=True)
            kept = [ln for ln in lines if not _STACK_FRAME_WARNING.match(ln)]
            if len(kept) < len(lines):
                kept.append(f"note: XLA warned {len(lines) - len(kept)} times 'Invalid stack_frame_id' (the module's "
                            "stack-frame table lacks frames its metadata names; harmless)\n")
            text = "".join(kept)
        if text:
            sys.stderr.write(text)
            sys.stderr.flush()
        if self._stderr_fd is not None and self._stderr_size() > (1 << 20):
            os.ftruncate(self._stderr_fd, 0)  # O_APPEND: the worker's next write starts at 0

    def call(self, fn: Callable, args: tuple, kwargs: dict, *, phase: str, module: str, backend: str = "") -> Any:
        try:
            request = _dumps(("call", fn, tuple(args), dict(kwargs), os.getcwd()))
        except Exception as e:  # noqa: BLE001 - PicklingError, AttributeError ("Can't pickle local object")
            raise XlaWorkerError(f"cannot send {getattr(fn, '__qualname__', fn)!r} to the XLA worker: {e} "
                                 "(functions, hooks and passes must be importable by name; a lambda or closure "
                                 "can only run in this process: contained=False)") from None
        with self._lock:
            if not self.alive or self._env_key != _env_key():
                self._start()
            self.calls += 1
            offset = self._stderr_size()
            where = (phase, module)
            _tell(where)
            try:
                _write_frame(self.proc.stdin, request)
            except (BrokenPipeError, OSError):  # it died since the last call: once more, fresh
                self._start()
                offset = self._stderr_size()
                _write_frame(self.proc.stdin, request)
            try:
                while True:
                    frame = _read_frame(self.proc.stdout)
                    if frame is None:
                        raise self._aborted(where, offset, backend)
                    reply = pickle.loads(frame)
                    if reply[0] == "note":
                        where = (reply[1], reply[2])
                        _tell(where)
                    elif reply[0] == "ok":
                        self._forward_stderr(offset)
                        return reply[1]
                    else:
                        _raise_remote(reply)
            except KeyboardInterrupt:
                self._stop()  # its state is unknown: the next call starts a fresh one
                raise

    def _aborted(self, where: tuple[str, str], offset: int, backend: str) -> BaseException:
        proc = self.proc
        try:
            code = proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            code = proc.wait()
        message = abort_message(self._stderr_since(offset), code)
        self._stop()
        return XlaAbortError(message, phase=where[0], module=where[1], backend=backend, exit_status=code)


_WORKER: Worker | None = None
_WORKER_LOCK = threading.Lock()
#: Workers under other interpreters (XLA versions), one each, by interpreter path.
_OTHERS: dict[str, Worker] = {}
#: The interpreter ``contained`` sends work to in this context (None: this one's).
_PYTHON: contextvars.ContextVar[str | None] = contextvars.ContextVar("hlo_xla_worker_python", default=None)


def worker(python: str | None = None) -> Worker:
    """The worker under ``python`` (default: the one ``using`` chose, else this
    interpreter's); created on first use, the process starts on the first call."""
    global _WORKER
    python = python or _PYTHON.get()
    with _WORKER_LOCK:
        if python is not None:
            w = _OTHERS.get(python)
            if w is None or w.owner != os.getpid():
                if not _OTHERS and _WORKER is None:
                    atexit.register(shutdown)
                w = _OTHERS[python] = Worker(python)
            return w
        if _WORKER is None or _WORKER.owner != os.getpid():  # first use, or a fork of the process that had one
            if _WORKER is None and not _OTHERS:
                atexit.register(shutdown)
            _WORKER = Worker()
        return _WORKER


@contextlib.contextmanager
def using(python: str | None) -> Iterator[None]:
    """Within the block, ``contained`` calls run in the worker under ``python``
    (an XLA version's environment; None: this interpreter's own worker)."""
    token = _PYTHON.set(python)
    try:
        yield
    finally:
        _PYTHON.reset(token)


def shutdown() -> None:
    """Ends the worker processes (they also end by themselves when this process exits)."""
    for w in [_WORKER, *_OTHERS.values()]:
        if w is not None and w.owner == os.getpid():
            w.close()


#: Environment variable naming the module files the worker loads before serving.
_FILES_ENV = "HLO_WORKER_FILES"


def _user_pass_files() -> dict[str, str]:
    """The user's pass files this process loaded (``passes.registry.load_passes``), by
    module name: the worker loads them too, so that their objects can be sent there."""
    if "passes.registry" not in sys.modules:
        return {}  # nothing loaded the registry, so no user file either
    from passes.registry import USER_FILES  # lazy: loaded already (checked above)

    return dict(USER_FILES)


def _load_shared_files() -> None:
    import importlib.util

    for name, path in json.loads(os.environ.get(_FILES_ENV, "{}")).items():
        with contextlib.suppress(Exception):  # a file that fails here failed in the parent first
            spec = importlib.util.spec_from_file_location(name, path)
            module = importlib.util.module_from_spec(spec)
            sys.modules[name] = module
            spec.loader.exec_module(module)


def contained(fn: Callable, args: tuple = (), kwargs: dict | None = None, *, phase: str = "compiling",
              module: str = "?", backend: str = "") -> Any:
    """Runs ``fn(*args, **kwargs)`` in the XLA worker and returns its result (or
    raises its exception).  When XLA ends the worker, raises ``XlaAbortError`` naming
    the phase and module of the worker's last note (``phase``/``module`` until the
    first).  ``fn`` must be importable by name; arguments and results must pickle
    (``Module``s travel as text).  In the worker itself, runs in place."""
    if _IN_WORKER:
        return fn(*args, **(kwargs or {}))
    return worker().call(fn, args, kwargs or {}, phase=phase, module=module, backend=backend)


# -- the worker's side ------------------------------------------------------------------


def _die_with_parent() -> None:
    """SIGKILL when the parent goes (Linux), even in the middle of a compile."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except Exception:  # noqa: BLE001 - elsewhere: stdin closing ends the loop
        pass
    if str(os.getppid()) != os.environ.pop("HLO_WORKER_PARENT", str(os.getppid())):
        os._exit(0)  # the parent is already gone


def serve(warm_up: Callable[[], Any] | None = None) -> int:
    """The worker's loop (``worker_main`` runs it): answers requests until stdin closes."""
    global _IN_WORKER, _reply_to
    _IN_WORKER = True
    os.environ.pop(_MARKER, None)
    for p in reversed(json.loads(os.environ.pop("HLO_WORKER_SYS_PATH", "[]"))):
        if p not in sys.path:
            sys.path.insert(0, p)
    _die_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides what Ctrl-C does
    import faulthandler

    faulthandler.enable()  # a crash says where, on stderr
    requests = os.fdopen(os.dup(0), "rb")
    _reply_to = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # print() and XLA's stdout logging go to stderr, never into the replies
    sys.stdout = os.fdopen(1, "w", buffering=1, closefd=False)
    _load_shared_files()
    if warm_up is not None:
        try:  # while the parent prepares its first request
            warm_up()
        except Exception:  # noqa: BLE001 - reported by the first call that needs it
            pass
    global _last_note
    while True:
        frame = _read_frame(requests)
        if frame is None:
            return 0
        _last_note = None
        try:
            _, fn, args, kwargs, cwd = pickle.loads(frame)
            with contextlib.suppress(OSError):
                os.chdir(cwd)
            result = _dumps(("ok", fn(*args, **kwargs)))
        except BaseException as e:  # noqa: BLE001 - every failure goes back to the caller
            result = _exception_payload(e)
        _write_frame(_reply_to, result)


def host_devices(n: int) -> None:
    """XLA workers started from now on see ``n`` CPU devices (XLA's
    ``--xla_force_host_platform_device_count``): what compiling a module
    partitioned over ``n`` devices on XLA:CPU needs."""
    flags = re.sub(r"--xla_force_host_platform_device_count=\d+", "", os.environ.get("XLA_FLAGS", ""))
    os.environ["XLA_FLAGS"] = f"{flags.strip()} --xla_force_host_platform_device_count={n}".strip()
