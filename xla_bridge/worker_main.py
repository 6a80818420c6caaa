"""The XLA worker process: ``python -m xla_bridge.worker_main`` (started by
``worker.Worker``).  Warms up XLA's CPU client, then serves requests.

Its own module, so that the worker's protocol (``worker``) needs nothing
from the jaxlib functions (``xla``), which send work to it."""

from __future__ import annotations

import sys

from xla_bridge import jax_internals, worker

if __name__ == "__main__":
    sys.exit(worker.serve(warm_up=lambda: jax_internals.get_client("cpu")))
