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


def _load_builtin() -> None:
    from . import cse, dce, simplify  # noqa: F401  (registration happens on import)
    from .fusion import outline  # noqa: F401
