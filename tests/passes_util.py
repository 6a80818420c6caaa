"""assert_rewrite: the clearest pass test, like XLA's RunAndFilecheckHloRewrite."""

from __future__ import annotations

import hashlib

import hlo_tools
from hlo_tools import xla


def assert_rewrite(hlo_in: str, pass_, expected: str | None) -> hlo_tools.Module:
    """Runs ``pass_`` on ``hlo_in``. ``expected=None``: the pass must report
    unchanged and leave the text alone; otherwise it must report changed and
    print exactly ``expected`` (after our parse/print), verify, and XLA must
    accept it."""
    module = hlo_tools.parse(hlo_in)
    before = hashlib.sha256(module.to_text().encode()).hexdigest()
    changed = pass_.run(module)
    after = hashlib.sha256(module.to_text().encode()).hexdigest()
    assert changed == (before != after), f"{pass_.name} said changed={changed} but the text {'changed' if before != after else 'did not'}"
    if expected is None:
        assert not changed, f"{pass_.name} was expected to leave the module unchanged:\n{module.to_text()}"
        return module
    assert changed, f"{pass_.name} did not change the module"
    hlo_tools.verify(module)
    want = hlo_tools.parse(expected).to_text()
    assert module.to_text() == want, f"got:\n{module.to_text()}\nwant:\n{want}"
    xla.xla_module_from_text(module.to_text())
    return module
