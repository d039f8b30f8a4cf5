"""The points of a sweep: ``fdpu run`` option sets, from a grid or a list, checked up front.

A *point* is a dict of ``fdpu run`` options, named without the leading dashes (``layer``,
``batch``, ``sparse-graph``, ``sim``, ``rows``...; ``_`` and ``-`` are the same), with
Python values: a string or number is the option's value, ``True`` a flag (``--double-buffer``),
``False`` its negation (``--no-double-buffer``) or, for a plain flag, its absence.

A *grid* gives each option one value or a list of values; its points are their product, in
the order the options are given (the last option varies fastest).  It comes from the command
line (:func:`parse_assignments`: ``batch=1,4,64``) or a TOML file (:func:`load_toml`)::

    # sweep.toml
    [grid]                        # the product of these lists
    layer = ["alexnet-fc8", "vgg16-fc7"]
    batch = [1, 4, 64]
    mode = ["dense", "sparse"]
    sim = "model"

    [fixed]                       # options every point has (optional)
    rows = 8

    [[point]]                     # single points added to the grid's (optional)
    layer = "alexnet-fc6"
    batch = 64
    sim = "model"

:func:`check_points` turns every point into the argument list of ``fdpu run`` and parses it
with the ``run`` command's own parser and checks (:func:`argv`), so a bad point (an unknown
option or layer, a bad value, options that do not go together) is refused, naming the point,
before any point runs.
"""

import argparse
import contextlib
import io
import itertools
import os
import stat
import tomllib

from sw.spec.errors import FdpuError

__all__ = ["normalize", "parse_assignments", "load_toml", "expand", "argv", "point_name",
           "check_points"]

#: Options a sweep point may not set: the sweep writes the JSON itself, and a result array per
#: point is not kept.
RESERVED = frozenset(("json", "out", "waves"))
#: Options that name input files: made absolute (points run in a temporary directory), and
#: their contents go into the cache key (:mod:`sw.sweep.cache`).
FILES = ("weights", "inputs", "bias")

#: The largest sweep file read (a file of options; a bigger one is not a sweep file).
MAX_TOML_BYTES = 2**20
#: The deepest nesting of tables and arrays a sweep file may have (its options are flat).
MAX_TOML_DEPTH = 16
#: The most points one sweep may have (a grid is the product of its lists).
MAX_POINTS = 100_000


def normalize(name):
    """Return an option name as ``fdpu run`` spells it, without dashes (``sparse_graph`` ->
    ``sparse-graph``)."""
    return str(name).strip().lstrip("-").replace("_", "-")


def _scalar(text):
    """Return a command-line value as a Python value: ``true``/``false`` as booleans, numbers
    as numbers, anything else as the string."""
    low = text.strip().lower()
    if low in ("true", "false"):
        return low == "true"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text.strip()


def parse_assignments(items, where="--grid"):
    """Return the grid of ``NAME=V1,V2,...`` strings as ``{name: [values]}``."""
    grid = {}
    for item in items:
        name, eq, values = item.partition("=")
        if not eq or not name.strip() or not values.strip():
            raise FdpuError(f"{where} {item!r}: expected NAME=VALUE[,VALUE...] (e.g. "
                            f"batch=1,4,64)")
        key = normalize(name)
        if key in grid:
            raise FdpuError(f"{where}: option {key!r} is given twice")
        grid[key] = [_scalar(v) for v in values.split(",")]
    return grid


def _table_grid(table, where):
    """Return a TOML table's options as ``{name: [values]}`` (a scalar is a one-value list)."""
    if not isinstance(table, dict):
        raise FdpuError(f"{where} must be a table of options")
    grid = {}
    for name, values in table.items():
        values = values if isinstance(values, list) else [values]
        if not values:
            raise FdpuError(f"{where}.{name} is an empty list: give at least one value")
        for v in values:
            if not isinstance(v, (str, int, float, bool)):
                raise FdpuError(f"{where}.{name}: {v!r} is not a string, number or boolean")
        grid[normalize(name)] = values
    return grid


def load_toml(path):
    """Return ``(grid, fixed, points)`` of a sweep TOML file (see the module docstring)."""
    if not stat.S_ISREG(os.stat(path).st_mode):
        raise FdpuError(f"{path}: not a regular file; a sweep file is a TOML text file")
    try:
        with open(path, "rb") as f:
            if f.read(MAX_TOML_BYTES + 1)[MAX_TOML_BYTES:]:
                raise FdpuError(f"{path}: larger than {MAX_TOML_BYTES // 2**20} MiB; a sweep "
                                f"file lists options, not data")
            f.seek(0)
            doc = tomllib.load(f)
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise FdpuError(f"{path}: not valid TOML (UTF-8 text): {exc}") from None
    except RecursionError:
        raise FdpuError(f"{path}: nested deeper than {MAX_TOML_DEPTH} levels (a sweep file "
                        f"lists options: at most {MAX_TOML_DEPTH})") from None
    if _depth(doc) > MAX_TOML_DEPTH:
        raise FdpuError(f"{path}: nested {_depth(doc)} levels deep; a sweep file lists options "
                        f"(at most {MAX_TOML_DEPTH} levels)")
    unknown = sorted(set(doc) - {"grid", "fixed", "point"})
    if unknown:
        raise FdpuError(f"{path}: unknown top-level key(s) {', '.join(unknown)} (allowed: grid, "
                        f"fixed, point)")
    grid = _table_grid(doc.get("grid", {}), f"{path}: grid")
    fixed = {k: v[0] for k, v in _table_grid(doc.get("fixed", {}), f"{path}: fixed").items()}
    points = doc.get("point", [])
    if not isinstance(points, list):
        raise FdpuError(f"{path}: point must be an array of tables ([[point]])")
    singles = []
    for i, p in enumerate(points):
        g = _table_grid(p, f"{path}: point[{i}]")
        many = [k for k, v in g.items() if len(v) != 1]
        if many:
            raise FdpuError(f"{path}: point[{i}].{many[0]} is a list: a [[point]] takes one "
                            f"value per option (lists go in [grid])")
        singles.append({k: v[0] for k, v in g.items()})
    if not grid and not singles:
        raise FdpuError(f"{path}: no points: give a [grid] table or [[point]] tables")
    return grid, fixed, singles


