"""The FC blocking chooser: an engine's issues per context and the estimated time of a blocking.

Contract (``docs/mapping.md``, "Blocking choice", has the reasoning)
--------------------------------------------------------------------
:func:`engine_issues` counts the issues of one context of a ``kb x gb`` engine from its graph's
rates (:func:`sw.compiler.graphs.build_engine`), split the way the RTL PE's pipes take them
(:class:`EngineIssues`); :func:`engine_costs` is the coarser ``(slots, int, fp)`` view.
:func:`blocking_costs` estimates, for every blocking whose engine fits the PE's slots, the
time of the layer (the busiest of the pipes, the Dbuf, the mesh links and, for the SWITCH
graph, its loop), cheapest first; :func:`choose_blocking` is its ``(kb, gb, wfan)`` order.  The
constants below calibrate the model against the RTL and are used only to choose the blocking.
"""

from dataclasses import dataclass

from sw.compiler import graphs, home_dbufs
from sw.compiler.dfg import VARYING, Graph
from sw.compiler.fc_plan import DEFAULT_SPARSE_GRAPH, LANES, WFANS, FcPlan
from sw.spec.arch import ArrayParams
from sw.spec.errors import FdpuError
from sw.spec.isa import Op, Unit, issue_pipe

__all__ = ["EngineIssues", "engine_issues", "engine_costs", "blocking_costs", "choose_blocking",
           "SPARSE_LOOP_CYCLES", "SPARSE_INT_UTIL", "SPARSE_P0_UTIL", "SKIP_DENSITY"]

#: The block sizes ``kb`` and ``gb`` the chooser tries.
_BLOCKS = (1, 2, 3, 4, 6, 8, 12, 16)
#: Cycles one weight row's SWITCH loop takes per column on the RTL PE (SWITCH -> join ->
#: SWITCH, plus IMM for a zero weight).  The loop's RTL latency (medians: 11 cycles for a
#: stored weight, 17 for a zero one) gives 15.5 at 25 % density, plus ~1.5 cycles of
#: round-robin wait per firing (2.75 firings) with pipe 2 about half busy.  Measured on one PE
#: (3 x 8 wfan 16): SWITCH trips of 23 (stored) and 28 (zero) cycles on average while the
#: engine ran at 30 cycles per column, bound by pipe 2, not by the loop.  Used only to choose
#: the blocking.
SPARSE_LOOP_CYCLES = 20
#: Pipe-2 (INT/CTRL) occupancy the SWITCH graph's engine reaches on the RTL PE (0.61 on one
#: PE and the 8 x 8, 3 x 8 wfan 16; 0.68 on alexnet-fc8 batch 64, 3 x 8 wfan 16: 27.1 cycles
#: per column).  0.61 would rank the 8 x 8's wfan 4 engine first, which measures slower (73.6
#: against 78.6 %).  Used only to choose the blocking.
SPARSE_INT_UTIL = 0.68
#: Pipe-0 (loads, stores, ITER tokens) occupancy the SWITCH graph's engine reaches on the RTL
#: PE where two engines share each Dbuf (the 8 x 8): 0.51 on alexnet-fc8 batch 64 with its
#: 4 x 8 wfan 4 engine (19.2 issues in 38.0 cycles per column, the bound: its pipe 2 is at
#: 0.43) and 0.52 with 3 x 8 wfan 16.  With a Dbuf per engine (one PE, 3 x 8 wfan 4) it
#: reached 0.64 and did not bind, so the term applies only to shared Dbufs (docs/mapping.md).
#: Used only to choose the blocking.
SPARSE_P0_UTIL = 0.5
#: The density the chooser assumes for the ``skip`` graph, whose work per context depends on
#: the stored weights (a data-dependent stream counts ``density x Cw`` tokens per weight row
#: and context), when the layer's density is not given.  The paper's alexnet-fc8 density.
SKIP_DENSITY = 0.25


@dataclass(frozen=True)
class EngineIssues:
    """Issues per context of one engine, split the way the RTL PE's pipes take them.

    ``mem`` loads and stores, ``iter`` ITER tokens, ``hinted`` the INT/CTRL issues with the
    ``pipe0`` hint (all three on pipe 0 with ``int_issue = 2``), ``other`` every other INT/CTRL
    issue, BSCAN tokens included (pipe 2), ``fp`` the FP pipe; ``slots`` the engine's
    instructions.
    """
    slots: int
    other: float
    iter: float
    mem: float
    fp: float
    hinted: float = 0.0

    def pipes(self, int_issue):
        """Return the INT/MEM/CTRL pipes' issues: ``(pipe 2, pipe 0)`` or ``(one pipe,)``."""
        if int_issue == 2:
            return self.other, self.mem + self.iter + self.hinted
        return (self.other + self.mem + self.iter + self.hinted,)


