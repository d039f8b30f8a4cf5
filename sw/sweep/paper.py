"""The paper's evaluation as a sweep: its layers, batches and graphs, and what it states.

PAPER.md section 7: AlexNet FC6 (9 % of the weights kept), AlexNet FC8 (25 %) and VGG-16 FC7
(4 %) at batch 1, 4 and 64, dense and sparse, on the 8 x 8 FDPU; the metric is the computing-
resource utilization (achieved operation rate / peak, 512 Gop/s: 64 PEs x 4 lanes x 2
operations per cycle at 1 GHz, the same peak as here).  :func:`points` gives the sweep's
points (each graph of this project: ``dense``, the paper's ``switch`` graph, the branch-free
``gather`` graph with the same bits, and the ``skip`` graph whose work is the stored weights
only); :data:`STATEMENTS` the paper's claims the report sets beside ours; :func:`summary`
computes ours from the records.

PAPER.md section 6 also says convolution layers "could use the same scheme but gain little
(weights are a small share of their data)".  :data:`CONV_LAYERS` (AlexNet's five, run as
matrix multiplications: :mod:`sw.compiler.conv`) at the same batches, dense, with the paper's
SWITCH graph and with the skip graph (:data:`CONV_GRAPHS`), test it; :data:`CONV_STATEMENT`
is the sentence and :func:`conv_summary` our figures per layer and batch.
"""

from sw.compiler.graph_kinds import GRAPHS as KINDS
from sw.compiler.graph_kinds import graph_kind

__all__ = ["LAYERS", "CONV_LAYERS", "BATCHES", "GRAPHS", "CONV_GRAPHS", "SOURCES",
           "STATEMENTS", "CONV_STATEMENT", "LANES", "points", "graph_of", "paper_utilization",
           "summary", "conv_summary"]

#: The paper's layers (zoo names), each pruned to the density the paper gives.
LAYERS = ("alexnet-fc6", "alexnet-fc8", "vgg16-fc7")
#: AlexNet's convolution layers (the zoo's, pruned to Deep Compression's densities).
CONV_LAYERS = ("alexnet-conv1", "alexnet-conv2", "alexnet-conv3", "alexnet-conv4",
               "alexnet-conv5")
#: Its batch sizes.
BATCHES = (1, 4, 64)
#: The graphs run: every graph kind the planner may pick, ``dense`` first
#: (:data:`sw.compiler.graph_kinds.GRAPHS`; a kind that runs only when named is left out).
GRAPHS = tuple(name for name, kind in KINDS.items() if kind.auto)
#: The graphs a convolution runs with: dense, the paper's sparse graph and the skip graph.
CONV_GRAPHS = ("dense", "switch", "skip")
#: Where the figures come from: ``--sim`` of each point.
SOURCES = {"model": "model", "rtl": "verilator"}
#: The paper's statements (PAPER.md section 7), keyed as :func:`summary` keys ours.
STATEMENTS = {
    "small_batch_gap": "at batch 1 and 4, sparse and dense utilization differ by at most "
                       "1.4 points",
    "batch64_gap": "at batch 64, the sparse graph's utilization is 11.7 points lower than "
                   "dense on average",
    "bandwidth_ratio": "sparse needs 2.44x to 6.17x less peak memory bandwidth than dense",
    "across_sparsity": "utilization is nearly the same across the three sparsities",
    "vs_cpu_gpu": "at batch 64, sparse utilization is 43.15, 34.57 and 44.24 points above CPU "
                  "(Core i7-5930K), GPU (Titan X) and mobile GPU (Tegra K1)",
}

#: The paper's sentence on convolution layers (PAPER.md section 6), and its figures: at batch
#: 64 AlexNet's five convolution layers' weights are 0.35, 9.43, 19.35, 19.35 and 13.79 % of
#: their input data.
CONV_STATEMENT = ("convolution layers could use the same scheme but gain little (weights are "
                  "a small share of their data; at batch 64, 0.35 %, 9.43 %, 19.35 %, 19.35 % "
                  "and 13.79 % of the input data of AlexNet's five)")


#: Batch elements a PE computes at once (a lane group); a batch of 1 fills one lane of four.
LANES = 4


