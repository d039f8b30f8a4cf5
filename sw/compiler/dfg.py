"""The dataflow-graph IR: instructions as nodes, operand deliveries as edges.

Contract
--------
A :class:`Graph` holds :class:`Node` s (one instruction each: opcode, number of source operands,
immediate, END flag) and :class:`Edge` s (the result of ``src`` delivered to operand
``operand`` of ``dst``).  An edge out of a ``SWITCH`` names its ``branch`` (``True``: taken when
the condition is non-zero).  A *feedback* edge is one that carries ``init`` initial tokens
(configuration preloads, :data:`sw.spec.packet.ConfigWhat.PRELOAD`) and closes a cycle: the SWITCH
feedback edge of PAPER.md section 4 or a loop-carried value.

``Node.pipe0`` is the instruction's pipe hint (:mod:`sw.spec.isa`: issue an INT/CTRL instruction on
pipe 0 of a PE with two INT pipes); the assembler copies it into the instruction word.

Operand ``i`` of a node is a token operand unless it is a register (``regs``) or, for
``nsrc`` below the arity, the immediate (see :mod:`sw.spec.isa`).  ``CTX`` operand 0 is delivered by
the MicC, never by an edge.

:meth:`Graph.validate` raises :class:`DfgError` (a :class:`~sw.spec.errors.FdpuError`) for: a wrong
operand count; an edge naming an unknown node or an operand the node does not have; a token
operand with no producer; more than ``MAX_DESTS`` destinations; a cycle with no initial token;
an END flag on ``ITER``/``BSCAN``/``BPOS`` (they send no context-end message); ``pipe0`` on an FP
node; two producers into
one operand unless they are the two branches of one SWITCH (a *join*); a join without a
feedback edge from the join (or a node after it) to that SWITCH; and a violation of the
*rate rule*.

Rates
-----
:meth:`Graph.rates` gives each node's firings per context (a :class:`fractions.Fraction`): a
``CTX`` fires once; a node fires as often as its token operands arrive; ``ITER`` and ``BSCAN``
multiply their rate by their count, ``FACC`` divides by its count; a SWITCH branch carries *at
most* the SWITCH's rate (the bound is used).  A data-dependent emitter (``BPOS``, an ``ITER``
whose count comes from its token, an ``MCAST`` to each destination) emits :data:`VARYING`
tokens per context, and so does everything they feed, until a ``FACC`` with a count operand
brings the rate back to its count operand's (whose token is what says how many steps the data
hold).  The rate rule (``docs/isa.md``): every edge whose producer fires more than once per
context (or :data:`VARYING` times) must stay inside one placement group (``Node.group``; the
mapper puts a group on one PE), the operands of one node must have equal rates (two
:data:`VARYING` streams are taken as equal: the data the host writes promise it), and END nodes
fire exactly once per context.
"""

from dataclasses import dataclass, field
from fractions import Fraction

from sw.spec.arch import ArrayParams
from sw.spec.errors import FdpuError
from sw.spec.isa import Op, Unit, facc_results, loop_count

__all__ = ["DfgError", "Node", "Edge", "Graph", "VARYING"]


#: The instructions whose one firing emits several tokens.
_EMITTERS = (Op.ITER, Op.BSCAN, Op.BPOS)


class _Varying:
    """The rate of a data-dependent token stream (:data:`VARYING`)."""

    def __repr__(self):
        return "VARYING"

    def __str__(self):
        return "a data-dependent number of"


#: The firings per context of a node fed by a data-dependent emitter (module doc).
VARYING = _Varying()


def _above_one(r):
    return r is VARYING or r > 1


def _varying_emitter(node):
    return node.op in (Op.BPOS, Op.MCAST) or node.op is Op.ITER and not loop_count(node.imm)


def _counted_facc(node):
    return node.op is Op.FACC and node.nsrc == 3


class DfgError(FdpuError):
    """A dataflow graph is malformed."""


