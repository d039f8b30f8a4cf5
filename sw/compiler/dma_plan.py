"""How a pass's Dbuf data becomes DMA descriptors: runs, channels and multicast windows.

Contract
--------
One set of rules for the runtime that writes the descriptors (``tb.host.job_plan``, with the
bytes) and the performance model that counts them (``sw.models.perf``, with sizes only), so the
two agree byte for byte:

* :func:`merge_runs`: the segments of one Dbuf closer than :data:`MERGE_GAP` bytes share a
  descriptor (whole words, the zeros between them included); no run reaches over a *barrier*
  (a multicast segment, loaded by its own descriptor).
* :func:`assign_channels`: each Dbuf's data go over one channel (a Dbuf takes one request per
  cycle; splitting it over channels would only make them wait for each other); the Dbufs go,
  most words first, to the channel on their own edge (``sw.spec.ports.dma_ports``: its stream
  then shares no link with the other edges'; an edge without a channel: the least loaded).
  The DMA-in's go to the least loaded channel instead as soon as their edge's is ahead of it
  by more than their words (never, with edge multicast); the DMA-out's (``local``) stay, and
  then, while a Dbuf of the busiest channel has fewer words than that channel has more than
  the least busy one, the largest such Dbuf moves to the least busy (edge-local where the
  edges' words are even, balanced where they are not).
* :func:`multicast_windows`: a block that several Dbufs hold at the same offset is loaded by
  one descriptor per channel and window of ``1 + COPIES_BITS`` consecutive Dbufs
  (``sw.spec.dma``): its bytes cross the external port once per window, not once per Dbuf.
* :func:`delivery_windows` (edge multicast, ``System.edge_multicast``): first, the block's
  Dbufs that one MSTORE flit from the channel's port reaches together
  (:func:`sw.spec.dma.edge_targets`, at least two, all of them the channel's and the
  block's) take one ``mcast`` descriptor each, the largest first: its words cross the
  channel's request port once however many Dbufs take them; the rest go by
  :func:`multicast_windows`.  With the channels on their own edges (above) a block that
  every Dbuf holds is one descriptor per channel; given the blocks' sizes, its edge lines are
  then dealt over the channels (a channel's lines in one ``mcast`` descriptor with
  ``copies``, the block possibly in two halves: :func:`part_range`) where that reads it fewer
  times with no channel sending more words: on the 8 x 8, twice instead of four times.
* :func:`move_windows`: a chained layer's on-chip copies (MOVE descriptors) go first, each
  destination Dbuf on one channel, one descriptor per channel and multicast window; the words
  they send count in the channels' load before the pass's own data are assigned.
* Early start (contexts start when their own data are in, ``docs/system.md``): the pass's
  contexts form *groups* of ``2 ** gate_shift(contexts)`` (:func:`gate_shift`: at most
  :data:`MAX_GROUPS` groups); each segment belongs to the group of the first context that
  reads it (:func:`group_of`), and every channel loads its segments group by group, with a
  *fence* (an empty descriptor) after each group up to its last one with data.  Runs merge
  only within a group (:func:`group_runs`), so that no run writes over another group's
  bytes, nor over the outputs between them, which contexts of earlier groups may already
  have written.
"""

import functools
from typing import NamedTuple

from sw.spec.dma import COPIES_BITS, DescFlag, copy_targets, edge_targets, written_dbufs
from sw.spec.ports import dma_ports

__all__ = ["MERGE_GAP", "MAX_GROUPS", "merge_runs", "assign_channels", "multicast_windows",
           "Window", "part_range", "delivery_windows", "sent_words", "move_windows",
           "gate_shift", "group_of", "group_runs", "block_group", "fence_groups", "out_runs"]

#: Segments of one Dbuf closer than this (bytes) share one DMA descriptor: the zeros between
#: them cost fewer DMA cycles than a descriptor more (about the memory latency).
MERGE_GAP = 256

#: Early start: a pass's contexts form at most this many groups, one fence each per channel
#: (a fence costs a descriptor fetch and the round trip of the last STORE's ack).
MAX_GROUPS = 64