def _depth(value):
    """Return the nesting depth of a parsed TOML value: tables and arrays count one each
    (iterative: a deep file must not exhaust the interpreter's stack)."""
    deepest, todo = 0, [(value, 1)]
    while todo:
        v, level = todo.pop()
        if isinstance(v, (dict, list)):
            deepest = max(deepest, level)
            todo += [(c, level + 1) for c in (v.values() if isinstance(v, dict) else v)]
    return deepest


def expand(grid, fixed=None, points=()):
    """Return the points of ``grid`` (their product) with ``fixed`` added to each, then
    ``points`` with ``fixed`` added (no grid and no points: the one point ``fixed``);
    duplicates are dropped (the first kept)."""
    fixed = fixed or {}
    both = sorted(set(fixed) & set(grid))
    if both:
        raise FdpuError(f"option {both[0]!r} is both fixed and varied: give it once")
    size = 1
    for values in grid.values():
        size *= len(values)
    if size + len(points) > MAX_POINTS:
        raise FdpuError(f"the sweep has {size + len(points):,} points (the grid's product "
                        f"{' x '.join(str(len(v)) for v in grid.values()) or 1}); at most "
                        f"{MAX_POINTS:,}: split it into several sweeps")
    out = []
    if grid or not points:                    # no grid and no single points: ``fixed`` alone
        names = list(grid)
        for combo in itertools.product(*(grid[n] for n in names)):
            out.append({**fixed, **dict(zip(names, combo))})
    out += [{**fixed, **p} for p in points]
    seen, unique = set(), []
    for p in out:
        key = tuple(sorted((k, repr(v)) for k, v in p.items()))
        if key not in seen:
            seen.add(key)
            unique.append(p)
    return unique


def argv(point, parser):
    """Return the ``fdpu run`` arguments of ``point`` (without ``run``), checking every name
    against ``parser`` (the ``run`` command's): options in a fixed order (sorted)."""
    actions = {}
    for action in parser._actions:                  # argparse has no public option index
        for flag in action.option_strings:
            actions[flag] = action
    args = []
    for name in sorted(point):
        value = point[name]
        if name in RESERVED:
            raise FdpuError(f"option {name!r} cannot be swept: the sweep writes each point's "
                            f"JSON record itself and keeps no result arrays or waveforms")
        action = actions.get(f"--{name}")
        if action is None or name == "help":
            raise FdpuError(f"{name!r} is not an option of fdpu run (see fdpu run --help)")
        flag = f"--{name}"
        if isinstance(action, argparse.BooleanOptionalAction):
            if not isinstance(value, bool):
                raise FdpuError(f"option {name!r} is a switch: give true or false, not "
                                f"{value!r}")
            args.append(flag if value else f"--no-{name}")
        elif action.nargs == 0:
            if not isinstance(value, bool):
                raise FdpuError(f"option {name!r} is a flag: give true or false, not {value!r}")
            if value:
                args.append(flag)
        else:
            if isinstance(value, bool):
                raise FdpuError(f"option {name!r} takes a value, not {value!r}")
            if name in FILES and str(value).strip():
                value = os.path.abspath(str(value))
            args += [flag, str(value)]
    return args


def point_name(point):
    """Return a short readable name of ``point``: its options as ``name=value``, sorted."""
    return " ".join(f"{k}={'yes' if v is True else 'no' if v is False else v}"
                    for k, v in sorted(point.items()))


def check_points(points, parser, check):
    """Return ``(args, options)`` of each of ``points``: its argument list, parsed by
    ``parser`` and checked by ``check(namespace)`` (which raises :class:`FdpuError`), and every
    option's value, defaults included (a dict); the first bad point is refused with its name
    and the reason."""
    if not points:
        raise FdpuError("the sweep has no points")
    out = []
    for point in points:
        try:
            args = argv(point, parser)
            err = io.StringIO()
            try:
                with contextlib.redirect_stderr(err):
                    ns = parser.parse_args(args)
            except SystemExit:
                msg = err.getvalue().strip().splitlines()
                raise FdpuError(msg[-1].split("error: ", 1)[-1] if msg else "bad options") \
                    from None
            check(ns)
        except FdpuError as exc:
            raise FdpuError(f"point {point_name(point)!r}: {exc}") from None
        options = {k: v for k, v in sorted(vars(ns).items())
                   if isinstance(v, (str, int, float, bool, type(None)))}
        out.append((args, options))
    return out