def engine_issues(mode, kb, gb, Cw, feedback=True, wfan=4, fan_pipe0=False,
                  sparse_graph=DEFAULT_SPARSE_GRAPH, density=SKIP_DENSITY, bias=False,
                  relu=False):
    """Return the :class:`EngineIssues` of one context of a ``kb x gb`` engine over ``Cw``.

    From the graph's rates: an ITER, BSCAN or BPOS issues once per token it emits (a BPOS at
    least once per firing); a SWITCH branch counts at the SWITCH's rate (so the zero branch's
    IMM counts as if every weight were 0); a data-dependent stream (``skip``) counts
    ``density x Cw`` tokens per weight row (default :data:`SKIP_DENSITY`).
    ``fan_pipe0`` and ``sparse_graph`` are :attr:`FcPlan.fan_pipe0` and
    :attr:`FcPlan.sparse_graph`; ``bias`` and ``relu`` add the epilogue (:attr:`FcPlan.bias`,
    :attr:`FcPlan.relu`).
    """
    plan = FcPlan(mode, kb, Cw, gb * LANES, ArrayParams(), kb, gb, feedback, wfan,
                  fan_pipe0=fan_pipe0, sparse_graph=sparse_graph,
                  bias=(0,) * kb if bias else None, relu=relu)
    g = Graph("probe")
    graphs.build_engine(g, plan, 0)
    rates = g.rates()
    cost = {"other": 0, "iter": 0, "mem": 0, "fp": 0, "hinted": 0}
    stream = density * Cw
    for nid, r in rates.items():
        node = g.nodes[nid]
        op = node.op
        if op in (Op.ITER, Op.BSCAN, Op.BPOS):
            r = max(_nominal(g.out_rate(nid, r), stream), _nominal(r, stream))
        r = _nominal(r, stream)
        pipe = issue_pipe(op, node.pipe0)
        role = ("fp" if pipe == "fp" else "other" if pipe == "p2" else "iter" if op is Op.ITER
                else "mem" if op.unit is Unit.MEM else "hinted")
        cost[role] += r
    return EngineIssues(len(g.nodes), *(float(cost[k])
                                        for k in ("other", "iter", "mem", "fp", "hinted")))


def _nominal(rate, stream):
    return stream if rate is VARYING else rate


def engine_costs(mode, kb, gb, Cw, feedback=True, loads=False, wfan=4,
                 sparse_graph=DEFAULT_SPARSE_GRAPH, bias=False, relu=False):
    """Return ``(slots, int-pipe issues, fp-pipe issues)`` per context of one engine.

    The int-pipe issues are every INT/MEM/CTRL issue (:func:`engine_issues` splits them by
    pipe).  With ``loads=True`` also return the memory accesses per context as a fourth
    element; ``wfan``, ``sparse_graph``, ``bias`` and ``relu`` are as for
    :func:`engine_issues`.
    """
    c = engine_issues(mode, kb, gb, Cw, feedback, wfan, sparse_graph=sparse_graph, bias=bias,
                      relu=relu)
    integer = c.other + c.iter + c.mem + c.hinted
    if loads:
        return c.slots, integer, c.fp, c.mem
    return c.slots, integer, c.fp


