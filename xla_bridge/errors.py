"""The errors the XLA bridge raises: XLA refused a module, XLA aborted, no device.

Their own module, so that the worker (which reports aborts) and the jaxlib
functions (``xla``) both use them without importing each other."""

from __future__ import annotations

from hlo_tools.errors import HloError


class XlaCompileError(HloError):
    """XLA refused a module: carries XLA's own message and the module's name.

    ``stage`` says where it failed: ``"parse"`` (XLA's HLO parser / verifier),
    ``"convert"`` (HLO -> StableHLO), ``"compile"`` (XLA's pipeline), ``"hook"``
    (a Python pass run inside the pipeline raised) or ``"run"``.
    """

    def __init__(self, message: str, *, module_name: str = "?", backend: str = "", stage: str = "compile",
                 xla_message: str = ""):
        self.module_name = module_name
        self.backend = backend
        self.stage = stage
        self.xla_message = xla_message or message
        where = f"{backend} " if backend else ""
        super().__init__(f"module {module_name!r}: {where}{stage} failed: {message}")


class XlaAbortError(XlaCompileError):
    """XLA ended the process it ran in (a C++ ``CHECK`` failure, ``LOG(FATAL)``, a
    crash) while compiling or running a module.  It was contained in the XLA worker
    process (``worker``), so the caller lives on: ``phase`` is "compiling" or
    "running", ``module`` the module's name, ``message`` XLA's last fatal line
    (``Check failed: ...``)."""

    def __init__(self, message: str, *, phase: str, module: str, backend: str = "", exit_status: int | None = None):
        self.phase = phase
        self.module = module
        self.message = message
        self.exit_status = exit_status
        super().__init__(message, module_name=module, backend=backend,
                         stage="run" if phase == "running" else "compile", xla_message=message)

    def __str__(self) -> str:
        return f"XLA aborted while {self.phase} {self.module}: {self.message}"


class NoDeviceError(XlaCompileError):
    """Nothing can run on the requested backend here (no GPU): said before any
    compile, since XLA:GPU would compile deviceless first and fail only then."""

    def __init__(self, backend: str):
        super().__init__(f"no {backend.upper()} here (jax sees no {backend} device), so nothing can run on it; "
                         f"compiling for one works without it: hlo compile --backend {backend} --target h100",
                         backend=backend, stage="run")

    def __str__(self) -> str:
        return self.xla_message
