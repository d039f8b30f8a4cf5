"""``fdpu sweep``: run a grid of independent ``fdpu run`` points, in parallel, cached.

``fdpu sweep [--grid NAME=V[,V...]]... [--set NAME=V]... [--file SWEEP.toml]
[--scheduler local|serial|ADDRESS] [--workers N] [--cache DIR] [--out DIR] [--dry-run]``

Every point is a set of ``fdpu run`` options (``sim``, ``layer`` or ``in-features`` and
``out-features``, ``density``, ``batch``, ``mode``, ``sparse-graph``, the array and system
options): ``--grid`` varies an option over values (the points are the product), ``--set``
fixes one for every point, ``--file`` reads both, and single points, from TOML
(:mod:`sw.sweep.grid`).  Every point is checked by ``fdpu run``'s own parser and checks before
anything runs.  The points the cache does not hold run as ``fdpu run`` subprocesses on Dask
(:mod:`sw.sweep.execute`): a local cluster of ``--workers`` processes (default: one per core),
an existing cluster's scheduler at ``--scheduler tcp://HOST:PORT``, or ``--scheduler serial``
in this process.  The output directory gets one JSON record per point (``points/``), and the
combined table as ``table.csv`` and ``table.md``; the table is also printed.  Exit status 0
when every point ran and matched its reference, 1 when one did not, 2 for bad input.
"""

import argparse
import json
import os
import re

from rich.table import Table

from sw.cli import run
from sw.cli.output import console
from sw.spec.errors import FdpuError
from sw.spec.files import lock_dir, write_text
from sw.sweep import cache, execute, grid, table

__all__ = ["register", "run_parser", "add_execution_args", "prepare_out", "check_inputs_apart",
           "prepare_points", "run_points", "execute_points"]

#: Where results are cached unless ``--cache`` says otherwise.
DEFAULT_CACHE = cache.ROOT / "build" / "sweep-cache"


def register(subparsers):
    """Add the ``sweep`` command."""
    parser = subparsers.add_parser(
        "sweep", help="run a grid of fdpu run points on a Dask cluster, cached",
        description="Run every point of a grid of fdpu run options (on the golden model, the "
                    "performance model or the RTL), in parallel on Dask, each result cached by "
                    "everything that determines it; write one JSON record per point and the "
                    "combined table (CSV, Markdown).")
    src = parser.add_argument_group("points")
    src.add_argument("--grid", action="append", default=[], metavar="NAME=V[,V...]",
                     help="vary fdpu run option NAME over the values (repeat: the points are "
                          "the product), e.g. --grid batch=1,4,64 --grid mode=dense,sparse")
    src.add_argument("--set", action="append", default=[], metavar="NAME=V",
                     help="give every point fdpu run option NAME=V, e.g. --set sim=model")
    src.add_argument("--file", metavar="SWEEP.toml",
                     help="read [grid], [fixed] and [[point]] tables from a TOML file "
                          "(docs/sweep.md); --grid and --set add to it")
    add_execution_args(parser)
    parser.add_argument("--out", default="sweep", metavar="DIR",
                        help="output directory: points/*.json, table.csv, table.md (default "
                             "./sweep)")
    parser.add_argument("--dry-run", action="store_true",
                        help="list the points and which are cached; run nothing")
    parser.set_defaults(func=sweep_command)


def add_execution_args(parser):
    """Add the options that say where and how points run (``--scheduler``, ``--workers``,
    ``--cache``)."""
    ex = parser.add_argument_group("execution")
    ex.add_argument("--scheduler", default="local", metavar="local|serial|ADDRESS",
                    help="local: a Dask LocalCluster on this machine (default); serial: one "
                         "point after the other in this process; tcp://HOST:PORT: an existing "
                         "Dask scheduler, whose workers have this project installed")
    ex.add_argument("--workers", type=int, metavar="N",
                    help=f"worker processes of the local cluster (default: one per core, "
                         f"{os.cpu_count()} here)")
    ex.add_argument("--cache", default=str(DEFAULT_CACHE), metavar="DIR",
                    help="result cache directory (default build/sweep-cache in the checkout)")


def run_parser():
    """Return the parser of ``fdpu run`` (a point's options are parsed by it)."""
    sub = argparse.ArgumentParser(prog="fdpu").add_subparsers()
    run.register(sub)
    return sub.choices["run"]


#: The files ``fdpu sweep`` and ``fdpu paper`` write into ``--out`` (besides ``points/``).
OUT_FILES = ("table.csv", "table.md", "report.md", "records.json", "fig10_utilization.png",
             "fig11_bandwidth.png")


