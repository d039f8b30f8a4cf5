"""The FC blocking chooser: an engine's issues per context and the estimated time of a blocking.

Contract (``docs/mapping.md``, "Blocking choice", has the reasoning)
--------------------------------------------------------------------
:func:`engine_issues` counts the issues of one context of a ``kb x gb`` engine from its graph's
rates (:func:`sw.compiler.graphs.build_engine`), split the way the RTL PE's pipes take them
(:class:`EngineIssues`); :func:`engine_costs` is the coarser ``(slots, int, fp)`` view.
:func:`blocking_costs` estimates, for every blocking whose engine fits the PE's slots, the
time of the layer (the busiest of the pipes, the Dbuf, the mesh links and, for the SWITCH
graph, its loop: each graph kind's own terms), cheapest first; :func:`choose_blocking` is its
``(kb, gb, wfan)`` order.  The constants (here and with the graph kinds that have their own
terms) calibrate the estimate against the RTL and are used only to choose the blocking.
"""

from dataclasses import dataclass, replace

from sw.compiler import graphs, home_dbufs
from sw.compiler.dfg import VARYING, Graph
from sw.spec.errors import FdpuError
from sw.spec.isa import Op, Unit, issue_pipe

__all__ = ["EngineIssues", "engine_issues", "engine_costs", "blocking_costs", "choose_blocking",
           "SKIP_DENSITY"]

#: The block sizes ``kb`` and ``gb`` the chooser tries.
_BLOCKS = (1, 2, 3, 4, 6, 8, 12, 16)
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


def engine_issues(spec, density=SKIP_DENSITY):
    """Return the :class:`EngineIssues` of one context of the engine ``spec`` (an
    :class:`~sw.compiler.graph_kinds.base.EngineSpec`).

    From the graph's rates: an ITER, BSCAN or BPOS issues once per token it emits (a BPOS at
    least once per firing); a SWITCH branch counts at the SWITCH's rate (so the zero branch's
    IMM counts as if every weight were 0); a data-dependent stream (``skip``) counts
    ``density x columns`` tokens per weight row and context (default :data:`SKIP_DENSITY`).
    """
    g = Graph("probe")
    graphs.build_engine(g, spec, 0)
    rates = g.rates()
    cost = {"other": 0, "iter": 0, "mem": 0, "fp": 0, "hinted": 0}
    stream = density * spec.columns
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


def engine_costs(spec, loads=False):
    """Return ``(slots, int-pipe issues, fp-pipe issues)`` per context of the engine ``spec``.

    The int-pipe issues are every INT/MEM/CTRL issue (:func:`engine_issues` splits them by
    pipe).  With ``loads=True`` also return the memory accesses per context as a fourth
    element.
    """
    c = engine_issues(spec)
    integer = c.other + c.iter + c.mem + c.hinted
    if loads:
        return c.slots, integer, c.fp, c.mem
    return c.slots, integer, c.fp


