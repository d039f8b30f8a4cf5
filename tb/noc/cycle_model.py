"""A cycle-level Python model of the mesh, to compare router buffer organisations quickly.

Not a golden model (the RTL is checked by scoreboards, not against this): a design tool.  It
reproduces the RTL's timing rules: one cycle per router, an input accepts a flit when its
buffer had a free slot at the start of the cycle (``ready`` is a function of state), each
output grants one input round-robin, a flit accepted in a cycle cannot leave in the same
cycle, Bernoulli injection into unbounded source queues, ejection always ready.  The buffer
organisations:

* ``window=1``: one FIFO per input (the first router: only the head is seen);
* ``window=k``: the arbiters see the ``k`` oldest flits of an input; a flit is eligible if no
  older flit in the window goes to the same output (order per output kept);
* ``multi``: several outputs may take a flit of the same input in one cycle;
* ``window=depth, multi=True``: the virtual output queues of :class:`hw.noc.router.VoqBuffer`.

On 8 x 8, uniform, single-flit packets, offered 0.5 (saturation throughput, flits/node/cycle):
FIFO depth 4: 0.356 (the RTL measured 0.36), depth 8: 0.391, depth 16: 0.404; window 2 of 4:
0.394; VOQ depth 3: 0.396, depth 4: 0.430, depth 8: 0.470.  ``python -m tb.noc.cycle_model``
prints that table (about a minute).
"""

import random
from collections import deque

from sw.spec.arch import ArrayParams, Dir

__all__ = ["simulate"]

_STEP = {Dir.NORTH: (0, -1), Dir.EAST: (1, 0), Dir.SOUTH: (0, 1), Dir.WEST: (-1, 0)}
_OPPOSITE = {Dir.NORTH: Dir.SOUTH, Dir.SOUTH: Dir.NORTH, Dir.EAST: Dir.WEST,
             Dir.WEST: Dir.EAST}


def simulate(rows=8, cols=8, rate=0.5, *, depth=4, window=1, multi=False, pattern="uniform",
             cycles=4000, warmup=1000, seed=1):
    """Run the model; return ``(offered, accepted, average latency)`` over the window.

    Rates are flits/node/cycle; latency is ejection - injection + 1 cycles, as in
    ``fdpu noc-bench``.  ``pattern`` is ``"uniform"`` or ``"transpose"``.
    """
    p = ArrayParams(rows=rows, cols=cols, slots=64, operand_depth=4, int_issue=1)
    rng = random.Random(seed)
    coords = p.pe_coords()
    buffers = {c: [[] for _ in Dir] for c in coords}
    last = {c: [len(Dir) - 1] * len(Dir) for c in coords}
    queues = {c: deque() for c in coords}
    generated = ejected = latency = 0
    for t in range(cycles):
        # ``ready`` of the LOCAL inputs is decided by the state at the start of the cycle.
        room = {c: len(buffers[c][Dir.LOCAL]) < depth for c in coords}
        moves = []
        for c in coords:
            offers = {}                                  # output -> [(input, index)]
            for d in Dir:
                seen = set()
                for i, (dst, _) in enumerate(buffers[c][d][:window]):
                    out = p.route(c, dst)[0]
                    if out not in seen:
                        seen.add(out)
                        offers.setdefault(out, []).append((d, i))
            busy = set()
            for out in Dir:
                candidates = [(d, i) for d, i in offers.get(out, []) if multi or d not in busy]
                if not candidates:
                    continue
                d, i = min(candidates, key=lambda di: ((di[0] - last[c][out] - 1) % len(Dir),
                                                       di[1]))
                target = None
                if out is not Dir.LOCAL:
                    nx, ny = c[0] + _STEP[out][0], c[1] + _STEP[out][1]
                    if (nx, ny) in buffers:
                        target = ((nx, ny), _OPPOSITE[out])
                        if len(buffers[nx, ny][_OPPOSITE[out]]) >= depth:
                            continue                    # full at the start of the cycle
                busy.add(d)
                last[c][out] = d
                moves.append((c, d, i, target))
        taken = sorted(moves, key=lambda mv: -mv[2])     # highest index first: stable deletes
        leaving = [(buffers[c][d][i], target) for c, d, i, target in moves]
        for c, d, i, _ in taken:
            del buffers[c][d][i]
        for flit, target in leaving:
            if target is None:
                if t >= warmup:
                    ejected += 1
                    latency += t - flit[1] + 1
            else:
                buffers[target[0]][target[1]].append(flit)
        for (x, y) in coords:
            if rng.random() < rate:
                dst = (y, x) if pattern == "transpose" else (rng.randrange(cols),
                                                             rng.randrange(rows))
                queues[x, y].append(dst)
                generated += t >= warmup
            if queues[x, y] and room[x, y]:
                buffers[x, y][Dir.LOCAL].append((queues[x, y].popleft(), t))
    n = rows * cols * (cycles - warmup)
    return generated / n, ejected / n, latency / max(ejected, 1)


if __name__ == "__main__":
    for name, kw in [("FIFO depth 4", dict(depth=4)), ("FIFO depth 8", dict(depth=8)),
                     ("FIFO depth 16", dict(depth=16)),
                     ("window 2 of 4", dict(depth=4, window=2)),
                     ("VOQ depth 3", dict(depth=3, window=3, multi=True)),
                     ("VOQ depth 4", dict(depth=4, window=4, multi=True)),
                     ("VOQ depth 8", dict(depth=8, window=8, multi=True))]:
        offered, accepted, lat = simulate(rate=0.5, **kw)
        print(f"{name:14s} offered {offered:.3f} accepted {accepted:.3f} latency {lat:.1f}",
              flush=True)