def prepare_out(path):
    """Create the output directory ``path`` (checked writable before anything runs); an
    output name in it that is a directory is refused now, not after the points ran."""
    if os.path.exists(path) and not os.path.isdir(path):
        raise FdpuError(f"--out {path}: exists and is not a directory")
    os.makedirs(path, exist_ok=True)
    if not os.access(path, os.W_OK):
        raise FdpuError(f"--out {path}: not writable")
    for name in OUT_FILES:
        target = os.path.join(path, name)
        if os.path.isdir(target) and not os.path.islink(target):
            raise FdpuError(f"--out {path}: {name} is a directory; the command writes a file "
                            f"there")


def check_inputs_apart(out_dir, inputs):
    """Refuse an input file (``(what, path)`` pairs) that is one of the files the command
    writes into ``out_dir`` (its tables, report and ``points/`` records): a sweep must never
    replace its own input."""
    outs = [os.path.join(out_dir, n) for n in OUT_FILES]
    points = os.path.realpath(os.path.join(out_dir, "points"))
    for what, path in inputs:
        if not path or not os.path.exists(path):
            continue
        real = os.path.realpath(path)
        hit = [o for o in outs if os.path.exists(o) and os.path.samefile(o, path)]
        if hit or real in (os.path.realpath(o) for o in outs) \
                or os.path.dirname(real) == points:
            raise FdpuError(f"{what} {path}: is a file the command writes into --out "
                            f"{out_dir}; move it or give another --out")


def _scheduler(args):
    if args.workers is not None:
        if args.scheduler != "local":
            raise FdpuError(f"--workers sets the size of the local cluster; --scheduler "
                            f"{args.scheduler} has its own workers")
        if not 1 <= args.workers <= 256:
            raise FdpuError(f"--workers must be in 1..256, got {args.workers}")
    if args.scheduler == "serial":
        return None, None
    if args.scheduler == "local":
        return "local", args.workers or os.cpu_count() or 1
    scheme = args.scheduler.split("://", 1)[0] if "://" in args.scheduler else None
    if scheme in ("tls", "ucx", "inproc", "ws", "wss"):
        raise FdpuError(f"--scheduler {args.scheduler!r}: the {scheme}:// transport is not "
                        f"supported (it needs a configuration fdpu does not make); give a "
                        f"tcp://HOST:PORT address")
    m = re.fullmatch(r"tcp://([A-Za-z0-9.\-]+|\[[0-9A-Fa-f:]+\]):([0-9]{1,5})", args.scheduler)
    if not m or not 1 <= int(m.group(2)) <= 65535:
        raise FdpuError(f"--scheduler {args.scheduler!r}: expected local, serial or a Dask "
                        f"scheduler address tcp://HOST:PORT (port 1..65535), such as "
                        f"tcp://10.0.0.1:8786")
    return args.scheduler, None


#: A point record's file name in ``points/`` (:func:`_slug` and ``.json``).
_SLUG_FILE = re.compile(r"[A-Za-z0-9.=_-]+-[0-9a-f]{8}\.json")


def _slug(name, key):
    return re.sub(r"[^A-Za-z0-9.=-]+", "_", name)[:120] + f"-{key[:8]}"


def prepare_points(points, args):
    """Check ``points`` (each by ``fdpu run``'s parser and checks, their input files regular
    and bounded) and the execution options; return what :func:`run_points` runs: the
    scheduler, the cache and per point ``(key, name, argv, point)``.  Nothing is written."""
    scheduler, workers = _scheduler(args)
    checked = grid.check_points(points, run_parser(), run.check_options)
    store = cache.Store(args.cache)
    items = []
    for point, (argv, options) in zip(points, checked):
        k = cache.key(options, options["sim"], files=[f for f in grid.FILES if f in options])
        items.append((k, grid.point_name(point), argv, point))
    return scheduler, workers, store, items


