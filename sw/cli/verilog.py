"""``fdpu verilog``: write the Verilog of a registered hardware top, for any parameters.

``fdpu verilog --top fifo --param width=16 --param depth=8 -o fifo.v`` builds the top
registered in :mod:`tb.host.tops` with the given parameters over its defaults and writes
deterministic Verilog (:func:`hw.tooling.verilog.to_verilog`); without ``-o`` it goes to stdout.
``fdpu verilog --list`` lists the tops and their parameters. An unknown top or a bad
parameter ends in one ``fdpu: error:`` line naming what is allowed (exit status 2).
"""

import sys

from hw.tooling.verilog import to_verilog
from sw.cli.output import check_outputs, replacing
from sw.spec.errors import FdpuError
from tb.host import tops


def add_top_arguments(parser):
    """Add ``--top NAME`` and repeatable ``--param NAME=VALUE`` to ``parser``."""
    parser.add_argument("--top", metavar="NAME",
                        help=f"registered top to build: {', '.join(sorted(tops.TOPS))}")
    parser.add_argument("--param", metavar="NAME=VALUE", action="append", default=[],
                        help="set a parameter of the top (repeatable); integers accept 0x/0b "
                             "prefixes; 'fdpu verilog --list' lists each top's parameters")


def build_top(args):
    """Return ``(top, component, params)`` for the ``--top``/``--param`` arguments.

    Raises
    ------
    FdpuError
        If ``--top`` is missing or unknown, or a parameter is unknown or malformed.
    """
    if not args.top:
        raise FdpuError(f"--top is required; registered tops: {', '.join(sorted(tops.TOPS))}")
    top = tops.get_top(args.top)
    component, params = tops.build(top, tops.parse_params(top, args.param))
    return top, component, params


def describe_tops():
    """Return the text of ``--list``: each top with its parameters."""
    lines = []
    for name in sorted(tops.TOPS):
        top = tops.TOPS[name]
        lines.append(f"{name}: {top.doc}")
        for param in top.params:
            lines.append(f"    {param.name}={param.default!r} ({param.type.__name__}): "
                         f"{param.doc}" + (f" (at most {param.most})" if param.most is not None else ""))
    return "\n".join(lines)


def register(subparsers):
    """Add the ``verilog`` command."""
    parser = subparsers.add_parser(
        "verilog", help="write the Verilog of a hardware top",
        description="Generate deterministic Verilog (no source paths) for a registered "
                    "hardware top with the given parameters.",
        epilog="example: fdpu verilog --top fifo --param width=16 --param depth=8 -o fifo.v")
    add_top_arguments(parser)
    parser.add_argument("-o", "--output", metavar="FILE",
                        help="write the Verilog here (default: standard output)")
    parser.add_argument("--list", action="store_true",
                        help="list the registered tops and their parameters, then exit")
    parser.set_defaults(func=run)


def run(args):
    """Write the Verilog of ``args.top``; return the exit status."""
    if args.list:
        print(describe_tops())
        return 0
    check_outputs([("-o", args.output)])
    top, component, params = build_top(args)
    text = to_verilog(component, top.name)
    if args.output is None:
        sys.stdout.write(text)
    else:
        with replacing(args.output) as tmp, open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
        settings = ", ".join(f"{k}={v!r}" for k, v in params.items())
        print(f"wrote {args.output}: module {top.name} ({settings}), "
              f"{text.count(chr(10))} lines")
    return 0
