"""Which DMA channel moves each Dbuf's data (``sw.compiler.dma_plan.assign_channels``, the rule
of the runtime and the performance model; docs/system.md, "The DMA and the external memory").

The DMA-out's rule (``local``): each Dbuf goes to the channel on its own edge, whose stream
then shares no mesh link with the other edges'; while a Dbuf of the busiest channel has fewer
words than that channel has more than the least busy one, the largest such Dbuf moves there.
Checked: even edges stay edge-local (the DMA-out of a layer whose Dbufs hold equal outputs),
uneven loads end balanced to within the stopping rule, words already on a channel count,
fewer channels than edges, edge multicast keeps every Dbuf on its edge (the DMA-in's rule).
"""

import random

import pytest

from sw.compiler import dma_plan
from sw.spec.arch import ArrayParams
from sw.spec.ports import dma_ports

SEED = 7


def _edge_channel(p, channels):
    """Return ``{edge: channel}`` of the edges with a channel's port."""
    out = {}
    for c, k in enumerate(dma_ports(p)[:channels]):
        out.setdefault(dma_plan._edge(p, k), c)
    return out


@pytest.mark.parametrize("rows, cols", [(8, 8), (4, 4), (2, 2)])
def test_even_edges_stay_on_their_own_channel(rows, cols):
    p = ArrayParams(rows=rows, cols=cols)
    words = {d: 2048 for d in range(p.num_dbufs)}
    chan = dma_plan.assign_channels(dict(words), 4, p, local=True)
    home = _edge_channel(p, 4)
    assert all(chan[d] == home[dma_plan._edge(p, d)] for d in words)


def test_out_runs_of_equal_output_blocks_are_edge_local():
    # alexnet-fc8-like output blocks, one run per Dbuf: each on its edge's channel.
    p = ArrayParams()
    reads = [(p.dbuf_base(d) + 4096, 16384) for d in range(p.num_dbufs)]
    runs = dma_plan.out_runs(p, reads, 4)
    home = _edge_channel(p, 4)
    assert len(runs) == p.num_dbufs
    assert all(c == home[dma_plan._edge(p, p.dbuf_of(lo)[0])] for c, lo, _, _ in runs)


@pytest.mark.parametrize("trial", range(20))
def test_uneven_loads_end_balanced_by_the_rule(trial):
    rng = random.Random(SEED + trial)
    print(f"seed {SEED + trial}")
    p = ArrayParams(rows=rng.choice([2, 4, 8]), cols=rng.choice([2, 4, 8]))
    channels = rng.choice([1, 2, 3, 4])
    dbufs = rng.sample(range(p.num_dbufs), rng.randint(1, p.num_dbufs))
    words = {d: rng.choice([1, 8, 100, 2048, rng.randint(1, 5000)]) for d in dbufs}
    before = [rng.choice([0, 0, 500]) if c == 0 else 0 for c in range(channels)]
    load = list(before)
    chan = dma_plan.assign_channels(dict(words), channels, p, load, local=True)
    assert set(chan) == set(words) and all(0 <= c < channels for c in chan.values())
    sums = list(before)
    for d, c in chan.items():
        sums[c] += words[d]
    assert sums == load                    # the loads are updated
    hi, lo = max(load), min(load)
    busiest = [d for d, c in chan.items() if load[c] == hi]
    # The stopping rule: no Dbuf of a busiest channel would even it with the least busy one.
    assert not any(0 < words[d] < hi - lo for d in busiest)
    # At least as even as putting every Dbuf on the least loaded channel in turn, largest
    # first (the classic greedy bound: the spread is at most the largest Dbuf).
    assert hi - lo <= max(max(words.values()), max(before) - min(before))


def test_words_already_on_a_channel_count():
    p = ArrayParams()
    words = {d: 1000 for d in range(p.num_dbufs)}
    load = [4000, 0, 0, 0]                 # channel 0's Cbuf words
    chan = dma_plan.assign_channels(words, 4, p, load, local=True)
    assert sum(c == 0 for c in chan.values()) < sum(c == 1 for c in chan.values())
    assert max(load) - min(load) <= 1000


def test_edge_multicast_keeps_every_dbuf_on_its_edge():
    p = ArrayParams()
    words = {d: 100 * (d + 1) for d in range(p.num_dbufs)}
    chan = dma_plan.assign_channels(words, 4, p, edge=True)
    home = _edge_channel(p, 4)
    assert all(chan[d] == home[dma_plan._edge(p, d)] for d in words)
