"""The ``fdpu`` command line: :func:`main` (the console script) and one module per subcommand.

:mod:`sw.cli.app` builds the parser from the command modules; :mod:`sw.cli.options` and
:mod:`sw.cli.output` hold what several commands share.  The CLI is the top layer: it may import
everything (spec, compiler, models, hardware, simulation host) and nothing imports it.
"""

from sw.cli.app import build_parser, main

__all__ = ["main", "build_parser"]
