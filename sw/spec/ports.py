"""Where the MicC's configuration ports and the DMA channels attach to the array's edge.

An R x C mesh has ``2 (R + C)`` free edge ports, one Dbuf each (:class:`sw.spec.arch.ArrayParams`
numbers them).  The MicC and the DMA channels share some of them: one per array edge first,
each at a corner, so that with XY routing the flits of each port to its quadrant use links no
other port uses.  ``hw.top`` wires the ports here; the compiler (:mod:`sw.compiler.image`) and
the runtime (:mod:`tb.host.job_plan`) split the work over them.
"""

import numpy as np

from sw.spec.errors import FdpuError

__all__ = ["MAX_CONFIG_PORTS", "config_ports", "config_port_of", "dma_ports"]


#: The most configuration ports (one per array edge).
MAX_CONFIG_PORTS = 4


def config_ports(params, ports):
    """Return the edge coordinates of ``ports`` configuration ports, port 0 first.

    Port 0 is the MicC's own port west of row 0; ports 1, 2, 3 sit east of the last row,
    north of the last column and south of column 0 (the DMA channels' ports,
    ``hw.top.dma_ports``): one per array edge, each at a corner, so that with XY routing the
    flits of each port to its quadrant use links no other port uses.
    """
    if not isinstance(ports, int) or isinstance(ports, bool) \
            or not 1 <= ports <= MAX_CONFIG_PORTS:
        raise FdpuError(f"configuration ports must be an integer in 1..{MAX_CONFIG_PORTS} (one "
                        f"per array edge), got {ports!r}")
    if params.cbufs % ports:
        raise FdpuError(f"configuration ports ({ports}) must divide the Cbufs "
                        f"({params.cbufs}): each port reads its own Cbuf banks")
    r, c = params.rows, params.cols
    return [(-1, 0), (c, r - 1), (c - 1, -1), (0, r)][:ports]


def config_port_of(params, ports):
    """Return ``int[rows, cols]``: the configuration port of every PE (the nearest in hops).

    Ties go to the lower port number.
    """
    coords = np.array(config_ports(params, ports))
    ys, xs = np.mgrid[0:params.rows, 0:params.cols]
    hops = (np.abs(xs[..., None] - coords[:, 0]) + np.abs(ys[..., None] - coords[:, 1]))
    return np.argmin(hops, axis=2)


def dma_ports(params):
    """Return the edge ports (Dbuf numbers) of the DMA channels, channel 0 first.

    Channel 0 shares the MicC's port, west of row 0; channels 1, 2, 3 sit at the east port of
    the last row, the north port of the last column and the south port of column 0, so that
    each edge has a channel and a channel writing the Dbufs of its own edge uses links no
    other such channel uses (west: column 0 southwards, east: column C-1 northwards, north:
    row 0 westwards, south: row R-1 eastwards; ``tb.host.job_plan`` assigns Dbufs that way).  More
    channels take the remaining west, east, north and south ports.
    """
    p = params
    first = [p.dbuf_at(-1, 0), p.dbuf_at(p.cols, p.rows - 1), p.dbuf_at(p.cols - 1, -1),
             p.dbuf_at(0, p.rows)]
    rest = [p.dbuf_at(-1, y) for y in range(p.rows)] + [p.dbuf_at(p.cols, y)
                                                        for y in range(p.rows)]
    rest += [p.dbuf_at(x, -1) for x in range(p.cols)] + [p.dbuf_at(x, p.rows)
                                                        for x in range(p.cols)]
    out = []
    for k in first + rest:
        if k not in out:
            out.append(k)
    return out
