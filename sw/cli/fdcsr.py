"""``fdpu fdcsr``: encode a weight array into FD-CSR, decode it back, and report its sizes.

Subcommands
-----------
``encode IN.npy [-o OUT.npz]``
    Encode a 1-D or 2-D float ``.npy`` array (cast to float16, RNE) and write the FD-CSR
    ``.npz`` (default: ``IN`` with suffix ``.npz``).
``decode IN.npz [-o OUT.npy]``
    Decode an FD-CSR ``.npz`` into the dense float16 ``.npy`` (bit-exact).
``stats (IN.npy | IN.npz | --layer NAME [--seed S] [--density D]) [--json PATH]``
    Print shape, nnz, density and the bytes of values/colidx/rowoff/total against dense
    binary16; optionally write the same as JSON.

Sizes are printed in bytes and in MB (10**6 bytes).  Bad input ends in one ``fdpu: error:``
line and exit status 2 (see :mod:`sw.cli`).
"""

import os
import warnings
from pathlib import Path

import numpy as np
from rich.table import Table

from sw.cli.output import (check_outputs, console, megabytes, replacing, save_npy,
                           write_json)
from sw.compiler import fdcsr, layers, npyfile
from sw.compiler.prune import check_density
from sw.spec.errors import FdpuError, FdpuWarning


def register(subparsers):
    """Add the ``fdcsr`` command and its ``encode``/``decode``/``stats`` subcommands."""
    parser = subparsers.add_parser(
        "fdcsr", help="encode, decode and measure FD-CSR sparse weights",
        description="FD-CSR: 16-element rows, one 16-bit column-index bitmask and one 32-bit "
                    "row offset per row, float16 values. See docs/fdcsr.md.")
    sub = parser.add_subparsers(dest="fdcsr_command", metavar="SUBCOMMAND", required=True)

    enc = sub.add_parser(
        "encode", help="encode a .npy weight array into an FD-CSR .npz",
        description="Encode a 1-D or 2-D (K x C) float .npy array into FD-CSR. Non-float16 "
                    "input is cast to float16 (round to nearest even); every element whose "
                    "bit pattern is not +0.0 is stored.")
    enc.add_argument("input", metavar="IN.npy", help="dense weights (.npy, 1-D or K x C)")
    enc.add_argument("-o", "--output", metavar="OUT.npz",
                     help="FD-CSR file to write (default: IN with suffix .npz)")
    enc.set_defaults(func=run_encode)

    dec = sub.add_parser(
        "decode", help="decode an FD-CSR .npz into a dense float16 .npy",
        description="Decode an FD-CSR .npz (validated first) into the dense float16 array, "
                    "bit for bit the one that was encoded.")
    dec.add_argument("input", metavar="IN.npz", help="FD-CSR file written by 'fdcsr encode'")
    dec.add_argument("-o", "--output", metavar="OUT.npy",
                     help="dense .npy to write (default: IN with suffix .npy)")
    dec.set_defaults(func=run_decode)

    st = sub.add_parser(
        "stats", help="print the FD-CSR sizes of a file or of a zoo layer",
        description="Print the FD-CSR byte accounting of a dense .npy (encoded on the fly), "
                    "an FD-CSR .npz, or a seeded synthetic zoo layer (--layer).")
    st.add_argument("input", metavar="IN", nargs="?",
                    help="a dense .npy or an FD-CSR .npz (omit with --layer)")
    st.add_argument("--layer", metavar="NAME",
                    help=f"a zoo layer instead of a file: {', '.join(layers.layer_names())}")
    st.add_argument("--seed", type=int, default=0, metavar="S",
                    help="seed of the synthetic layer weights (default: 0)")
    st.add_argument("--density", type=float, metavar="D",
                    help="with --layer: prune to this density in [0, 1] instead of the "
                         "layer's own")
    st.add_argument("--json", metavar="PATH", help="also write the statistics as JSON")
    st.set_defaults(func=run_stats)


def run_encode(args):
    """Encode ``args.input`` into ``args.output``; return the exit status."""
    out = args.output or str(Path(args.input).with_suffix(".npz"))
    check_outputs([("-o", out)], [("IN", args.input)])
    dense = layers.load_npy(args.input, "the array to encode")
    enc = fdcsr.encode(_named(_no_overflow(dense, args.input), args.input))
    with replacing(out) as tmp:
        enc.save(tmp)
    s = enc.stats()
    print(f"wrote {out}: shape {_shape(s.shape)}, nnz {s.nnz:,} (density {s.density:.4f}), "
          f"{s.total_bytes:,} bytes = {s.ratio:.3f} x dense binary16")
    return 0


