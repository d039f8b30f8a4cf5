"""FC-layer graph builders: the work plan, the per-PE engine graphs and the Dbuf memory layout.

Contract (``docs/dataflow.md`` and ``docs/mapping.md`` have the reasoning)
--------------------------------------------------------------------------
A layer ``O[n][k] = sum_c W[k][c] * I[n][c]`` (``W`` is ``K x C``, ``I`` is ``N x C``,
binary16) is cut into *work items*: a block of ``kb`` output rows times ``gb`` *lane groups*
(4 batch elements per SIMD-4 token, the batch padded to a multiple of 4).  An item covers all
``Cw`` columns (``Cw = C`` dense, ``C`` rounded up to 16 sparse).  One *engine* per PE (a
self-contained subgraph, all edges PE-local) computes one item per context; item ``i`` of a pass
runs on engine ``i % E`` in context ``i // E``.  Engines without an item in the last context
compute a *dummy* item (zero weights, discarded output).

Accumulation order (fixed, what the golden model and the hardware both compute): for every
``(k, n)``, ``acc = -0.0``, then ``acc = fma(W[k][c], I[n][c], acc)`` for ``c = 0 .. Cw-1`` in
order, one rounding per step (``FACC``); sparse mode feeds ``+0.0`` for every weight that
FD-CSR does not store, including the padding columns ``C .. Cw-1`` (whose inputs are 0).

Memory layout of a pass, per Dbuf: the descriptor tables of the engines homed there (16 bytes
per context: item base, input base, output base, and a zero pad word; sparse engines feed
``+0.0`` for the weights FD-CSR does not store by ``LDHBZ`` of address 0, no access), then
the input blocks (``gb`` groups of ``Cw`` 8-byte tokens, lane ``l`` of group ``g`` = batch
element ``4 * g + l``), the item data (dense: ``W`` block column-major, ``kb`` binary16 per
column; sparse: the item's FD-CSR ``colidx``, ``rowoff`` relocated to ``item base + 2 x rowoff``,
``values``), and the output blocks
(``kb x gb`` tokens).  A layer whose data do not fit the Dbufs runs in several passes (one
memory image each, the same program).
"""

from dataclasses import dataclass, field

import numpy as np
from scipy.optimize import linear_sum_assignment

from sw.compiler import fdcsr
from sw.compiler.dfg import Graph
from sw.spec import fp16
from sw.spec.arch import ArrayParams, Dir
from sw.spec.errors import FdpuError
from sw.spec.isa import Op, Unit, issue_pipe, loop_imm

__all__ = ["MODES", "WFANS", "SPARSE_GRAPHS", "FcPlan", "plan_fc", "build_engine", "build_graph",
           "pass_memory", "gather_outputs", "engine_costs", "engine_issues", "EngineIssues",
           "blocking_costs", "engine_homes", "link_engines"]

MODES = ("dense", "sparse")
LANES = ArrayParams.LANES
_ROW = fdcsr.ROW
_DESC = 16           # bytes of one descriptor: item base, input base, output base, pad
_BLOCKS = (1, 2, 3, 4, 6, 8, 12, 16)
#: Cost of a home Dbuf off the PE's row and column (its route bends), against hops squared.
_BENT = 10_000
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


#: Lane groups one sparse value load feeds: ``4`` (one load per 4 lane groups, naming its
#: FACCs directly) or ``16`` (one load per weight row and a MOV tree on the INT pipe: fewer
#: Dbuf accesses, more INT issues).  The blocking chooser picks one per plan
#: (``FcPlan.wfan``, docs/mapping.md).
WFANS = (4, 16)

#: How a sparse engine turns FD-CSR into the weight stream (``FcPlan.sparse_graph``):
#: ``switch`` is the paper's graph (a SWITCH per weight row chooses a stored weight's address
#: or, through IMM, address 0, its feedback edge keeping the columns in order); ``gather`` has
#: no branch: BSCAN's token (0 for a zero weight) goes straight to the value loads.  Both load
#: with ``LDHBZ`` (address 0 gives +0.0 without a Dbuf access).  Same weights in the
#: same order, so the same bits (docs/dataflow.md, "The gather graph").
SPARSE_GRAPHS = ("switch", "gather")

