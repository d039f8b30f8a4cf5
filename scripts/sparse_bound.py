#!/usr/bin/env python3
"""The zero-skipping graphs against the Dbufs' bound, per density: where the skip graph stops
and what reusing each loaded input would buy (docs/dataflow.md, "The sparse graphs' bound").

A layer is pruned by ``fdpu`` (``sw.compiler.layers.make_weights``) to each density and planned
for the skip graph on the README's array. Per design the table counts, from the layer's own
masks, the Dbuf requests (loads and stores) per FACC step and the rate they allow:
``min(1, Dbufs / PEs / requests per FACC)`` FACC steps per PE-cycle (each Dbuf serves one
request a cycle: 0.5 per PE on the 8 x 8), and the compute time that rate gives against the
dense graph's, ``density x dense rate / rate`` (``--dense-rate``: the dense graph's measured
FACC steps per PE-cycle).

* ``skip`` (built, one row a group): per stored weight and lane group an input load, per stored
  weight a value load shared by ``g`` lane groups, per row a row word and its mask words. The
  line ``skip (golden)`` is the golden model's count of the same plan run (its counters: the
  requests the graph makes, descriptors included), a check of the counting.
* ``reuse r x g``: an input word loaded once per group of ``r`` rows (for the columns any of
  them stores) and sent to those rows' FACCs by a masked multicast (a token to the
  destinations a mask selects), a value load per stored weight and ``g`` lane groups, the
  group's union mask and its per-column row bits (``r`` bits a column, 64 a word) once per
  ``g`` lane groups.
* ``broadcast r x g`` (EIE's order): every input word sent once into the engine (no Dbuf
  request), each FACC of a row that stores its column taking it (an indexed accumulate):
  values and masks only; the engine's input port (one token a cycle) binds when
  ``r x density < 1``.

The shapes kept: for each ``r`` the widest ``g`` whose engine fits the PE's slots
(:func:`engine_slots`, an estimate before such a graph exists: a FACC and its store per row
and lane group dominate).

    python scripts/sparse_bound.py                           # alexnet-fc8, batch 64 and 4
    python scripts/sparse_bound.py --layer vgg16-fc7 --batch 64 --density 0.25 0.04
    python scripts/sparse_bound.py --in-features 1024 --out-features 256 --batch 64
"""

import argparse
import math

import numpy as np

from sw.compiler import layers, planner
from sw.models import golden_fc
from sw.spec.arch import ArrayParams

GROUPS = (1, 2, 4, 8, 16, 32)
# The dense graph's FACC steps per PE-cycle on the 8 x 8 RTL (alexnet-fc8, docs/dataflow.md's
# table: batch 64, and batch 4, one lane group), by lane groups.
DENSE_RATE = {16: 0.961, 1: 0.452}


def masks_and_plan(spec, density, batch, params, seed=0):
    """Return the layer's stored-weight mask (K x C) and its skip plan at ``batch``."""
    w = layers.make_weights(spec, density, seed)
    nnz = np.count_nonzero(w.view(np.uint16), axis=1)
    plan = planner.plan_fc(w.shape[0], w.shape[1], batch, "sparse", params,
                           sparse_graph="skip", row_nnz=nnz)
    return w, w.view(np.uint16) != 0, plan


def union_columns(mask, order, r):
    """Return the columns stored by any row of each group of ``r`` rows taken in ``order``
    (the plan's balanced row order; padding rows left out), summed over the groups."""
    rows = [k for k in order if k < mask.shape[0]]
    return sum(int(np.count_nonzero(mask[rows[i:i + r]].any(axis=0)))
               for i in range(0, len(rows), r))


def requests(mask, order, r, g, lane_groups, broadcast=False):
    """Return (Dbuf requests, FACC steps) of a group-of-``r``-rows design with ``g`` lane groups
    an engine, over ``lane_groups`` lane groups (see the module doc)."""
    K, C = mask.shape
    S = int(mask.sum())
    contexts = math.ceil(lane_groups / g)            # an engine's passes over the lane groups
    groups = math.ceil(K / r)
    U = union_columns(mask, order, r)
    inputs = 0 if broadcast else U * lane_groups
    values = S * contexts
    if r == 1:
        meta = K * (math.ceil(C / 32) + 1) * contexts              # mask words, row word
    else:
        meta = (groups * math.ceil(C / 32) + math.ceil(U * r / 64) + K) * contexts
    outputs = K * lane_groups
    return inputs + values + meta + outputs, S * lane_groups