@dataclass
class Node:
    """One instruction of a graph.

    ``group`` names the placement group (nodes of one group go to one PE); ``pe`` optionally
    pins the node to a PE ``(x, y)``; ``meta`` holds builder information (role, row, engine);
    ``pipe0`` is the pipe hint the assembler puts into the instruction (:mod:`sw.spec.isa`).
    """
    id: int
    op: Op
    nsrc: int
    imm: int = 0
    end: bool = False
    regs: dict = field(default_factory=dict)
    name: str = ""
    group: object = None
    pe: tuple = None
    meta: dict = field(default_factory=dict)
    pipe0: bool = False

    @property
    def token_operands(self):
        """Return the operand indices that arrive as tokens."""
        return tuple(i for i in range(self.nsrc) if i not in self.regs)

    def label(self):
        """Return ``name`` or ``OP#id``."""
        return self.name or f"{self.op.name}#{self.id}"


@dataclass(frozen=True)
class Edge:
    """The result of ``src`` delivered to operand ``operand`` of ``dst``."""
    src: int
    dst: int
    operand: int
    branch: object = None
    init: int = 0
    init_value: int = 0

    @property
    def feedback(self):
        """Return whether the edge carries initial tokens (a feedback edge)."""
        return self.init > 0


class Graph:
    """A dataflow graph; build it with :meth:`add` and :meth:`connect`."""

    def __init__(self, name="graph"):
        self.name = name
        self.nodes = []
        self.edges = []
        self._dests = {}        # node -> edges out of it (fanout's room check)
        self._count_rates = {}       # a counted FACC's results per context (rates())

    # Building ---------------------------------------------------------------------------------

    def add(self, op, nsrc=None, imm=0, end=False, name="", group=None, pe=None, pipe0=False,
            **meta):
        """Add a node and return its id.

        ``nsrc`` defaults to the arity of ``op``; a ``FACC``'s to 2, or 3 (the count operand)
        when the count of its immediate is 0.
        """
        op = Op(op)
        if nsrc is None:
            nsrc = op.arity if op is not Op.FACC else 2 if loop_count(imm) else 3
        node = Node(len(self.nodes), op, nsrc, imm, end,
                    {}, name, group, pe, meta, bool(pipe0))
        self.nodes.append(node)
        return node.id

    def connect(self, src, dst, operand, branch=None, init=0, init_value=0):
        """Add an edge from ``src`` to operand ``operand`` of ``dst`` and return it."""
        edge = Edge(src, dst, operand, branch, init, init_value)
        self.edges.append(edge)
        self._dests[src] = self._dests.get(src, 0) + 1
        return edge

    def fanout(self, src, targets, branch=None, group=None, pipe0=False):
        """Connect ``src`` to every ``(dst, operand)`` of ``targets``, through MOV trees.

        A node has at most ``MAX_DESTS`` destinations; beyond that the targets are spread over
        MOV nodes (same group as ``src``), each forwarding to up to ``MAX_DESTS`` of them.
        ``pipe0`` is the MOVs' pipe hint.  Returns the MOV nodes added.
        """
        targets = list(targets)
        k = ArrayParams.MAX_DESTS
        # Destinations ``src`` already has (e.g. a feedback edge) count against its k.
        room = k - self._dests.get(src, 0)
        if room < 1 and targets:
            raise DfgError(f"node {self.nodes[src].label()} already has {k} destinations; "
                           f"fan out from a MOV instead")
        movs = []
        if group is None:
            group = self.nodes[src].group
        meta = {k2: v for k2, v in self.nodes[src].meta.items() if k2 in ("engine",)}
        while len(targets) > room:
            # Replace the last targets (at most k, no more than needed) by one MOV feeding
            # them; repeat until few enough.
            # The MOV goes first in the list so its latency overlaps the direct targets.
            n = min(k, len(targets) - room + 1)
            chunk, targets = targets[-n:], targets[:-n]
            mov = self.add(Op.MOV, name=f"{self.nodes[src].label()}.fan{len(movs)}",
                           group=group, pipe0=pipe0, role="fanout", **meta)
            movs.append(mov)
            for dst, operand in chunk:
                self.connect(mov, dst, operand)
            targets.insert(0, (mov, 0))
        for dst, operand in targets:
            self.connect(src, dst, operand, branch=branch)
        return movs

    # Queries ----------------------------------------------------------------------------------

    def node(self, nid):
        """Return the node ``nid``."""
        return self.nodes[nid]

    def out_edges(self):
        """Return ``{node id: [edges out of it]}``."""
        out = {n.id: [] for n in self.nodes}
        for e in self.edges:
            if e.src in out:
                out[e.src].append(e)
        return out

    def in_edges(self):
        """Return ``{(node id, operand): [edges into it]}``."""
        inn = {}
        for e in self.edges:
            inn.setdefault((e.dst, e.operand), []).append(e)
        return inn

    def count(self, op=None):
        """Return the number of nodes (of opcode ``op`` if given)."""
        return sum(1 for n in self.nodes if op is None or n.op is op)

    def end_nodes(self):
        """Return the ids of the END-flagged nodes."""
        return [n.id for n in self.nodes if n.end]

    # Validation -------------------------------------------------------------------------------

    def validate(self, params=None):
        """Raise :class:`DfgError` unless the graph is well formed (see the module doc)."""
        params = params or ArrayParams()
        n = len(self.nodes)
        for node in self.nodes:
            op = node.op
            if op is Op.INVALID:
                raise DfgError(f"node {node.label()}: INVALID is not an instruction")
            if not op.min_operands <= node.nsrc <= op.arity:
                raise DfgError(f"node {node.label()}: {op.name} takes {op.min_operands}.."
                               f"{op.arity} operands, not {node.nsrc}")
            for i in node.regs:
                if not 0 <= i < node.nsrc:
                    raise DfgError(f"node {node.label()}: register operand {i} beyond nsrc")
            if op in _EMITTERS and node.end:
                raise DfgError(f"node {node.label()}: {op.name} sends no context-end message "
                               f"(END on ITER/BSCAN is ignored); put END on a node that "
                               f"fires once per context")
            if node.pipe0 and op.unit is Unit.FP:
                raise DfgError(f"node {node.label()}: pipe0 (the INT pipe hint) is set on the "
                               f"FP instruction {op.name}; it is allowed only on INT/MEM/CTRL "
                               f"instructions")
        for e in self.edges:
            for end in (e.src, e.dst):
                if not 0 <= end < n:
                    raise DfgError(f"dangling edge {e}: node {end} does not exist "
                                   f"(graph has {n} nodes)")
            dst = self.nodes[e.dst]
            if not 0 <= e.operand < dst.nsrc or e.operand in dst.regs:
                raise DfgError(f"edge {self.nodes[e.src].label()} -> {dst.label()}: operand "
                               f"{e.operand} is not a token operand of {dst.op.name} (token "
                               f"operands: {list(dst.token_operands)})")
            if dst.op is Op.CTX:
                raise DfgError(f"edge into CTX node {dst.label()}: the MicC delivers its "
                               f"operand")
            src = self.nodes[e.src]
            if (src.op is Op.SWITCH) != (e.branch is not None):
                raise DfgError(f"edge {src.label()} -> {dst.label()}: a branch (True/False) "
                               f"is required on SWITCH edges and only there")
            if e.init < 0:
                raise DfgError(f"edge {src.label()} -> {dst.label()}: negative initial tokens")
            if e.init > params.operand_depth:
                raise DfgError(f"edge {src.label()} -> {dst.label()}: {e.init} initial tokens "
                               f"exceed operand_depth {params.operand_depth}")
        out = self.out_edges()
        for node in self.nodes:
            if len(out[node.id]) > params.MAX_DESTS:
                raise DfgError(f"node {node.label()} has {len(out[node.id])} destinations, at "
                               f"most {params.MAX_DESTS} (use Graph.fanout for MOV trees)")
        inn = self.in_edges()
        for node in self.nodes:
            for i in node.token_operands:
                if node.op is Op.CTX:
                    continue
                if not inn.get((node.id, i)):
                    raise DfgError(f"node {node.label()}: token operand {i} has no producer "
                                   f"(dangling operand)")
        self._check_cycles(out)
        self._check_joins(inn, out)
        self.rates()
        self._check_rate_rule(out)

    def _check_cycles(self, out):
        # Edges without initial tokens must form a DAG; a cycle of them can never fire.
        state = [0] * len(self.nodes)
        for root in range(len(self.nodes)):
            if state[root]:
                continue
            stack = [(root, iter(out[root]))]
            state[root] = 1
            path = [root]
            while stack:
                nid, it = stack[-1]
                for e in it:
                    if e.init:
                        continue
                    if state[e.dst] == 1:
                        cyc = path[path.index(e.dst):] + [e.dst]
                        names = " -> ".join(self.nodes[c].label() for c in cyc)
                        raise DfgError(f"cycle with no initial token: {names} (give its "
                                       f"feedback edge an initial token)")
                    if state[e.dst] == 0:
                        state[e.dst] = 1
                        stack.append((e.dst, iter(out[e.dst])))
                        path.append(e.dst)
                        break
                else:
                    state[nid] = 2
                    stack.pop()
                    path.pop()

    def _switch_origin(self, e, inn):
        # Follow single-producer chains back from edge e to the SWITCH branch it comes from.
        seen = set()
        while True:
            src = self.nodes[e.src]
            if src.op is Op.SWITCH:
                return src.id, e.branch
            if src.id in seen:
                return None
            seen.add(src.id)
            ins = [x for i in src.token_operands for x in inn.get((src.id, i), ())
                   if not x.init]
            if len(ins) != 1:
                return None
            e = ins[0]

    def _check_joins(self, inn, out):
        for (dst, operand), edges in inn.items():
            live = [e for e in edges if not e.init]
            if len(live) <= 1:
                continue
            label = f"{self.nodes[dst].label()} operand {operand}"
            origins = [self._switch_origin(e, inn) for e in live]
            if len(live) != 2 or None in origins or origins[0][0] != origins[1][0] \
                    or origins[0][1] == origins[1][1]:
                raise DfgError(f"{label} has {len(live)} producers; only the two branches of "
                               f"one SWITCH may deliver to the same operand")
            sw = origins[0][0]
            # The feedback edge must come from the join or from a node reachable from it.
            reach, todo = {dst}, [dst]
            while todo:
                for e in out[todo.pop()]:
                    if not e.init and e.dst not in reach:
                        reach.add(e.dst)
                        todo.append(e.dst)
            if not any(e.init and e.src in reach for e in inn.get((sw, 2), ())):
                raise DfgError(f"SWITCH {self.nodes[sw].label()}: its branches rejoin at "
                               f"{label} without a feedback edge from the join to SWITCH "
                               f"operand 2 (PAPER.md section 4)")

    def rates(self):
        """Return ``{node id: firings per context}`` (see the module doc).

        A rate is a :class:`~fractions.Fraction`, or :data:`VARYING` for a node fed by a
        data-dependent emitter (a FACC with a count operand included: its steps depend on the
        data, its results do not; :meth:`out_rate` gives those).
        """
        out, inn = self.out_edges(), self.in_edges()
        order = self._topo(out)
        rate, self._count_rates = {}, {}
        for nid in order:
            node = self.nodes[nid]
            if node.op is Op.CTX:
                rate[nid] = Fraction(1)
                continue
            rs = set()
            for i in node.token_operands:
                if not (_counted_facc(node) and i == 2):
                    rs |= self._arriving(inn, nid, i, rate)
            if _counted_facc(node):
                self._count_rates[nid] = self._counted_facc_rate(node, rs, inn, rate)
            if not rs:
                rate[nid] = Fraction(0)
            elif len(rs) > 1:
                raise DfgError(f"node {node.label()}: its operands arrive at different "
                               f"rates per context ({', '.join(map(str, rs))})")
            else:
                rate[nid] = rs.pop()
        return rate

    def _arriving(self, inn, nid, i, rate):
        return {self.out_rate(e.src, rate[e.src]) for e in inn.get((nid, i), ()) if not e.init}

    def _counted_facc_rate(self, node, rs, inn, rate):
        counts = self._arriving(inn, node.id, 2, rate)
        if rs and rs != {VARYING}:
            raise DfgError(f"node {node.label()}: a FACC with a count operand steps through a "
                           f"data-dependent stream, but its operands 0 and 1 arrive "
                           f"{', '.join(map(str, rs))} times per context")
        if VARYING in counts or len(counts) > 1:
            raise DfgError(f"node {node.label()}: its count operand (operand 2) must arrive "
                           f"a fixed number of times per context")
        return counts.pop() if counts else Fraction(0)

    def out_rate(self, nid, r):
        """Return the tokens per context node ``nid`` sends to each destination.

        ``r`` is its rate from :meth:`rates` (which must have run: a FACC with a count
        operand sends its count operand's rate).
        """
        node = self.nodes[nid]
        if _counted_facc(node):
            return self._count_rates[nid]
        if r is VARYING or _varying_emitter(node):
            return VARYING
        if node.op in _EMITTERS:
            return r * loop_count(node.imm)
        if node.op is Op.FACC:
            return facc_results(loop_count(node.imm), node.imm >> 16, r)
        return r

    def _topo(self, out):
        indeg = [0] * len(self.nodes)
        for e in self.edges:
            if not e.init:
                indeg[e.dst] += 1
        ready = [i for i, d in enumerate(indeg) if d == 0]
        order = []
        while ready:
            nid = ready.pop()
            order.append(nid)
            for e in out[nid]:
                if not e.init:
                    indeg[e.dst] -= 1
                    if indeg[e.dst] == 0:
                        ready.append(e.dst)
        if len(order) != len(self.nodes):
            self._check_cycles(out)
        return order

    def _check_rate_rule(self, out):
        rate = self.rates()
        for node in self.nodes:
            if node.end and rate[node.id] != 1:
                raise DfgError(f"END node {node.label()} fires {rate[node.id]} times per "
                               f"context; an END instruction must fire exactly once")
            r = self.out_rate(node.id, rate[node.id])
            if not (_above_one(r) or _above_one(rate[node.id])):
                continue
            for e in out[node.id]:
                dst = self.nodes[e.dst]
                if node.group is None or dst.group != node.group:
                    most = r if _above_one(r) else rate[node.id]
                    raise DfgError(
                        f"rate rule: {node.label()} fires {most} times per "
                        f"context but its edge to {dst.label()} leaves its placement group "
                        f"({node.group!r} -> {dst.group!r}); edges above one token per "
                        f"context must stay on one PE")

    # Export -----------------------------------------------------------------------------------

    def to_dot(self):
        """Return the graph in Graphviz DOT (feedback edges dashed, SWITCH branches labelled)."""
        lines = [f'digraph "{self.name}" {{', "  node [shape=box, fontname=monospace];"]
        for node in self.nodes:
            text = node.label() if node.name else node.op.name
            extra = f"\\n#{node.imm}" if node.imm else ""
            shape = ', shape=diamond' if node.op is Op.SWITCH else ""
            style = ', style=bold' if node.end else ""
            extra += "\\n[pipe0]" if node.pipe0 else ""
            lines.append(f'  n{node.id} [label="{text}{extra}"{shape}{style}];')
        for e in self.edges:
            attrs = [f'headlabel="{e.operand}"']
            if e.branch is not None:
                attrs.append(f'label="{"T" if e.branch else "F"}"')
            if e.init:
                attrs.append(f'style=dashed, taillabel="init {e.init}"')
            lines.append(f"  n{e.src} -> n{e.dst} [{', '.join(attrs)}];")
        lines.append("}")
        return "\n".join(lines) + "\n"
