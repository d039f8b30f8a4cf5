"""The ``fdpu`` command line: one entry point, one subcommand per capability.

Each subcommand lives in a module of :mod:`sw.cli` that exposes ``register(subparsers)``;
``register`` adds its parser and sets ``func`` to a callable taking the parsed arguments and
returning an exit status.  User mistakes raise :class:`sw.spec.errors.FdpuError` (or ``OSError`` for
files); they are printed on one line as ``fdpu: error: ...`` with exit status 2.  A message is
always one line: a newline or another control character in it (a file or node name) is
printed escaped (:func:`one_line`), so no name can split an error or fake another line.
"""

import argparse
import importlib
import signal
import sys
import threading
import warnings

from sw.spec.errors import FdpuError, FdpuWarning

#: Subcommand modules in the order ``fdpu --help`` lists them.
COMMANDS = ("fdcsr", "layers", "verilog", "lint", "fpu_check", "synth", "run", "net", "asm",
            "noc_bench", "rtl", "model", "sweep", "paper")


def one_line(text):
    """Return ``text`` with every non-printable character escaped (``\\n``, ``\\x1b``...)."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in str(text))


class Parser(argparse.ArgumentParser):
    """An argument parser whose usage errors are one line, ``fdpu: error: COMMAND: ...``,
    with exit status 2 (the subcommands' parsers are of this class too)."""

    def error(self, message):
        self.exit(2, f"fdpu: error: {one_line(self.prog)}: {one_line(message)} (see "
                     f"{self.prog} --help)\n")


def build_parser():
    """Build the top-level parser with every registered subcommand."""
    parser = Parser(
        prog="fdpu",
        description="FDPU: a fine-grained dataflow accelerator for sparse FC layers.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMANDS:
        module = importlib.import_module(f"sw.cli.{name}")
        module.register(sub)
    return parser


def _show_warning(message, category, filename, lineno, file=None, line=None):
    """Print an :class:`FdpuWarning` as one ``fdpu: warning:`` line (others as Python does)."""
    if issubclass(category, FdpuWarning):
        print(f"fdpu: warning: {one_line(message)}", file=sys.stderr)
    else:
        _PYTHON_SHOWWARNING(message, category, filename, lineno, file, line)


_PYTHON_SHOWWARNING = warnings.showwarning


class Terminated(BaseException):
    """SIGTERM, raised where the command is, so that it unwinds as Ctrl-C does: the
    simulators it started are ended (``tb.host.runner.run_group``) and no partial file stays."""


def _terminate(signum, frame):
    raise Terminated()


def main(argv=None):
    """Run the ``fdpu`` command line and return its exit status (130 after Ctrl-C, 143 after
    SIGTERM, each with one line and no traceback)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _terminate) if main_thread else None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("always", FdpuWarning)
            warnings.showwarning = _show_warning
            return args.func(args) or 0
    except KeyboardInterrupt:
        print("fdpu: interrupted", file=sys.stderr)
        return 130
    except Terminated:
        print("fdpu: terminated", file=sys.stderr)
        return 143
    except FdpuError as exc:
        print(f"fdpu: error: {one_line(exc)}", file=sys.stderr)
        return 2
    except OSError as exc:
        name = exc.filename if exc.filename is not None else ""
        print(f"fdpu: error: {one_line(name)}: {one_line(exc.strerror or exc)}", file=sys.stderr)
        return 2
    finally:
        if main_thread:
            signal.signal(signal.SIGTERM, signal.SIG_DFL if previous is None else previous)


if __name__ == "__main__":
    sys.exit(main())
