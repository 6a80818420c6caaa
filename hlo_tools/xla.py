"""The bridge to XLA through jaxlib: the only module that touches ``jax._src.lib``.

Calls into jaxlib internals are kept behind small functions here so a rename in
a new jax release is one fix.  (Compile/run/time land with the XLA bridge issue.)
"""

from __future__ import annotations

from functools import lru_cache

from .errors import HloParseError


@lru_cache(maxsize=1)
def _xc():
    from jax._src.lib import xla_client

    return xla_client


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


def jax_versions() -> dict[str, str]:
    import jax
    import jaxlib

    return {"jax": jax.__version__, "jaxlib": jaxlib.__version__}