#: The sparse graph of a plan when none is named: ``gather``, the faster of the two on the RTL
#: with the same bits (alexnet-fc8 batch 64 on the 8 x 8: 97.7 % of peak against the SWITCH
#: graph's 88.3 %, dense 98.1 %; docs/dataflow.md, "Which sparse graph is the default").
#: ``switch`` reproduces the paper's graph and its order hazard (``feedback=False``).
DEFAULT_SPARSE_GRAPH = "gather"


def _chunks(gb, k=ArrayParams.MAX_DESTS):
    """Return the lane groups ``0 .. gb-1`` in runs of at most ``k``."""
    return [range(q, min(gb, q + k)) for q in range(0, gb, k)]


def _align(n, a):
    return -(-n // a) * a


@dataclass
class FcPlan:
    """How one FC layer runs: shapes, blocking, engines, passes and their memory layouts."""
    mode: str
    K: int
    C: int
    N: int
    params: ArrayParams
    kb: int
    gb: int
    feedback: bool = True
    wfan: int = 4                                  # sparse: lane groups per value load
    homes: list = field(default_factory=list)      # engine -> (pe (x, y), dbuf index)
    contexts: int = 0                              # contexts per pass (the last may be fewer)
    desc_base: list = field(default_factory=list)  # engine -> global address of its table
    fan_pipe0: bool = False                        # sparse wfan 16: MOV trees hinted to pipe 0
    sparse_graph: str = DEFAULT_SPARSE_GRAPH       # sparse: one of SPARSE_GRAPHS

    @property
    def groups(self):
        """Return the lane groups ``ceil(N / 4)``."""
        return -(-self.N // LANES)

    @property
    def Cw(self):
        """Return the columns an item iterates over (``C`` dense, ``C`` rounded to 16 sparse)."""
        return self.C if self.mode == "dense" else _align(self.C, _ROW)

    @property
    def R16(self):
        """Return the FD-CSR rows per weight row (sparse)."""
        return self.Cw // _ROW

    @property
    def kblocks(self):
        """Return the row blocks ``ceil(K / kb)``."""
        return -(-self.K // self.kb)

    @property
    def gblocks(self):
        """Return the lane-group blocks ``ceil(groups / gb)``."""
        return -(-self.groups // self.gb)

    @property
    def items(self):
        """Return the number of work items."""
        return self.kblocks * self.gblocks

    @property
    def engines(self):
        """Return the number of engines (PEs used)."""
        return len(self.homes)

    @property
    def per_pass(self):
        """Return the items of a full pass."""
        return self.engines * self.contexts

    @property
    def passes(self):
        """Return the number of passes."""
        return -(-self.items // self.per_pass)

    def item(self, i):
        """Return ``(kbi, gbi)`` of item ``i`` (row blocks vary fastest)."""
        return i % self.kblocks, i // self.kblocks

    def pass_items(self, p):
        """Return the item indices of pass ``p``."""
        return range(p * self.per_pass, min(self.items, (p + 1) * self.per_pass))

    def pass_contexts(self, p):
        """Return the contexts of pass ``p``."""
        return -(-len(self.pass_items(p)) // self.engines)

    @property
    def item_bound(self):
        """Return the largest number of bytes one item's weights can take."""
        if self.mode == "dense":
            return _align(self.Cw * self.kb * 2, 8)
        r = self.kb * self.R16
        return _align(2 * r, 4) + _align(4 * r, 8) + _align(self.kb * self.Cw * 2, 8)

    @property
    def input_bytes(self):
        """Return the bytes of one input block (``gb`` groups of ``Cw`` tokens)."""
        return self.gb * self.Cw * 8

    @property
    def output_bytes(self):
        """Return the bytes of one item's output block."""
        return self.kb * self.gb * 8

    def describe(self):
        """Return a JSON-friendly summary."""
        return dict(mode=self.mode, K=self.K, C=self.C, N=self.N, kb=self.kb, gb=self.gb,
                    groups=self.groups, Cw=self.Cw, items=self.items, engines=self.engines,
                    contexts=self.contexts, passes=self.passes, feedback=self.feedback,
                    wfan=self.wfan, fan_pipe0=self.fan_pipe0,
                    sparse_graph=self.sparse_graph if self.mode == "sparse" else None)


# Engine graphs -------------------------------------------------------------------------------

def build_engine(g, plan, e, pe=None, dbuf=None):
    """Add engine ``e`` of ``plan`` to graph ``g``; return its node ids by role.

    Every node gets ``group = e`` and ``meta`` ``engine``/``role``/``row``/``lane``.  The
    engine reads its descriptor at ``plan.desc_base[e] + 16 * ctx``.
    """
    kb, gb, Cw = plan.kb, plan.gb, plan.Cw
    desc = plan.desc_base[e] if plan.desc_base else 0
    ids = {}

    def add(role, op, nsrc=None, imm=0, end=False, row=None, lane=None):
        name = f"e{e}.{role}" + (f"{row}" if row is not None else "") + \
            (f".{lane}" if lane is not None else "")
        nid = g.add(op, nsrc, imm, end, name, group=e, pe=pe, engine=e, role=role, row=row,
                    lane=lane)
        ids.setdefault(role, []).append(nid)
        return nid

    ctx = add("ctx", Op.CTX)
    a = add("desc", Op.SHL, 1, 4)
    g.connect(ctx, a, 0)
    ld_b = add("ldB", Op.LDW, imm=desc)
    ld_x = add("ldX", Op.LDW, imm=desc + 4)
    ld_o = add("ldO", Op.LDW, imm=desc + 8)
    g.fanout(a, [(ld_b, 0), (ld_x, 0), (ld_o, 0)])
    facc = [[add("facc", Op.FACC, imm=Cw, row=k, lane=j) for j in range(gb)]
            for k in range(kb)]
    st = [[add("st", Op.STD, imm=(k * gb + j) * 8, end=True, row=k, lane=j)
           for j in range(gb)] for k in range(kb)]
    for k in range(kb):
        for j in range(gb):
            g.connect(facc[k][j], st[k][j], 1)
    g.fanout(ld_o, [(st[k][j], 0) for k in range(kb) for j in range(gb)])
    if plan.mode == "dense":
        it_x = add("itX", Op.ITER, imm=loop_imm(Cw, 8))
        g.connect(ld_x, it_x, 0)
        it_w = add("itW", Op.ITER, imm=loop_imm(Cw, 2 * kb))
        g.connect(ld_b, it_w, 0)
        w = [add("w", Op.LDHB, imm=2 * k, row=k) for k in range(kb)]
        g.fanout(it_w, [(x, 0) for x in w])
    else:
        r16 = plan.R16
        it_x = add("itX", Op.ITER, imm=loop_imm(r16, 8 * _ROW))
        g.connect(ld_x, it_x, 0)
        # One inner ITER per 4 lane groups: each names its 4 input loads directly, where one
        # ITER would feed 8 loads through MOVs (INT issues per column; docs/dataflow.md).
        it_xi = [add("itXi", Op.ITER, imm=loop_imm(_ROW, 8), lane=q)
                 for q in range(len(_chunks(gb)))]
        g.fanout(it_x, [(v, 0) for v in it_xi])
        it_c = add("itC", Op.ITER, imm=loop_imm(r16, 2))
        it_r = add("itR", Op.ITER, imm=loop_imm(r16, 4))
        g.fanout(ld_b, [(it_c, 0), (it_r, 0)])
        off_r = _align(2 * kb * r16, 4)
        off_v = off_r + _align(4 * kb * r16, 8)
        gather = plan.sparse_graph == "gather"
        ci, ro, w = [], [], []
        for k in range(kb):
            # The decode of one FD-CSR row: BSCAN takes the row's colidx and its
            # relocated rowoff, base = item base + 2 x rowoff (pass_memory stores it so), and
            # emits, per column, the stored weight's value address - (off_v - 2) (never 0) or
            # 0 for a zero weight.  The value loads are LDHBZ: address 0 gives +0.0
            # without a Dbuf access.
            ci.append(add("ci", Op.LDH, imm=2 * k * r16, row=k))
            ro.append(add("ro", Op.LDW, imm=off_r + 4 * k * r16, row=k))
            bs = add("bs", Op.BSCAN, imm=_ROW, row=k)
            g.connect(ci[k], bs, 0)
            # The row base goes through a MOV: straight into BSCAN.1 the rowoff load retires
            # on the PE's memory lane 1 with the input loads and, running ahead of BSCAN, its
            # waiting entries cost the FACCs' inputs (measured slower; docs/dataflow.md).
            rb = add("rb", Op.MOV, row=k)
            g.connect(ro[k], rb, 0)
            g.connect(rb, bs, 1)
            lds = [add("ld", Op.LDHBZ, imm=off_v - 2, row=k, lane=q)
                   for q in range(len(_chunks(gb, plan.wfan)))]
            w.append(lds)
            if gather:
                # No branch: BSCAN's tokens are the value loads' addresses.
                g.fanout(bs, [(v, 0) for v in lds])
                continue
            sw = add("sw", Op.SWITCH, 3 if plan.feedback else 2, row=k)
            # The same token is the data and the condition.
            g.fanout(bs, [(sw, 0), (sw, 1)])
            # The SWITCH chooses the *address* of the weight: a stored weight's address
            # (taken branch, straight to the join) or, for a zero weight, IMM 0, which the
            # LDHBZ value loads turn into +0.0 without a Dbuf access.  The join (MOV) feeds
            # the value loads, whose replies the PE forwards in issue order, and the feedback
            # edge: the SWITCH -> join loop is two or three same-PE firings, without the Dbuf
            # round trip of the paper's SWITCH -> LD | FIMM -> join (docs/dataflow.md).
            fz = add("fz", Op.IMM, imm=0, row=k)
            jn = add("jn", Op.MOV, row=k)
            g.connect(sw, jn, 0, branch=True)
            g.connect(sw, fz, 0, branch=False)
            g.connect(fz, jn, 0)
            # One value load per wfan lane groups (wfan 4: naming its FACCs directly, no MOV
            # tree on the INT pipe; the loads issue on the memory pipe).
            if plan.feedback:
                g.connect(jn, sw, 2, init=1)
            g.fanout(jn, [(v, 0) for v in lds])
        g.fanout(it_c, [(x, 0) for x in ci])
        g.fanout(it_r, [(x, 0) for x in ro])
    x = [add("x", Op.LDD, imm=j * 8 * Cw, lane=j) for j in range(gb)]
    if plan.mode == "dense":
        g.fanout(it_x, [(v, 0) for v in x])
        for k in range(kb):
            g.fanout(w[k], [(facc[k][j], 0) for j in range(gb)])
    else:
        for it, lanes in zip(it_xi, _chunks(gb)):
            g.fanout(it, [(x[j], 0) for j in lanes])
        for k in range(kb):
            for ld, lanes in zip(w[k], _chunks(gb, plan.wfan)):
                # With wfan 16 a value load feeds its FACCs through a MOV tree: feed-forward
                # (not in the SWITCH loop).  plan.fan_pipe0 gives its MOVs the pipe0 hint
                # (issue beside the loads, leaving pipe 2 to the BSCAN -> SWITCH -> join
                # loop); measured slower on the RTL, so off by default (docs/mapping.md).
                g.fanout(ld, [(facc[k][j], 0) for j in lanes], pipe0=plan.fan_pipe0)
    for j in range(gb):
        g.fanout(x[j], [(facc[k][j], 1) for k in range(kb)])
    return ids


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
                  sparse_graph=DEFAULT_SPARSE_GRAPH):
    """Return the :class:`EngineIssues` of one context of a ``kb x gb`` engine over ``Cw``.

    From the graph's rates: an ITER or BSCAN issues once per token it emits; a SWITCH branch
    counts at the SWITCH's rate (so the zero branch's IMM counts as if every weight were 0).
    ``fan_pipe0`` and ``sparse_graph`` are :attr:`FcPlan.fan_pipe0` and
    :attr:`FcPlan.sparse_graph`.
    """
    plan = FcPlan(mode, kb, Cw, gb * LANES, ArrayParams(), kb, gb, feedback, wfan,
                  fan_pipe0=fan_pipe0, sparse_graph=sparse_graph)
    g = Graph("probe")
    build_engine(g, plan, 0)
    rates = g.rates()
    cost = {"other": 0, "iter": 0, "mem": 0, "fp": 0, "hinted": 0}
    for nid, r in rates.items():
        node = g.nodes[nid]
        op = node.op
        if op in (Op.ITER, Op.BSCAN):
            r = g._out_rate(nid, r)
        pipe = issue_pipe(op, node.pipe0)
        role = ("fp" if pipe == "fp" else "other" if pipe == "p2" else "iter" if op is Op.ITER
                else "mem" if op.unit is Unit.MEM else "hinted")
        cost[role] += r
    return EngineIssues(len(g.nodes), *(float(cost[k])
                                        for k in ("other", "iter", "mem", "fp", "hinted")))


def engine_costs(mode, kb, gb, Cw, feedback=True, loads=False, wfan=4,
                 sparse_graph=DEFAULT_SPARSE_GRAPH):
    """Return ``(slots, int-pipe issues, fp-pipe issues)`` per context of one engine.

    The int-pipe issues are every INT/MEM/CTRL issue (:func:`engine_issues` splits them by
    pipe).  With ``loads=True`` also return the memory accesses per context as a fourth
    element; ``wfan`` and ``sparse_graph`` are :attr:`FcPlan.wfan` and
    :attr:`FcPlan.sparse_graph`.
    """
    c = engine_issues(mode, kb, gb, Cw, feedback, wfan, sparse_graph=sparse_graph)
    integer = c.other + c.iter + c.mem + c.hinted
    if loads:
        return c.slots, integer, c.fp, c.mem
    return c.slots, integer, c.fp


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


def blocking_costs(mode, K, groups, Cw, params, feedback=True, sparse_graph=DEFAULT_SPARSE_GRAPH):
    """Return the blocking chooser's estimate for every ``kb x gb`` (and ``wfan``) that fits.

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
    for kb in _BLOCKS:
        if kb > K and kb > 1:
            continue
        for gb in _BLOCKS:
            if gb > groups and gb > 1:
                continue
            for wfan in (WFANS if mode == "sparse" and gb > WFANS[0] else WFANS[:1]):
                c = engine_issues(mode, kb, gb, cols, feedback, wfan,
                                  sparse_graph=sparse_graph)
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
                        links[count] = link_engines(params, engine_homes(params, count))
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


def _choose_blocking(mode, K, groups, Cw, params, feedback, sparse_graph):
    cands = blocking_costs(mode, K, groups, Cw, params, feedback, sparse_graph)
    if not cands:
        raise FdpuError(f"no blocking of the {mode} engine fits {params.slots} slots per PE")
    return [(d["kb"], d["gb"], d["wfan"]) for d in cands]


# Plans ---------------------------------------------------------------------------------------

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


def plan_fc(K, C, N, mode="sparse", params=None, kb=None, gb=None, feedback=True,
            contexts=None, wfan=None, fan_pipe0=False, sparse_graph=DEFAULT_SPARSE_GRAPH):
    """Return the :class:`FcPlan` of a ``K x C`` layer at batch ``N``.

    ``kb``/``gb`` (and, sparse, ``wfan``: lane groups per value load, one of :data:`WFANS`)
    default to the blocking with the lowest estimated time that fits the slots
    (``docs/mapping.md``); ``contexts`` (per pass) defaults to as many as fit the Dbufs.
    ``fan_pipe0`` (sparse, ``wfan`` 16) gives the value loads' MOV trees the ISA's ``pipe0``
    hint: an experiment, off by default (slower on the RTL, docs/mapping.md); the blocking
    choice does not depend on it.  ``sparse_graph`` (sparse) is one of :data:`SPARSE_GRAPHS`:
    the branch-free ``gather`` graph (:data:`DEFAULT_SPARSE_GRAPH`) or the paper's ``switch``
    graph (its feedback edges dropped with ``feedback=False``, for the order-hazard demo).

    Raises
    ------
    FdpuError
        For a bad mode, shape or batch, or a layer whose single item does not fit a Dbuf.
    """
    params = params or ArrayParams()
    if mode not in MODES:
        raise FdpuError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
    for name, v in (("out_features K", K), ("in_features C", C), ("batch", N)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise FdpuError(f"{name} must be a positive integer, got {v!r}")
    K, C, N = int(K), int(C), int(N)
    cw = C if mode == "dense" else _align(C, _ROW)
    if cw > 0xFFFF:
        raise FdpuError(f"in_features {C} exceeds the ITER/FACC count limit of 65535")
    groups = -(-N // LANES)
    for name, v in (("kb", kb), ("gb", gb)):
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, np.integer))
                              or v < 1):
            raise FdpuError(f"{name} must be a positive integer, got {v!r}")
    if sparse_graph not in SPARSE_GRAPHS:
        raise FdpuError(f"sparse_graph must be one of {', '.join(SPARSE_GRAPHS)}, "
                        f"got {sparse_graph!r}")
    if wfan is not None and wfan not in WFANS:
        raise FdpuError(f"wfan must be one of {', '.join(map(str, WFANS))}, got {wfan!r}")
    if not feedback and (mode != "sparse" or sparse_graph != "switch"):
        raise FdpuError("feedback=False drops the SWITCH graph's feedback edges: it needs "
                        "mode 'sparse' and sparse_graph 'switch' (the gather and dense graphs "
                        "have no SWITCH)")
    if kb is None or gb is None:
        # The cheapest blocking whose single item fits a Dbuf.
        for ckb, cgb, cwfan in _choose_blocking(mode, K, groups, cw, params, feedback,
                                                sparse_graph):
            if kb is not None and ckb != kb or gb is not None and cgb != gb or \
                    wfan is not None and mode == "sparse" and cgb > WFANS[0] and cwfan != wfan:
                continue
            probe = FcPlan(mode, K, C, N, params, ckb, cgb, feedback, cwfan,
                           sparse_graph=sparse_graph)
            probe.homes = engine_homes(params, min(params.num_pes, probe.items))
            if _fits(probe, 1):
                break
        kb, gb, wfan = ckb, cgb, cwfan
    wfan = WFANS[0] if wfan is None else wfan
    plan = FcPlan(mode, K, C, N, params, kb, gb, feedback, wfan, fan_pipe0=bool(fan_pipe0),
                  sparse_graph=sparse_graph)
    slots = engine_costs(mode, kb, gb, min(cw, 64), feedback, wfan=wfan,
                         sparse_graph=sparse_graph)[0]
    if slots > params.slots:
        raise FdpuError(f"a {mode} engine with kb={kb}, gb={gb} needs {slots} instruction "
                        f"slots; the PE has {params.slots}")
    plan.homes = engine_homes(params, min(params.num_pes, plan.items))
    full = -(-plan.items // plan.engines)
    if contexts is None:
        lo, hi = 1, full
        if not _fits(plan, 1):
            raise FdpuError(
                f"one work item of the {K} x {C} layer (batch {N}, {mode}) needs more than "
                f"the {params.dbuf_bytes} bytes of a Dbuf; use fewer in_features or bigger "
                f"Dbufs")
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if _fits(plan, mid):
                lo = mid
            else:
                hi = mid - 1
        contexts = lo
    plan.contexts = min(int(contexts), full)
    per_dbuf = {}
    plan.desc_base = []
    for pe, d in plan.homes:
        i = per_dbuf.get(d, 0)
        per_dbuf[d] = i + 1
        plan.desc_base.append(params.dbuf_base(d) + i * plan.contexts * _DESC)
    return plan


def _fits(plan, contexts):
    plan.contexts = contexts
    per = {}
    for _, d in plan.homes:
        per[d] = per.get(d, 0) + 1
    worst = max(per.values())
    gblocks = max(1, min(plan.gblocks, worst * contexts))
    need = (worst * contexts * (_DESC + plan.item_bound + plan.output_bytes + 8)
            + gblocks * (plan.input_bytes + 8))
    return need <= plan.params.dbuf_bytes


def build_graph(plan):
    """Return the whole graph of ``plan``: one engine per home PE, pinned there."""
    g = Graph(f"fc-{plan.mode}-{plan.K}x{plan.C}-n{plan.N}")
    for e, (pe, d) in enumerate(plan.homes):
        build_engine(g, plan, e, pe=pe, dbuf=d)
    return g


# Memory --------------------------------------------------------------------------------------

def _item_weights(plan, w16, kbi):
    """Return the ``kb x C`` float16 block of row block ``kbi`` (zero rows past K)."""
    blk = np.zeros((plan.kb, plan.C), dtype=np.float16)
    rows = w16[kbi * plan.kb:(kbi + 1) * plan.kb]
    blk[:rows.shape[0]] = rows
    return blk


def _item_encoding(plan, blk):
    """Return the item's FD-CSR encoding (sparse) or ``None`` (dense) and its data bytes."""
    if plan.mode == "dense":
        return None, blk.size * 2
    enc = fdcsr.encode(blk)
    r = plan.kb * plan.R16
    return enc, _align(2 * r, 4) + _align(4 * r, 8) + 2 * enc.nnz


def _item_bytes(plan, blk, enc, nbytes, base):
    """Return the bytes of an item's data stored at global address ``base``.

    Sparse: ``colidx``, the *relocated* ``rowoff`` (``base + 2 x rowoff``, the BSCAN base of
    each 16-weight row, so the engine needs no shift and add per row) and ``values``
    (docs/dataflow.md, "Item data").
    """
    if enc is None:
        return np.ascontiguousarray(blk.T).view(np.uint8).tobytes()
    r = plan.kb * plan.R16
    out = bytearray(nbytes)
    out[0:2 * r] = enc.colidx.astype("<u2").tobytes()
    o = _align(2 * r, 4)
    rel = np.uint64(base) + 2 * enc.rowoff.astype(np.uint64)
    if r and int(rel.max()) >= 1 << 32:
        raise FdpuError(f"item data at {base:#x} reach past the 32-bit address space")
    out[o:o + 4 * r] = rel.astype("<u4").tobytes()
    o += _align(4 * r, 8)
    out[o:] = enc.values.view("<u2").tobytes()
    return bytes(out)


def _input_block(plan, x16, gbi):
    """Return the bytes of input block ``gbi``: ``gb`` groups x ``Cw`` tokens of 4 lanes."""
    blk = np.zeros((plan.gb * LANES, plan.Cw), dtype=np.float16)
    rows = x16[gbi * plan.gb * LANES:(gbi + 1) * plan.gb * LANES]
    blk[:rows.shape[0], :plan.C] = rows
    # token (g, c) lane l = batch element 4 g + l
    t = blk.reshape(plan.gb, LANES, plan.Cw).transpose(0, 2, 1)
    return np.ascontiguousarray(t).view(np.uint8).tobytes()


def pass_memory(plan, weights, inputs, p):
    """Return ``(segments, outputs)`` of pass ``p``.

    ``segments`` maps a global address to the bytes stored there; ``outputs`` lists
    ``(item index, global output address)``.
    """
    params = plan.params
    w16 = np.asarray(weights, dtype=np.float16)
    x16 = np.asarray(inputs, dtype=np.float16)
    items = list(plan.pass_items(p))
    ctxs = plan.pass_contexts(p)
    engines_at = {}
    for e, (_, d) in enumerate(plan.homes):
        engines_at.setdefault(d, []).append(e)
    cursor = {d: params.dbuf_base(d) + len(es) * plan.contexts * _DESC
              for d, es in engines_at.items()}
    segments, outputs = {}, []
    desc = {e: bytearray(ctxs * _DESC) for e in range(plan.engines)}
    inputs_at = {}

    def alloc(d, nbytes):
        addr = _align(cursor[d], 8)
        cursor[d] = addr + nbytes
        if cursor[d] > params.dbuf_base(d) + params.dbuf_bytes:
            raise FdpuError(f"pass {p} overflows Dbuf {d} ({params.dbuf_bytes} bytes)")
        return addr

    for slot in range(ctxs * plan.engines):
        e, t = slot % plan.engines, slot // plan.engines
        d = plan.homes[e][1]
        if slot < len(items):
            i = items[slot]
            kbi, gbi = plan.item(i)
            if (d, gbi) not in inputs_at:
                inputs_at[d, gbi] = alloc(d, plan.input_bytes)
                segments[inputs_at[d, gbi]] = _input_block(plan, x16, gbi)
            xaddr = inputs_at[d, gbi]
            blk = _item_weights(plan, w16, kbi)
        else:
            i = None
            # A dummy item reads any input block of its Dbuf (its weights are zero).
            have = [a for (dd, _), a in inputs_at.items() if dd == d]
            if not have:
                inputs_at[d, None] = alloc(d, plan.input_bytes)
                have = [inputs_at[d, None]]
            xaddr = have[0]
            blk = np.zeros((plan.kb, plan.C), dtype=np.float16)
        enc, nbytes = _item_encoding(plan, blk)
        baddr = alloc(d, nbytes)
        if nbytes:
            segments[baddr] = _item_bytes(plan, blk, enc, nbytes, baddr)
        oaddr = alloc(d, plan.output_bytes)
        if i is not None:
            outputs.append((i, oaddr))
        desc[e][t * _DESC:(t + 1) * _DESC] = np.array([baddr, xaddr, oaddr, 0],
                                                      dtype="<u4").tobytes()
    for e in range(plan.engines):
        segments[plan.desc_base[e]] = bytes(desc[e])
    return segments, outputs


def gather_outputs(plan, outputs, read):
    """Return the ``N x K`` float16 result from ``outputs`` (see :func:`pass_memory`).

    ``read(address, nbytes)`` returns bytes of the memory after the run.
    """
    y = np.zeros((plan.gblocks * plan.gb * LANES, plan.kblocks * plan.kb), dtype=np.uint16)
    for i, addr in outputs:
        kbi, gbi = plan.item(i)
        blk = np.frombuffer(read(addr, plan.output_bytes), dtype="<u2")
        blk = blk.reshape(plan.kb, plan.gb, LANES)       # [k][g][lane]
        blk = blk.transpose(1, 2, 0).reshape(plan.gb * LANES, plan.kb)
        y[gbi * plan.gb * LANES:(gbi + 1) * plan.gb * LANES,
          kbi * plan.kb:(kbi + 1) * plan.kb] = blk
    return y[:plan.N, :plan.K].view(np.float16)


def fc_result(plan, weights, inputs, running=False):
    """Return the ``N x K`` float16 result the graph computes, vectorized over ``k`` and ``n``.

    Mirrors the accumulation order of the module doc exactly (binary16 FMA via :mod:`sw.spec.fp16`).
    With ``running=True`` return ``(result, mu)`` where ``mu`` (``N x K`` float64) is the sum
    of the magnitudes of every rounded partial sum, for the running error bound of
    :func:`sw.models.reference.check`.
    """
    w = np.zeros((plan.K, plan.Cw), dtype=np.uint16)
    w[:, :plan.C] = np.asarray(weights, dtype=np.float16).view(np.uint16)
    x = np.zeros((plan.N, plan.Cw), dtype=np.uint16)
    x[:, :plan.C] = np.asarray(inputs, dtype=np.float16).view(np.uint16)
    acc = np.full((plan.K, plan.N), fp16.NEG_ZERO, dtype=np.uint16)
    wt = np.ascontiguousarray(w.T)
    xt = np.ascontiguousarray(x.T)
    mu = np.zeros((plan.K, plan.N)) if running else None
    for c in range(plan.Cw):
        acc = fp16.fma(wt[c][:, None], xt[c][None, :], acc)
        if running:
            mu += np.abs(acc.view(np.float16).astype(np.float64))
    y = np.ascontiguousarray(acc.T).view(np.float16)
    return (y, np.ascontiguousarray(mu.T)) if running else y