def run_decode(args):
    """Decode ``args.input`` into ``args.output``; return the exit status."""
    enc = fdcsr.load(args.input)                     # the input checked first
    out = args.output or str(Path(args.input).with_suffix(".npy"))
    check_outputs([("-o", out)], [("IN", args.input)])
    dense = enc.size * fdcsr.VALUES_DTYPE.itemsize
    if dense > npyfile.MAX_ARRAY_BYTES:
        raise FdpuError(f"{args.input}: decodes to {dense:,} bytes of dense float16 (shape "
                        f"{_shape(enc.shape)}); at most {npyfile.MAX_ARRAY_BYTES:,} bytes, the "
                        f"most a .npy input may hold, are written")
    save_npy(out, enc.decode())
    print(f"wrote {out}: float16 array of shape {_shape(enc.shape)}, nnz {enc.nnz:,}")
    return 0


def run_stats(args):
    """Print (and optionally write as JSON) the FD-CSR statistics; return the exit status."""
    if (args.input is None) == (args.layer is None):
        raise FdpuError("fdcsr stats needs exactly one of IN (a .npy or .npz file) or "
                        "--layer NAME")
    if args.layer is None and args.density is not None:
        raise FdpuError("--density applies only with --layer (a file is measured as it is)")
    check_outputs([("--json", args.json)], [("IN", args.input)])
    if args.layer is not None:
        spec = layers.get_layer(args.layer)
        density = spec.density if args.density is None else check_density(args.density,
                                                                         "--density")
        if args.seed < 0:
            raise FdpuError(f"--seed must be a non-negative integer, got {args.seed}")
        enc = fdcsr.encode(layers.make_weights(spec, density, args.seed))
        source = {"layer": spec.name, "seed": args.seed, "density_target": density}
        title = f"FD-CSR of {spec.name} (seed {args.seed}, pruned to {density:g})"
    else:
        enc = _load_any(args.input)
        source = {"file": os.fspath(args.input)}
        title = f"FD-CSR of {args.input}"
    s = enc.stats()
    console().print(stats_table(s, title))
    if args.json:
        write_json(args.json, {**source, **s.as_dict()})
    return 0


def stats_table(s, title):
    """Return a rich table of one :class:`sw.compiler.fdcsr.FDCSRStats`."""
    table = Table(title=title, title_justify="left")
    table.add_column("quantity")
    table.add_column("value", justify="right")
    table.add_column("MB", justify="right")
    table.add_row("shape", _shape(s.shape), "")
    table.add_row("16-element rows", f"{s.rows:,}", "")
    table.add_row("non-zeros (nnz)", f"{s.nnz:,}", "")
    table.add_row("density", f"{s.density:.4f}", "")
    table.add_row("values bytes (float16)", f"{s.values_bytes:,}", megabytes(s.values_bytes))
    table.add_row("colidx bytes (uint16/row)", f"{s.colidx_bytes:,}",
                  megabytes(s.colidx_bytes))
    table.add_row("rowoff bytes (uint32/row)", f"{s.rowoff_bytes:,}",
                  megabytes(s.rowoff_bytes))
    table.add_row("FD-CSR total bytes", f"{s.total_bytes:,}", megabytes(s.total_bytes))
    table.add_row("dense binary16 bytes", f"{s.dense_bytes:,}", megabytes(s.dense_bytes))
    table.add_row("FD-CSR / dense", f"{s.ratio:.4f}", "")
    table.add_row("dense / FD-CSR", f"{s.compression:.2f}x", "")
    return table


def _load_any(path):
    """Return the FD-CSR of ``path``: an FD-CSR ``.npz`` as is, a dense ``.npy`` encoded."""
    if npyfile.is_zip(path, "IN must be a .npy array or an FD-CSR .npz file"):
        return fdcsr.load(path)
    return fdcsr.encode(_named(layers.load_npy(path, "the array to measure"), path))


def _no_overflow(dense, path):
    """Refuse finite values that binary16 cannot hold (they would become infinity): FD-CSR
    stores any binary16 value, infinities and NaN included, but never changes one.  Stored
    NaNs and infinities get a warning: ``fdpu run`` refuses them as weights."""
    if np.issubdtype(dense.dtype, np.floating):
        odd = int(np.count_nonzero(~np.isfinite(dense)))
        if odd:
            warnings.warn(f"{path}: {odd:,} NaN or infinite value(s) stored as they are; "
                          f"fdpu run refuses weights that are not finite", FdpuWarning)
    if dense.dtype != np.float16 and np.issubdtype(dense.dtype, np.floating):
        with np.errstate(over="ignore", invalid="ignore"):
            bad = np.isfinite(dense) & ~np.isfinite(dense.astype(np.float16))
        if bad.any():
            where = tuple(int(i) for i in np.argwhere(bad)[0])
            raise FdpuError(f"{path}: {int(bad.sum()):,} finite value(s) beyond the binary16 range "
                            f"(|x| <= 65504), the first {float(dense[where]):g} at index {where}; "
                            f"scale or clip them first")
    return dense


def _named(dense, path):
    """Check ``dense`` for :func:`sw.compiler.fdcsr.encode`, naming ``path`` in the error."""
    return fdcsr.as_float16(dense, f"{path}: array")


def _shape(shape):
    return " x ".join(str(d) for d in shape)
