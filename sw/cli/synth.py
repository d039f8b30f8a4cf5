"""``fdpu synth``: generic Yosys synthesis of a registered hardware top; print its size.

``fdpu synth --top fpu`` builds the top (with ``--param NAME=VALUE`` over its defaults), runs
Yosys ``synth -flatten`` (generic gates, no technology library; :mod:`hw.tooling.synth`) and prints
the cells by type, the total, the flip-flop bits and the memory bits; ``--json`` prints the
same as JSON.  ``docs/area.md`` keeps the table of these figures.
"""

import json
import sys

from hw.tooling.synth import synthesize
from sw.cli.verilog import add_top_arguments, build_top


def register(subparsers):
    """Add the ``synth`` command."""
    parser = subparsers.add_parser(
        "synth", help="synthesize a hardware top with Yosys and print cells and flip-flops",
        description="Generic (technology-independent) Yosys synthesis of a registered top: "
                    "cells by type, total cells, flip-flop bits, memory bits.",
        epilog="example: fdpu synth --top fpu --param tag_width=8")
    add_top_arguments(parser)
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.set_defaults(func=run)


def run(args):
    """Synthesize ``args.top`` and print the report; return the exit status."""
    top, component, params = build_top(args)
    try:
        report = synthesize(component, top.name)
    except RuntimeError as exc:
        print(f"fdpu: error: synth --top {top.name}: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps({**report.as_dict(), "params": params}, indent=2))
        return 0
    settings = ", ".join(f"{k}={v!r}" for k, v in params.items()) or "no parameters"
    print(f"{top.name} ({settings}): {report.yosys}, synth -flatten, generic gates")
    width = max(len(t) for t in report.cells_by_type) if report.cells_by_type else 10
    for cell_type, count in report.cells_by_type.items():
        print(f"  {cell_type:<{width}} {count:>8}")
    print(f"  {'cells':<{width}} {report.cells:>8}")
    print(f"  {'flip-flops':<{width}} {report.flip_flops:>8}")
    print(f"  {'memory bits':<{width}} {report.memory_bits:>8}")
    return 0