def paper_utilization(result):
    """Return the paper's metric of a record's ``result``: floating-point operations executed
    for real batch elements / (peak x compute cycles).

    That is the FP issue utilization without the lanes of padding (batch 1 fills one lane of
    a group of four): the multiply-adds of every weight position a graph executes, the zero
    weights the SWITCH and gather graphs multiply included (the paper counts them so: its
    sparse graph "executes a multiply-add for every weight"), the skip graph's stored weights
    only.
    """
    n = result["N"]
    return result["issue_utilization"] * n / (LANES * -(-n // LANES))


def points(source, layers=LAYERS, batches=BATCHES, graphs=GRAPHS):
    """Return the sweep points of the evaluation: the paper's graphs (dense, switch) first, then
    this project's, each over the layers (in the order given) and batches."""
    sim = SOURCES[source]
    order = [g for g in GRAPHS if g in graphs and g in ("dense", "switch", "skip")] + \
        [g for g in GRAPHS if g in graphs and g not in ("dense", "switch", "skip")]
    out = []
    for rank in (0, 1):
        for layer in layers:
            for batch in batches:
                for g in order:
                    if (g == "gather") != bool(rank):
                        continue
                    if layer in CONV_LAYERS and g not in CONV_GRAPHS:
                        continue
                    kind = KINDS[g]
                    p = dict(sim=sim, layer=layer, batch=batch, mode=kind.mode)
                    if kind.sparse:
                        p["sparse-graph"] = g
                    out.append(p)
    return out


def graph_of(record):
    """Return the graph of a record's point: ``dense`` or the sparse graph's name."""
    p = record["point"]
    return graph_kind(p.get("mode"), p.get("sparse-graph")).name


def _by(records):
    return {(r["point"]["layer"], r["point"]["batch"], graph_of(r)): r["result"]
            for r in records}


def summary(records, metric=paper_utilization):
    """Return our figures for each of :data:`STATEMENTS`, per sparse graph: ``{statement:
    {graph: value}}`` (``None`` where the points are missing).

    ``metric(result)`` is the utilization compared, by default :func:`paper_utilization`.
    """
    by = {k: dict(v, metric=metric(v)) for k, v in _by(records).items()}
    layers = sorted({k[0] for k in by})
    out = {k: {} for k in STATEMENTS}
    for g in sorted({k[2] for k in by} - {"dense"}):
        def gaps(batches):
            d = [by[(l, b, g)]["metric"] - by[(l, b, "dense")]["metric"]
                 for l in layers for b in batches
                 if (l, b, g) in by and (l, b, "dense") in by]
            return d
        small = gaps((1, 4))
        big = gaps((64,))
        out["small_batch_gap"][g] = max((abs(v) for v in small), default=None)
        out["batch64_gap"][g] = -sum(big) / len(big) if big else None
        ratios = [by[(l, b, "dense")]["peak_bandwidth"] / by[(l, b, g)]["peak_bandwidth"]
                  for l in layers for b in BATCHES
                  if (l, b, g) in by and (l, b, "dense") in by
                  and by[(l, b, g)]["peak_bandwidth"]]
        out["bandwidth_ratio"][g] = (min(ratios), max(ratios)) if ratios else None
        spread = []
        for b in BATCHES:
            vals = [by[(l, b, g)]["metric"] for l in layers if (l, b, g) in by]
            if len(vals) > 1:
                spread.append(max(vals) - min(vals))
        out["across_sparsity"][g] = max(spread) if spread else None
        at64 = [by[(l, 64, g)]["metric"] for l in layers if (l, 64, g) in by]
        out["vs_cpu_gpu"][g] = sum(at64) / len(at64) if at64 else None
    return out


def conv_summary(records):
    """Return our figures on the convolution layers: per ``(layer, batch)`` with a dense
    record, the weights' share of the input data (dense binary16 weights over the batch's
    un-unrolled input bytes), and per graph the compute cycles, their ratio to dense, the
    external bytes and their ratio to the layer's minimum."""
    by = _by(records)
    out = {}
    for (layer, batch, g), res in sorted(by.items()):
        if layer not in CONV_LAYERS or g != "dense":
            continue
        row = dict(weights_share=2 * res["K"] * res["C"] / res["input_bytes"], graphs={})
        for h in CONV_GRAPHS:
            other = by.get((layer, batch, h))
            if other is None:
                continue
            row["graphs"][h] = dict(
                compute=other["compute_cycles"], cycles=other["cycles"],
                vs_dense=other["compute_cycles"] / max(1, res["compute_cycles"]),
                external=other["external_bytes"], minimum=other["min_external_bytes"],
                vs_min=other["external_bytes"] / max(1, other["min_external_bytes"]))
        out[(layer, batch)] = row
    return out
