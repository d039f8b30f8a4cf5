"""What every ``fdpu`` command prints and writes: the rich console, byte figures, JSON files."""

import json
import sys

from rich.console import Console

__all__ = ["MB", "console", "megabytes", "write_json"]

MB = 1e6


def console():
    """Return a rich console on the current stdout, 160 columns wide when not a terminal."""
    con = Console(file=sys.stdout)
    if not con.is_terminal:
        con = Console(file=sys.stdout, width=160)
    return con


def megabytes(n):
    """Format a byte count in MB (10**6 bytes) with two decimals."""
    return f"{n / MB:,.2f}"


def write_json(path, data):
    """Write ``data`` as indented JSON to ``path``."""
    with open(path, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=2)
        f.write("\n")
