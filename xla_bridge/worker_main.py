"""The XLA worker process: ``python -m xla_bridge.worker_main`` (started by
``xla_worker.Worker``).  Warms up XLA's CPU client, then serves requests.

Its own module, so that the worker's protocol (``xla_worker``) needs nothing
from the jaxlib functions (``xla``), which send work to it."""

from __future__ import annotations

import sys

from xla_bridge import xla, xla_worker

if __name__ == "__main__":
    sys.exit(xla_worker.serve(warm_up=lambda: xla.get_client("cpu")))
