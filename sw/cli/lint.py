"""``fdpu lint``: lint the Verilog of a registered top with ``verilator --lint-only -Wall``.

The only waivers are those in ``hw/tooling/lint.vlt`` (see ``docs/harness.md``). Prints each
remaining warning and exits 1, or prints "lint clean" and exits 0. ``--all`` lints every registered
top with its default parameters.
"""

from hw.tooling import verilog
from sw.cli.verilog import add_top_arguments, build_top
from sw.spec.errors import FdpuError
from tb.host import tops


def register(subparsers):
    """Add the ``lint`` command."""
    parser = subparsers.add_parser(
        "lint", help="lint a hardware top with Verilator -Wall",
        description="Generate the Verilog of a registered top and run `verilator --lint-only "
                    "-Wall` on it with the project's waiver file hw/tooling/lint.vlt. Exit "
                    "status 0 when clean, 1 when warnings remain.",
        epilog="example: fdpu lint --top fifo --param width=33 --param depth=16")
    add_top_arguments(parser)
    parser.add_argument("--all", action="store_true",
                        help="lint every registered top with default parameters")
    parser.add_argument("--timeout", type=float, default=verilog.LINT_TIMEOUT_S,
                        metavar="SECONDS",
                        help=f"wall-clock bound of each top's lint (default "
                             f"{verilog.LINT_TIMEOUT_S:.0f}; the default 8 x 8 fdpu top takes "
                             f"about 3.5 minutes)")
    parser.set_defaults(func=run)


def run(args):
    """Lint the selected top(s); return 0 when clean, 1 otherwise."""
    if not args.timeout > 0:
        raise FdpuError(f"--timeout must be a positive number of seconds, got {args.timeout}")
    if args.all:
        selected = [(name, *tops.build(name)) for name in sorted(tops.TOPS)]
    else:
        top, component, params = build_top(args)
        selected = [(top.name, component, params)]
    status = 0
    for name, component, params in selected:
        settings = ", ".join(f"{k}={v!r}" for k, v in params.items())
        try:
            messages = verilog.lint(verilog.to_verilog(component, name), name,
                                    timeout_s=args.timeout)
        except TimeoutError as exc:
            raise FdpuError(str(exc)) from None
        if messages:
            status = 1
            print(f"{name} ({settings}): {len(messages)} lint warning(s)")
            for message in messages:
                print(f"  {message}")
        else:
            print(f"{name} ({settings}): lint clean")
    return status