def blocking_costs(mode, K, groups, Cw, params, feedback=True, sparse_graph=DEFAULT_SPARSE_GRAPH,
                   kb=None, gb=None, wfan=None, density=SKIP_DENSITY, bias=False, relu=False):
    """Return the blocking chooser's estimate for every ``kb x gb`` (and ``wfan``) that fits.

    A given ``kb``, ``gb`` or ``wfan`` is the only value of that parameter considered (also
    when it is not one of the chooser's own candidates), so that an explicit choice is
    estimated as it is, never replaced by a neighbour.  ``bias`` and ``relu`` count the
    epilogue's instructions (:func:`engine_issues`).

    One dict per candidate, cheapest first: ``kb``, ``gb``, ``wfan``, ``issues`` (the
    :class:`EngineIssues` over ``min(Cw, 64)`` columns), ``items``, ``rounds`` (contexts per
    engine), ``per_ctx`` (estimated cycles of one context over ``Cw`` columns), ``bound`` (the
    term that sets it) and ``cost`` (the sort key: ``rounds x per_ctx``, then the busiest
    pipe's issues, fewer loads per FACC, a larger block).  The model (``docs/mapping.md``,
    "Blocking choice"):

    * the RTL PE's pipes: FP; with ``int_issue = 2`` pipe 0 takes loads, stores and ITER
      tokens, pipe 2 every other INT/CTRL issue (BSCAN tokens included); with
      ``int_issue = 1`` one pipe takes them all;
    * a Dbuf serves one access per cycle to the engines homed on it;
    * sparse: a mesh link carries one flit per cycle for every engine routed through it; with
      the ``switch`` graph pipe 2 (the SWITCH loops' firings) reaches only
      :data:`SPARSE_INT_UTIL` of its cycles, pipe 0 :data:`SPARSE_P0_UTIL` where engines
      share a Dbuf, and each weight row's SWITCH loop takes
      :data:`SPARSE_LOOP_CYCLES` per column (the ``gather`` graph has no loop: its weight
      stream is feed-forward like the dense engine's).
    """
    cands = []
    links = {}
    cols = min(Cw, 64)
    scale = Cw / cols
    per_dbuf = -(-params.num_pes // params.num_dbufs)
    given_kb, given_gb, given_wfan = kb, gb, wfan
    for kb in (given_kb,) if given_kb is not None else _BLOCKS:
        if given_kb is None and kb > K and kb > 1:
            continue
        for gb in (given_gb,) if given_gb is not None else _BLOCKS:
            if given_gb is None and gb > groups and gb > 1:
                continue
            fans = WFANS if mode == "sparse" and gb > WFANS[0] else WFANS[:1]
            for wfan in (given_wfan,) if given_wfan is not None else fans:
                c = engine_issues(mode, kb, gb, cols, feedback, wfan,
                                  sparse_graph=sparse_graph, density=density, bias=bias,
                                  relu=relu)
                if c.slots > params.slots:
                    continue
                items = -(-K // kb) * -(-groups // gb)
                pipes = c.pipes(params.int_issue)
                terms = {"pipe 2" if len(pipes) == 2 else "int pipe": pipes[0], "fp": c.fp,
                         "dbuf": c.mem * per_dbuf}
                if len(pipes) == 2:
                    terms["pipe 0"] = pipes[1]
                terms = {k: v * scale for k, v in terms.items()}
                if mode == "sparse":
                    count = min(params.num_pes, items)
                    if count not in links:
                        homes = home_dbufs.engine_homes(params, count)
                        links[count] = home_dbufs.link_engines(params, homes)
                    if sparse_graph == "switch":
                        terms["int util"] = pipes[0] * scale / SPARSE_INT_UTIL
                        if len(pipes) == 2 and per_dbuf > 1:
                            terms["pipe 0 util"] = pipes[1] * scale / SPARSE_P0_UTIL
                        terms["switch loop"] = Cw * SPARSE_LOOP_CYCLES
                    terms["mesh link"] = c.mem * links[count] * scale
                bound = max(terms, key=terms.get)
                per_ctx = terms[bound]
                rounds = -(-items // params.num_pes)
                # Ties (e.g. two blockings bound by the same SWITCH loop, or by the FP pipe)
                # go to the one whose busiest pipe is less loaded, then (sparse) the one with
                # less INT/CTRL work (measured: the gather graph's 6 x 4 engine, 11 pipe-2
                # issues per column, ran at 0.90 of the FP pipe on one PE, its 3 x 8 wfan 16
                # engine, 9.6, at 0.95), then fewer loads per FACC, then a larger block.
                issue = max(*pipes, c.fp) * scale
                ctrl = rounds * pipes[0] * scale if mode == "sparse" else 0
                cost = (rounds * per_ctx, rounds * issue, ctrl, (kb + gb) / (kb * gb), -kb * gb,
                        wfan)
                cands.append(dict(kb=kb, gb=gb, wfan=wfan, issues=c, items=items,
                                  rounds=rounds, per_ctx=per_ctx, bound=bound, cost=cost))
    return sorted(cands, key=lambda d: d["cost"])


def choose_blocking(mode, K, groups, Cw, params, feedback, sparse_graph, kb=None, gb=None,
                    wfan=None, density=SKIP_DENSITY, bias=False, relu=False):
    """Return the ``(kb, gb, wfan)`` of every blocking that fits, cheapest first (a given
    ``kb``, ``gb`` or ``wfan`` fixes that parameter: :func:`blocking_costs`).

    Raises
    ------
    FdpuError
        When no blocking's engine fits the PE's slots.
    """
    cands = blocking_costs(mode, K, groups, Cw, params, feedback, sparse_graph, kb, gb, wfan,
                           density, bias, relu)
    if not cands:
        given = ", ".join(f"{n}={v}" for n, v in (("kb", kb), ("gb", gb), ("wfan", wfan))
                          if v is not None)
        raise FdpuError(f"no blocking of the {mode} engine{' with ' + given if given else ''} "
                        f"fits {params.slots} slots per PE")
    return [(d["kb"], d["gb"], d["wfan"]) for d in cands]