def _fanout_movs(n):
    """Return the MOVs a tree needs to give one token to ``n`` destinations, 4 a node."""
    return 0 if n <= 4 else -(-(n - 4) // 3)


def engine_slots(r, g, broadcast=False):
    """Return an estimate of the slots an ``r x g`` engine takes (the skip graph's at ``r`` 1):
    a FACC and its store per row and lane group; an input load (not for broadcast) and an
    MCAST per lane group (a tree of them past 4 rows); per row its row word, value ITER and
    value load with a MOV tree to the lane groups; the mask's ITERs, load and BPOS, the row
    bits' ITER and load, the MOV trees that fan their tokens out to the lane groups, the
    context's descriptor loads."""
    mcast = 0 if r == 1 else g * (1 if r <= 4 else 1 + -(-r // 4))
    inputs = 0 if broadcast else g + _fanout_movs(g)
    rows = r * (3 + _fanout_movs(g))
    bits = 0 if r == 1 else 2 + _fanout_movs(g)
    return 2 * r * g + inputs + mcast + rows + 4 + bits + 8


def golden_requests(plan, w, batch):
    """Return (Dbuf requests, FACC steps) the golden model counts running ``plan``."""
    run = golden_fc.run_fc(plan, w, layers.make_inputs(w.shape[1], batch, 0))
    return run.counters.mem_packets // 2, run.counters.ops["FACC"]


def rows_for(mask, order, density, lane_groups, params, dense_rate, golden=None):
    """Return the table rows (design, requests per FACC, rate bound, time x dense)."""
    share = params.num_dbufs / params.num_pes
    out = []

    def row(name, req, facc, port=None):
        per = req / facc
        rate = min(1.0, share / per, port if port else 1.0)
        out.append((name, per, rate, density * dense_rate / rate))

    if golden:
        row("skip (golden)", *golden)
    for r in GROUPS:
        for g in (16, 8, 4, 2, 1):
            if g > lane_groups or engine_slots(r, g) > params.slots or \
                    (r == 1 and g != min(16, lane_groups)):
                continue
            name = "skip 1 x %d" % g if r == 1 else "reuse %d x %d" % (r, g)
            row(name, *requests(mask, order, r, g, lane_groups))
            if r > 1:
                row("broadcast %d x %d" % (r, g),
                    *requests(mask, order, r, g, lane_groups, broadcast=True),
                    port=r * density)
            break                       # the widest g that fits: fewest value loads
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--layer", default="alexnet-fc8", help="a zoo layer (fdpu layers)")
    ap.add_argument("--in-features", type=int, help="C of a random layer (with --out-features)")
    ap.add_argument("--out-features", type=int, help="K of a random layer")
    ap.add_argument("--batch", type=int, nargs="+", default=[64, 4])
    ap.add_argument("--density", type=float, nargs="+", default=[0.25, 0.09, 0.04])
    ap.add_argument("--dense-rate", type=float,
                    help="the dense graph's FACC steps per PE-cycle at the batch (default: "
                         "the 8 x 8 RTL's, docs/dataflow.md: 0.961 from 16 lane groups, 0.452 "
                         "at one; other batches need it)")
    ap.add_argument("--no-golden", action="store_true", help="skip the golden model's count")
    args = ap.parse_args(argv)
    params = ArrayParams()
    if (args.in_features is None) != (args.out_features is None):
        ap.error("--in-features and --out-features go together")
    for density in args.density:
        if not 0 < density <= 1:
            ap.error(f"--density {density}: must be in (0, 1]")
    for batch in args.batch:
        if batch < 1:
            ap.error(f"--batch {batch}: must be at least 1")
    for batch in args.batch:
        lane_groups = math.ceil(batch / params.LANES)
        dense_rate = args.dense_rate or DENSE_RATE.get(min(lane_groups, 16))
        if dense_rate is None:
            ap.error(f"--batch {batch}: no measured dense rate at {lane_groups} lane groups; "
                     "give --dense-rate")
        for density in args.density:
            spec = ((args.out_features, args.in_features) if args.in_features
                    else layers.get_layer(args.layer))
            w, mask, plan = masks_and_plan(spec, density, batch, params)
            golden = None if args.no_golden else golden_requests(plan, w, batch)
            name = args.layer if not args.in_features else "%dx%d" % mask.shape
            print(f"\n{name}, batch {batch} ({lane_groups} lane groups), density "
                  f"{mask.mean():.3f}, {params.rows} x {params.cols}: ideal time x dense "
                  f"{mask.mean():.3f}")
            print(f"{'design':18} {'req/FACC':>9} {'rate':>6} {'x dense':>8}")
            for design, per, rate, ratio in rows_for(mask, plan.rows, float(mask.mean()),
                                                     lane_groups, params, dense_rate,
                                                     golden):
                print(f"{design:18} {per:9.3f} {rate:6.3f} {ratio:8.3f}")


if __name__ == "__main__":
    main()