def run_points(prepared, out_dir, *, dry_run=False, cached_only=False):
    """Run the prepared points (:func:`prepare_points`) the cache lacks (none with
    ``cached_only``), write their records to ``out_dir/points``; return ``(records,
    failed)``: the records in point order and ``{name: error}`` of the points without one.
    A cached record that is not sound is reported and recomputed (or, with ``cached_only``,
    counted as missing), never used (:func:`sw.sweep.cache.record_problem`)."""
    scheduler, workers, store, items = prepared
    cached = {k: store.get(k) for k, *_ in items}
    todo = [it for it in items if cached[it[0]] is None]
    con = console()
    for k, name, _, _ in items:
        if k in store.problems:
            con.print(f"[yellow]cache record of {name} not used[/yellow] "
                      f"({store.path(k)}: {store.problems[k]})"
                      + ("" if cached_only else "; it is recomputed"), highlight=False)
    con.print(f"{len(items)} point(s): {len(items) - len(todo)} cached, {len(todo)} to run "
              f"({'serially' if scheduler is None else scheduler}"
              f"{f', {workers} workers' if workers else ''}; cache {store.dir})")
    if dry_run:
        for k, name, argv, _ in items:
            con.print(f"  {'cached ' if cached[k] else 'to run '} {name}", highlight=False)
        return [], {}
    prepare_out(out_dir)
    failed = {}
    if cached_only:
        failed = {k: f"cache record not usable: {store.problems[k]} (--cached-only)"
                  if k in store.problems else "not in the cache (--cached-only)"
                  for k, *_ in todo}
    elif todo:
        failed = execute.run_sweep(todo, store, scheduler=scheduler, workers=workers,
                                   console=con)
    records, written = [], set()
    os.makedirs(os.path.join(out_dir, "points"), exist_ok=True)
    for k, name, _, _ in items:
        rec = store.get(k)
        if rec is None:
            continue
        records.append(rec)
        written.add(_slug(name, k) + ".json")
        write_text(os.path.join(out_dir, "points", _slug(name, k) + ".json"),
                   json.dumps(rec, indent=1, allow_nan=False) + "\n")
    # The records of an earlier run into this --out that this one does not report (another
    # source, other points) go: points/ holds the report's records and nothing else.
    for old in os.listdir(os.path.join(out_dir, "points")):
        if _SLUG_FILE.fullmatch(old) and old not in written:
            os.remove(os.path.join(out_dir, "points", old))
    names = {k: name for k, name, _, _ in items}
    return records, {names[k]: e for k, e in failed.items()}


def execute_points(points, args, out_dir, *, dry_run=False, cached_only=False):
    """Check ``points`` and run them (:func:`prepare_points`, :func:`run_points`)."""
    return run_points(prepare_points(points, args), out_dir, dry_run=dry_run,
                      cached_only=cached_only)


def sweep_command(args):
    """Run ``fdpu sweep``; return 0 when every point ran and matched."""
    g, fixed, singles = ({}, {}, []) if args.file is None else grid.load_toml(args.file)
    more = grid.parse_assignments(args.grid, "--grid")
    both = sorted(set(more) & set(g))
    if both:
        raise FdpuError(f"--grid {both[0]} is also in {args.file}'s [grid]: give it once")
    g.update(more)
    for name, values in grid.parse_assignments(args.set, "--set").items():
        if len(values) != 1:
            raise FdpuError(f"--set {name}: one value (use --grid for several)")
        fixed[name] = values[0]
    if not g and not singles and not fixed:
        raise FdpuError("no points: give --grid NAME=V,..., --set NAME=V or --file SWEEP.toml")
    points = grid.expand(g, fixed, singles)
    check_inputs_apart(args.out, [("--file", args.file)] + [
        (f"point {grid.point_name(p)}: {name}", p[name])
        for p in points for name in grid.FILES if isinstance(p.get(name), str)])
    prepared = prepare_points(points, args)
    if args.dry_run:
        run_points(prepared, args.out, dry_run=True)
        return 0
    prepare_out(args.out)
    with lock_dir(args.out, "--out"):
        records, failed = run_points(prepared, args.out)
        write_text(os.path.join(args.out, "table.csv"), table.to_csv(records))
        write_text(os.path.join(args.out, "table.md"), table.to_markdown(records))
    if records:
        header, body = table.rows(records)
        t = Table(title=f"fdpu sweep: {len(records)} point(s)", title_justify="left")
        for col in header:
            t.add_column(col, justify="left" if col in ("graph", "layer", "sim") else "right")
        for row in body:
            t.add_row(*row)
        console().print(t)
    console().print(f"wrote {len(records)} record(s) to {args.out}/points, table.csv, table.md")
    bad = [r["name"] for r in records if r["status"] != 0]
    for name in bad:
        console().print(f"[red]no match[/red]: {name}")
    for name, error in failed.items():
        console().print(f"[red]failed[/red]: {name}: {error}")
    return 1 if bad or failed else 0
