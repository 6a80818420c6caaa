"""``python -m hlo_lab.cli``: the ``hlo`` command."""

import sys

from hlo_lab.cli import main

sys.exit(main())