def blocking_costs(engine, K, groups, params, kb=None, gb=None, wfan=None, density=SKIP_DENSITY):
    """Return the blocking chooser's estimate for every ``kb x gb`` (and ``wfan``) that fits.

    ``engine`` (an :class:`~sw.compiler.graph_kinds.base.EngineSpec`) names what every
    candidate shares: the graph kind, the columns ``Cw``, ``feedback`` and the epilogue; its
    ``kb``, ``gb`` and ``wfan`` are the ones varied, for a ``K``-row layer of ``groups`` lane
    groups.  A given ``kb``, ``gb`` or ``wfan`` is the only value of that parameter considered
    (also when it is not one of the chooser's own candidates), so that an explicit choice is
    estimated as it is, never replaced by a neighbour.

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
    * the graph's own terms (:meth:`~sw.compiler.graph_kinds.base.GraphKind.chooser_terms`):
      sparse, a mesh link carries one flit per cycle for every engine routed through it; with
      the ``switch`` graph pipe 2 (the SWITCH loops' firings) reaches only
      ``SPARSE_INT_UTIL`` of its cycles, pipe 0 ``SPARSE_P0_UTIL`` where engines share a
      Dbuf, and each weight row's SWITCH loop takes ``SPARSE_LOOP_CYCLES`` per column
      (:mod:`sw.compiler.graph_kinds.switch`; the ``gather`` graph has no loop: its weight
      stream is feed-forward like the dense engine's).
    """
    kind, Cw = engine.graph, engine.Cw
    cands = []
    links = {}
    cols = min(Cw, 64)
    scale = Cw / cols
    per_dbuf = -(-params.num_pes // params.num_dbufs)
    given_kb, given_gb, given_wfan = kb, gb, wfan
    for kb in (given_kb,) if given_kb is not None else _BLOCKS:
        if given_kb is None and (kb > K and kb > 1 or kb > (kind.max_kb or kb)):
            continue
        for gb in (given_gb,) if given_gb is not None else _BLOCKS:
            if given_gb is None and gb > groups and gb > 1:
                continue
            fans = kind.fanouts(gb)
            for wfan in (given_wfan,) if given_wfan is not None else fans:
                c = engine_issues(replace(engine, kb=kb, gb=gb, Cw=cols, wfan=wfan), density)
                if c.slots > params.slots:
                    continue
                items = -(-K // kb) * -(-groups // gb)
                pipes = c.pipes(params.int_issue)
                terms = {"pipe 2" if len(pipes) == 2 else "int pipe": pipes[0], "fp": c.fp,
                         "dbuf": c.mem * per_dbuf}
                if len(pipes) == 2:
                    terms["pipe 0"] = pipes[1]
                terms = {k: v * scale for k, v in terms.items()}
                count = min(params.num_pes, items)

                def busiest_link(count=count):
                    if count not in links:
                        homes = home_dbufs.engine_homes(params, count)
                        links[count] = home_dbufs.link_engines(params, homes)
                    return links[count]
                terms.update(kind.chooser_terms(pipes, scale, Cw, per_dbuf, c.mem,
                                                busiest_link))
                bound = max(terms, key=terms.get)
                per_ctx = terms[bound]
                rounds = -(-items // params.num_pes)
                # Ties (e.g. two blockings bound by the same SWITCH loop, or by the FP pipe)
                # go to the one whose busiest pipe is less loaded, then (sparse) the one with
                # less INT/CTRL work (measured: the gather graph's 6 x 4 engine, 11 pipe-2
                # issues per column, ran at 0.90 of the FP pipe on one PE, its 3 x 8 wfan 16
                # engine, 9.6, at 0.95), then fewer loads per FACC, then a larger block.
                issue = max(*pipes, c.fp) * scale
                ctrl = rounds * pipes[0] * scale if kind.sparse else 0
                cost = (rounds * per_ctx, rounds * issue, ctrl, (kb + gb) / (kb * gb), -kb * gb,
                        wfan)
                cands.append(dict(kb=kb, gb=gb, wfan=wfan, issues=c, items=items,
                                  rounds=rounds, per_ctx=per_ctx, bound=bound, cost=cost))
    return sorted(cands, key=lambda d: d["cost"])


def choose_blocking(engine, K, groups, params, kb=None, gb=None, wfan=None,
                    density=SKIP_DENSITY):
    """Return the ``(kb, gb, wfan)`` of every blocking that fits, cheapest first (a given
    ``kb``, ``gb`` or ``wfan`` fixes that parameter: :func:`blocking_costs`).

    Raises
    ------
    FdpuError
        When no blocking's engine fits the PE's slots.
    """
    cands = blocking_costs(engine, K, groups, params, kb, gb, wfan, density)
    if not cands:
        given = ", ".join(f"{n}={v}" for n, v in (("kb", kb), ("gb", gb), ("wfan", wfan))
                          if v is not None)
        raise FdpuError(f"no blocking of the {engine.graph.mode} engine"
                        f"{' with ' + given if given else ''} fits {params.slots} slots per PE")
    return [(d["kb"], d["gb"], d["wfan"]) for d in cands]
