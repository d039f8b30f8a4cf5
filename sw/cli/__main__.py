"""``python -m sw.cli``: the ``fdpu`` command without its console script (sweeps run points so)."""

import sys

from sw.cli.app import main

sys.exit(main())
