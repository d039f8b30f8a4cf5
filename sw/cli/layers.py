"""``fdpu layers``: list the layer zoo, optionally with each layer's measured FD-CSR size.

``fdpu layers [NAME ...] [--stats] [--seed S] [--json PATH]``

Without ``--stats`` the table is the zoo itself (name, network, C, K, density, weights, dense
binary16 MB) and is instant.  ``--stats`` builds each layer's seeded synthetic pruned weights
(:func:`sw.compiler.layers.make_weights`), encodes them in FD-CSR and adds nnz, the FD-CSR MB and
its ratio to dense; all six layers take a few seconds.  MB are 10**6 bytes.
"""

import sys
import time

from rich.console import Console
from rich.table import Table

from sw.cli.output import check_outputs, console, megabytes, write_json
from sw.compiler import fdcsr, layers
from sw.spec.errors import FdpuError


def register(subparsers):
    """Add the ``layers`` command."""
    parser = subparsers.add_parser(
        "layers", help="list the zoo of FC layers (with --stats: their FD-CSR sizes)",
        description="List the paper's FC layers (AlexNet and VGG-16 FC6/7/8) with shapes and "
                    "Deep Compression densities. With --stats, build each layer's seeded "
                    "synthetic pruned weights, encode them in FD-CSR and report the bytes.")
    parser.add_argument("names", metavar="NAME", nargs="*",
                        help=f"layers to show (default: all): "
                             f"{', '.join(layers.layer_names())}")
    parser.add_argument("--stats", action="store_true",
                        help="add nnz, FD-CSR bytes and the ratio to dense of each layer")
    parser.add_argument("--seed", type=int, default=0, metavar="S",
                        help="seed of the synthetic weights used by --stats (default: 0)")
    parser.add_argument("--json", metavar="PATH", help="also write the table as JSON")
    parser.set_defaults(func=run)


def run(args):
    """Print the zoo table (and optionally write it as JSON); return the exit status."""
    specs = [layers.get_layer(n) for n in args.names] or list(layers.LAYERS.values())
    if args.seed < 0:
        raise FdpuError(f"--seed must be a non-negative integer, got {args.seed}")
    check_outputs([("--json", args.json)])
    table = Table(title="Layer zoo (a convolution: C = C R S of its unrolled inputs)"
                  + (f" (FD-CSR of seeded weights, seed {args.seed})"
                                          if args.stats else ""), title_justify="left")
    table.add_column("layer", no_wrap=True)
    table.add_column("network", no_wrap=True)
    for name in ("C", "K", "density", "weights", "dense MB"):
        table.add_column(name, justify="right", no_wrap=True)
    if args.stats:
        for name in ("nnz", "FD-CSR MB", "ratio", "saving"):
            table.add_column(name, justify="right", no_wrap=True)
    records = []
    status = Console(file=sys.stderr)
    start = time.perf_counter()
    for spec in specs:
        row = [spec.name, spec.network, f"{spec.in_features:,}", f"{spec.out_features:,}",
               f"{spec.density:.0%}", f"{spec.weights:,}", megabytes(spec.dense_bytes)]
        record = {"name": spec.name, "network": spec.network, "in_features": spec.in_features,
                  "out_features": spec.out_features, "density": spec.density,
                  "weights": spec.weights, "dense_bytes": spec.dense_bytes}
        if spec.conv is not None:
            g = spec.conv
            record["conv"] = dict(shape=g.describe(), input=[g.channels, g.height, g.width],
                                  output=[g.K, *g.output])
        if args.stats:
            with status.status(f"building and encoding {spec.name} "
                               f"({spec.weights:,} weights)"):
                s = fdcsr.encode(layers.make_weights(spec, seed=args.seed)).stats()
            row += [f"{s.nnz:,}", megabytes(s.total_bytes), f"{s.ratio:.3f}",
                    f"{s.compression:.2f}x"]
            record["seed"] = args.seed
            record["fdcsr"] = s.as_dict()
        table.add_row(*row)
        records.append(record)
    out = console()
    out.print(table)
    if args.stats:
        out.print("ratio = FD-CSR bytes / dense binary16 bytes; saving = dense / FD-CSR; "
                  "MB = 10^6 bytes.\n"
                  "FD-CSR = float16 values + one uint16 column mask and one uint32 row offset "
                  "per 16 weights.\n"
                  f"{len(specs)} layer(s) built, pruned and encoded in "
                  f"{time.perf_counter() - start:.1f} s.", highlight=False)
    if args.json:
        write_json(args.json, records)
    return 0
