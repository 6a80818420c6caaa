"""Named passes, so the CLI and notebooks can say ``--passes dce,cse,simplify``."""

from __future__ import annotations

from typing import Callable

from .base import Pass

_REGISTRY: dict[str, Callable[..., Pass]] = {}


def register_pass(factory: type[Pass] | Callable[..., Pass]):
    """Class decorator (or call) registering a pass under its ``name``."""
    name = getattr(factory, "name", None)
    if not isinstance(name, str) or name == "pass":
        raise ValueError(f"{factory!r} has no pass name")
    if name in _REGISTRY and _REGISTRY[name] is not factory:
        raise ValueError(f"a pass named {name!r} is already registered")
    _REGISTRY[name] = factory
    return factory


def available_passes() -> list[str]:
    _load_builtin()
    return sorted(_REGISTRY)


def get_pass(name: str, **options) -> Pass:
    _load_builtin()
    try:
        return _REGISTRY[name](**options)
    except KeyError:
        raise KeyError(f"unknown pass {name!r}; available: {', '.join(sorted(_REGISTRY))}") from None


def parse_pipeline(spec: str) -> list[Pass]:
    """``"dce,cse,simplify"`` -> pass objects."""
    return [get_pass(n.strip()) for n in spec.split(",") if n.strip()]


_LOADED = False


def _load_builtin() -> None:
    """Imports every module of ``passes`` and ``passes.fusion`` once, so a pass
    registers itself just by living there (registration happens on import)."""
    global _LOADED
    if _LOADED:
        return
    _LOADED = True
    import importlib
    import pkgutil

    from . import fusion

    for pkg in (importlib.import_module(__package__), fusion):
        for info in pkgutil.iter_modules(pkg.__path__):
            if info.name not in ("cli",) and not info.name.startswith("_"):
                importlib.import_module(f"{pkg.__name__}.{info.name}")