def _edge(params, k):
    """Return the edge (0 north, 1 east, 2 south, 3 west) of Dbuf ``k``."""
    x, y = params.dbuf_coord(k)
    return 0 if y < 0 else 1 if x >= params.cols else 2 if y >= params.rows else 3


def merge_runs(spans, params, barriers=(), groups=None):
    """Return ``[(lo, hi, [indices into spans])]``: whole-word runs of ``spans``.

    ``spans``: ``(global address, bytes)``; overlapping or touching spans merge, and so do
    spans of one Dbuf less than :data:`MERGE_GAP` bytes apart; ``barriers``: spans no run
    may reach over (they are not in the result); ``groups`` (``groups[i]``: the group of
    ``spans[i]``, default all one): only spans of one group merge, and a span of another
    group between two is a barrier to them.
    """
    marks = [(a & ~7, -(-(a + n) // 8) * 8, i) for i, (a, n) in enumerate(spans) if n]
    marks += [(a & ~7, -(-(a + n) // 8) * 8, -1) for a, n in barriers if n]
    runs, cut = [], False
    for lo, hi, i in sorted(marks):
        if i < 0:
            cut = True
            continue
        if runs and not cut and lo <= runs[-1][1] + MERGE_GAP and \
                params.dbuf_of(lo)[0] == params.dbuf_of(runs[-1][0])[0] and \
                (groups is None or groups[i] == groups[runs[-1][2][0]]):
            runs[-1][1] = max(runs[-1][1], hi)
            runs[-1][2].append(i)
        else:
            runs.append([lo, hi, [i]])
        cut = False
    return [tuple(r) for r in runs]


def assign_channels(words, channels, params, load=None, edge=False, local=False):
    """Return ``{dbuf: channel}`` for ``words`` (``{dbuf: words it moves}``) over ``channels``
    DMA channels (see the module doc); ``load`` (words already on each channel) is updated.
    ``edge`` (edge multicast): a Dbuf on an edge with a channel always goes to it (one
    MSTORE from that channel writes the edge's Dbufs together, so their words do not add
    up on its port the way ``words`` counts them); an edge without one goes whole to the
    channel whose flit reaches most of its Dbufs (:func:`sw.spec.dma.edge_targets`; the
    least loaded of those), decided before any Dbuf is assigned.  ``local`` (the DMA-out): every
    Dbuf first on its edge's channel, then only a Dbuf that evens the busiest channel with the
    least busy moves (module doc); without either, a Dbuf leaves its edge's channel as soon
    as that channel is ahead of the least loaded one by more than its words."""
    load = [0] * channels if load is None else load
    ports = dma_ports(params)[:channels]
    home = {}
    for c, k in enumerate(ports):
        home.setdefault(_edge(params, k), c)
    if edge:
        for e in sorted({_edge(params, k) for k in words} - set(home)):
            side = [k for k in range(params.num_dbufs) if _edge(params, k) == e]
            reach = [max(sum(d in side for d in edge_targets(params, port, k)) for k in side)
                     for port in ports]
            home[e] = min(range(channels), key=lambda c: (-reach[c], load[c]))
    chan = {}
    for k in sorted(words, key=lambda k: (-words[k], k)):
        least = min(range(channels), key=lambda i: load[i])
        c = home.get(_edge(params, k), least)
        if load[c] > load[least] + words[k] and not edge and not local:
            c = least
        load[c] += words[k]
        chan[k] = c
    if not local:
        return chan
    # Then, while a Dbuf of the busiest channel would even it with the least busy one (its
    # words below their difference), the largest such Dbuf moves there: every Dbuf stays on
    # its own edge's channel unless the channels' loads differ by more than it.
    while True:
        hi = max(range(channels), key=lambda i: (load[i], -i))
        lo = min(range(channels), key=lambda i: (load[i], i))
        fit = [k for k, c in chan.items() if c == hi and 0 < words[k] < load[hi] - load[lo]]
        if not fit:
            return chan
        k = max(fit, key=lambda k: (words[k], -k))
        chan[k], load[hi], load[lo] = lo, load[hi] - words[k], load[lo] + words[k]


def multicast_windows(groups, params, chan):
    """Return ``[(channel, global address of the first copy, copies mask, group index)]``.

    ``groups``: per block, the global addresses of its copies (the same offset of several
    Dbufs); ``chan``: Dbuf -> channel.  Each channel's Dbufs of a group are cut into windows
    of ``1 + COPIES_BITS`` consecutive Dbufs, one descriptor each.
    """
    out = []
    for g, addrs in enumerate(groups):
        off = params.dbuf_of(addrs[0])[1]
        per = {}
        for d in sorted({params.dbuf_of(a)[0] for a in addrs}):
            per.setdefault(chan[d], []).append(d)
        for c in sorted(per):
            dl = per[c]
            while dl:
                first = dl[0]
                win = [d for d in dl if d <= first + COPIES_BITS]
                dl = dl[len(win):]
                out.append((c, params.dbuf_base(first) + off,
                            sum(1 << (d - first - 1) for d in win[1:]), g))
    return out


class Window(NamedTuple):
    """One descriptor of a block: its ``channel``; ``lo``, the global address in its first
    Dbuf (of the whole block: add :func:`part_range`'s start for the part it loads);
    ``copies``, its multicast mask; ``group``, the block's index; ``flags``,
    :class:`sw.spec.dma.DescFlag` (``MCAST`` or none); ``targets``, the Dbufs it writes;
    ``part``, ``(i, n)``: it loads the ``i``-th of ``n`` near-equal word ranges of the block
    (:func:`part_range`; ``(0, 1)``: all of it; a block is cut only when each part has a
    word, so no part is empty)."""
    channel: int
    lo: int
    copies: int
    group: int
    flags: DescFlag
    targets: list
    part: tuple = (0, 1)


def part_range(nbytes, part):
    """Return ``(start, bytes)`` of part ``(i, n)`` of a block of ``nbytes`` (whole words, the
    first parts a word longer where the words do not divide)."""
    i, n = part
    words, extra = divmod(nbytes // 8, n)
    start = i * words + min(i, extra)
    return 8 * start, 8 * (words + (i < extra))


def delivery_windows(groups, params, chan, edge=False, sizes=None):
    """Return the :class:`Window` descriptors that load ``groups`` (per block, the global
    addresses of its copies at one offset; ``chan``: Dbuf -> channel): with ``edge``, the
    edge-multicast ones first (module doc), with ``sizes`` (per block its bytes) shared
    across channels where that reads the block fewer times (:func:`_deal`), then
    :func:`multicast_windows` of the rest.  Every kind writes only the block's own Dbufs, at
    its offset: a MOVE's windows (no ``sizes``: they read no external byte) write exactly the
    ranges its copies would."""
    ports = dma_ports(params)
    channels = tuple(sorted(set(chan.values())))
    out, rest, index = [], [], []
    for g, addrs in enumerate(groups):
        off = params.dbuf_of(addrs[0])[1]
        mine = []
        left = _edge_cover(addrs, params, chan, ports, mine, g, edge)
        left_addrs = [params.dbuf_base(d) + off for d in left]
        if sizes is not None and mine:
            # What the block's other windows put on each channel (one STORE a word and Dbuf).
            words = sizes[g] // 8
            base = [0] * (1 + max(channels))
            for c, lo, copies, _ in multicast_windows([left_addrs] if left else [], params,
                                                       chan):
                base[c] += words * len(copy_targets(0, copies))
            lines = tuple((w.channel, params.dbuf_of(w.lo)[0], frozenset(w.targets))
                          for w in mine)
            mine = [Window(c, params.dbuf_base(first) + off, copies, g, DescFlag.MCAST,
                           written_dbufs(params, ports[c], first, copies, True), part)
                    for c, first, copies, part in _deal(params, channels, lines, sizes[g],
                                                        tuple(base))]
        out.extend(mine)
        if left:
            rest.append(left_addrs)
            index.append(g)
    for c, lo, copies, r in multicast_windows(rest, params, chan):
        first = params.dbuf_of(lo)[0]
        out.append(Window(c, lo, copies, index[r], DescFlag(0), copy_targets(first, copies)))
    return out


def _descriptors(assign):
    """Return ``{channel: [[targets of one descriptor]]}`` of ``assign`` (``[(channel,
    target)]``): each channel's targets ascending, cut where one lies past ``COPIES_BITS``
    + 1 of its descriptor's first."""
    per = {}
    for c, t in sorted(assign):
        runs = per.setdefault(c, [])
        if runs and t - runs[-1][0] <= COPIES_BITS:
            runs[-1].append(t)
        else:
            runs.append([t])
    return per


@functools.lru_cache(maxsize=256)
def _deal(params, channels, lines, nbytes, base):
    """Return ``[(channel, first target, copies, part)]``: the edge-multicast descriptors that
    send a block of ``nbytes`` to its edge ``lines`` (``(channel, target, Dbufs)`` each: one
    flit a word from that channel to that target writes those Dbufs), ``base`` the requests
    the block's other windows put on each channel.

    A line may go to any of ``channels`` whose flit reaches exactly its Dbufs (to some target
    of the line: :func:`sw.spec.dma.edge_targets`).  A channel that takes several lines sends
    each word to each of them from one descriptor (``mcast`` with ``copies``: one read, a
    flit a word and target), and the block may be cut in two parts dealt differently.  Of
    every such dealing the one taken puts the fewest words on the busiest channel (the
    DMA-in's time; the MLOAD a target aside), then reads the fewest words (external bytes),
    then has the fewest descriptors; the lines as they come count among them, so nothing
    gets worse.  On the 8 x 8 with four channels a block every Dbuf holds is read twice
    instead of four times: each half by two channels, each sending it to two edge lines.
    """
    ports = dma_ports(params)
    choices = [sorted({(c, t) for c in channels for t in line
                       if set(edge_targets(params, ports[c], t)) == line} | {(c0, t0)})
               for c0, t0, line in lines]
    dealings = [[]]
    if len(lines) <= 6:                      # at most 4 ** 6 dealings
        for ch in choices:
            dealings = [d + [x] for d in dealings for x in ch]
    else:
        dealings = [[(c, t) for c, t, _ in lines]]

    def cost(parts):
        # ``parts``: [(dealing, (i, n))], the i-th of n parts of the block.
        sent, reads, descs = list(base), 0, 0
        for d, part in parts:
            words = part_range(nbytes, part)[1] // 8
            for c, runs in _descriptors(d).items():
                sent[c] += sum(words * len(r) for r in runs)     # (and an MLOAD a target)
                reads += words * len(runs)
                descs += len(runs)
        return max(sent), reads, descs
    costs = [cost([(d, (0, 1))]) for d in dealings]
    whole = min(range(len(dealings)), key=costs.__getitem__)
    best, least = [(dealings[whole], (0, 1))], costs[whole]
    if nbytes >= 16:
        # Halves dealt differently: pairs of the dealings that read the block fewest times.
        pool = sorted(range(len(dealings)), key=lambda i: (costs[i][1], costs[i]))[:16]
        for a in pool:
            for b in pool:
                halves = [(dealings[a], (0, 2)), (dealings[b], (1, 2))]
                c = cost(halves)
                if c < least:
                    best, least = halves, c
    return [(c, r[0], sum(1 << (t - r[0] - 1) for t in r[1:]), part)
            for d, part in best for c, runs in sorted(_descriptors(d).items()) for r in runs]


def _edge_cover(addrs, params, chan, ports, out, g, edge):
    """Append block ``g``'s edge-multicast windows to ``out``; return the Dbufs left."""
    off = params.dbuf_of(addrs[0])[1]
    left = sorted({params.dbuf_of(a)[0] for a in addrs})
    while edge:
        best = None
        for t in left:
            c = chan[t]
            reach = edge_targets(params, ports[c], t)
            if len(reach) > 1 and all(d in left and chan[d] == c for d in reach) \
                    and (best is None or len(reach) > len(best[1])):
                best = (t, reach)
        if best is None:
            break
        t, reach = best
        out.append(Window(chan[t], params.dbuf_base(t) + off, 0, g, DescFlag.MCAST,
                          list(reach)))
        left = [d for d in left if d not in reach]
    return left


def sent_words(window, nbytes):
    """Return the requests a :class:`Window` of a block of ``nbytes`` sends on its channel's
    port for its part: one STORE per word and target, or one MSTORE per word and target and
    an MLOAD per target (edge multicast)."""
    words = part_range(nbytes, window.part)[1] // 8
    if window.flags & DescFlag.MCAST:
        return (words + 1) * len(copy_targets(0, window.copies))
    return words * len(window.targets)


def move_windows(moves, params, channels, load, edge=False):
    """Return ``[(channel, move, window)]``: the MOVE descriptors of ``moves``
    (``sw.compiler.chain.Move``: a source and the destinations of its copies, in order; each
    ``window`` a :class:`Window`).  The destination Dbufs are assigned to channels by their
    words (:func:`assign_channels`, which adds them to ``load``), each move cut into
    :func:`delivery_windows` (``edge``: edge multicast), and every descriptor's words are
    added to its channel's ``load`` too (``load`` is updated in place)."""
    words = {}
    for m in moves:
        for a in m.dsts:
            d = params.dbuf_of(a)[0]
            words[d] = words.get(d, 0) + m.nbytes // 8
    chan = assign_channels(words, channels, params, load, edge)
    out = []
    for m in moves:
        for w in delivery_windows([list(m.dsts)], params, chan, edge):
            out.append((w.channel, m, w))
            load[w.channel] += m.nbytes // 8
    return out


def gate_shift(contexts):
    """Return the early start's group size as a shift: the smallest ``s`` with
    ``ceil(contexts / 2 ** s) <= MAX_GROUPS`` (the top's ``i_gate_shift``)."""
    s = 0
    while -(-contexts // (1 << s)) > MAX_GROUPS:
        s += 1
    return s


def group_of(first, shift):
    """Return ``{address: group}`` of the segments whose first reading context is
    ``first[address]`` (``sw.compiler.dbuf_layout.first_use``), groups of ``2 ** shift``."""
    return {a: c >> shift for a, c in first.items()}


def group_runs(spans, groups, params, barriers=()):
    """Return ``[(group, lo, hi, [indices into spans])]``: :func:`merge_runs` with
    ``groups`` (``groups[i]``: the group of ``spans[i]``), each run with its group, in address
    order."""
    return [(groups[idx[0]], lo, hi, idx)
            for lo, hi, idx in merge_runs(spans, params, barriers, groups)]


def block_group(group, addrs):
    """Return the group of a multicast block whose copies are at ``addrs`` (``group``:
    address -> group, 0 where missing): its first reading copy's."""
    return min(group.get(a, 0) for a in addrs)


def fence_groups(data_groups):
    """Return the groups a channel puts a fence after, given the groups it has data in: each
    one up to, not including, its last (after that, the channel's end is the fence)."""
    return range(max(data_groups, default=0))


def out_runs(params, reads, channels):
    """Return ``[(channel, lo, hi, [(address, nbytes)])]``: the DMA-out descriptors of ``reads``
    (``(global address, bytes)``, the output blocks a pass stores out).

    Ranges of one Dbuf that overlap or touch (whole words) share one descriptor (no byte
    more is written out: a Dbuf's output blocks lie side by side after its item data,
    :mod:`sw.compiler.dbuf_layout`, so a pass stores one descriptor per Dbuf); the Dbufs are
    spread over the channels by :func:`assign_channels` (``local``: each on its edge's
    channel, moved only to even the channels), so the DMA-out runs on every channel at once,
    each stream along its own edge.
    """
    spans = sorted((addr & ~7, -(-(addr + n) // 8) * 8, addr, n) for addr, n in reads)
    runs = []
    for lo, hi, addr, n in spans:
        if runs and lo <= runs[-1][1] and params.dbuf_of(lo)[0] == \
                params.dbuf_of(runs[-1][0])[0]:
            runs[-1][1] = max(runs[-1][1], hi)
            runs[-1][2].append((addr, n))
        else:
            runs.append([lo, hi, [(addr, n)]])
    words = {}
    for lo, hi, _ in runs:
        d = params.dbuf_of(lo)[0]
        words[d] = words.get(d, 0) + (hi - lo) // 8
    chan = assign_channels(words, channels, params, local=True)
    return [(chan[params.dbuf_of(lo)[0]], lo, hi, group) for lo, hi, group in runs]
