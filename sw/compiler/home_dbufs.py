"""Home Dbufs of the FC engines: which PEs run engines, the Dbuf each loads from, link loads.

Contract (``docs/mapping.md``, "Home Dbufs", has the reasoning)
---------------------------------------------------------------
:func:`engine_homes` returns ``[(pe (x, y), dbuf index)]``, one entry per engine in row-major
PE order: every home Dbuf is on its PE's row or column where the array allows it (a straight
XY route), at most ``cap`` engines per Dbuf.  :func:`link_engines` counts, for such a list, the
most engines whose Dbuf requests or replies share one mesh link (the blocking chooser's mesh
term).
"""

import numpy as np
from scipy.optimize import linear_sum_assignment

from sw.spec.arch import Dir

__all__ = ["engine_homes", "link_engines"]

#: Cost of a home Dbuf off the PE's row and column (its route bends), against hops squared.
_BENT = 10_000


def engine_homes(params, count, cap=None):
    """Pick ``count`` PEs and give each a home Dbuf on its own row or column.

    Every Dbuf takes at most ``cap`` engines (default ``ceil(P / D)``).  Among the assignments
    where each PE's home is on its row or column, so that its XY route is a straight line and a
    mesh link only ever carries the loads of one Dbuf, the one with the least sum of squared hop
    counts is taken (``scipy.optimize.linear_sum_assignment`` over the Dbufs' seats).  A PE with
    no straight seat left gets the nearest free one (penalized, so only when the shape forces
    it).  With fewer engines than PEs, the PEs nearest their homes are chosen.

    The nearest-Dbuf greedy this replaced crossed routes: on the 8 x 8 four engines' loads
    shared a link, and the dense engine ran at half speed (docs/mapping.md, "Home Dbufs").
    """
    pes = params.pe_coords()
    cap = cap or -(-params.num_pes // params.num_dbufs)
    seats = [d for d in range(params.num_dbufs) for _ in range(cap)]
    cost = np.empty((len(pes), len(seats)))
    for j, d in enumerate(seats):
        dx, dy = params.dbuf_coord(d)
        for i, (x, y) in enumerate(pes):
            hops = len(params.route((x, y), (dx, dy)))
            cost[i, j] = hops * hops + (0 if dx == x or dy == y else _BENT)
    rows, cols = linear_sum_assignment(cost)
    homes = {pes[i]: seats[j] for i, j in zip(rows, cols)}
    chosen = pes if count >= len(pes) else sorted(pes, key=lambda p: (
        len(params.route(p, params.dbuf_coord(homes[p]))), p[1], p[0]))[:count]
    chosen = sorted(chosen, key=lambda p: (p[1], p[0]))
    return [(pe, homes[pe]) for pe in chosen]


def link_engines(params, homes):
    """Return the most engines whose Dbuf requests (or replies) cross one mesh link.

    Requests follow :meth:`~sw.spec.arch.ArrayParams.route` from the PE to its home Dbuf, replies
    the route from the Dbuf's edge router back to the PE (separate networks); the Dbuf's own
    port and the PE's ``LOCAL`` port are not counted (the Dbuf term covers the first).
    """
    step = {Dir.EAST: (1, 0), Dir.WEST: (-1, 0), Dir.SOUTH: (0, 1), Dir.NORTH: (0, -1)}
    load = {}
    for pe, d in homes:
        dx, dy = params.dbuf_coord(d)
        edge = (min(max(dx, 0), params.cols - 1), min(max(dy, 0), params.rows - 1))
        for net, src, dst in (("req", pe, (dx, dy)), ("rep", edge, pe)):
            x, y = src
            for port in params.route(src, dst)[:-1]:
                load[net, x, y, port] = load.get((net, x, y, port), 0) + 1
                x, y = x + step[port][0], y + step[port][1]
    return max(load.values(), default=1)
