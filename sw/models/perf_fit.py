"""The performance model's calibration: its constants, the RTL runs they were fitted on, the error.

Contract
--------
``sw/models/calibration.json`` (:data:`CALIBRATION`) holds the fitted
:class:`~sw.models.perf.Constants` and every calibration point: its name, the command that
measured it, its configuration (layer or shape, density, seed, batch, graph and blocking,
array, system), what the RTL measured, and whether it was *held out* of the fit.

* :func:`constants` returns the fitted constants (read once).
* :func:`rebuild` returns a point's plan, weights, inputs and system as it ran; :func:`workload`
  its :class:`~sw.models.perf.Workload`; :func:`measured` the figures the model is compared
  on.
* :func:`fit` fits the constants to the points not held out (``scipy.optimize.least_squares``
  on the relative errors: compute cycles; configuration cycles; DMA-in and DMA-out cycles of
  the points whose DMA ran on the RTL) and returns the new calibration;
  :func:`save` writes it.
* :func:`check` predicts every point with the given constants and returns one row per point
  (predicted, measured, relative error) and the mean and largest errors, fitted and held-out
  points apart; :func:`by_effect` the errors per effect the points exercise (graph, array,
  batch, passes, the DMA's options); :func:`print_check` prints them (``fdpu model-check``).
* :func:`network_point` stores a network run on the RTL as a held-out point per layer, and
  :func:`network_rows` checks them against the network run on the model (a ``predict``
  callable: the CLI runs ``fdpu net --sim model``); :func:`summarize` sums any rows.
* :func:`measured_point` finds the calibration point that ran a record's configuration on the
  RTL (the same layer and weights, batch, plan, array and system), and :func:`error_of` a
  model record's error against it: how ``fdpu run --sim model`` and ``fdpu paper --source
  model`` show the measured error of a point where the RTL ran it.
"""

import functools
import json
import os
import shlex
from dataclasses import asdict

import numpy as np

from sw.compiler import layers, planner
from sw.compiler.fc_layer import FcLayer, PlanOptions
from sw.compiler.graph_kinds import graph_kind
from sw.models import perf
from sw.models.perf import Constants, System, Workload
from sw.spec.arch import ArrayParams
from sw.spec.errors import FdpuError

__all__ = ["CALIBRATION", "constants", "load", "point", "rebuild", "workload", "measured", "fit",
           "save", "check", "network_point", "network_rows", "summarize", "by_effect",
           "print_check", "measured_point", "error_of", "TARGETS"]

#: The calibration file: fitted constants and the RTL points they came from.
CALIBRATION = perf.CALIBRATION

#: The error targets: compute cycles within 5 %, end-to-end cycles within 10 % on every point.
TARGETS = {"compute": 0.05, "end_to_end": 0.10}

#: Weight of the pull of each fitted constant towards its starting value (per unit of log).
_PRIOR = 0.02

#: Constants each residual group fits (the others stay as they are while it is fitted).
_GROUPS = {
    "compute": ("fp", "pipe2", "pipe0", "int1", "dbuf", "mesh", "loop", "acc", "fan",
                "credit", "wstream", "shallow", "switch_held", "queue", "inflight", "context",
                "tail", "steal", "ramp", "row_trip"),
    "config": ("config0", "config1"),
    "dma": ("dma0", "dma_desc", "dma_bw", "give"),
}


def load(path=CALIBRATION):
    """Return the calibration (the JSON object of :data:`CALIBRATION`)."""
    try:
        with open(path) as f:
            return json.load(f)
    except OSError as exc:
        raise FdpuError(f"cannot read the performance model's calibration {path}: {exc}") \
            from exc


def constants(path=CALIBRATION):
    """Return the fitted :class:`~sw.models.perf.Constants` of the calibration at ``path``."""
    return perf.calibrated(path)


def _config(rec):
    """Return the configuration of an RTL record (``fdpu run --sim verilator --json``)."""
    plan = rec["plan"]
    return dict(layer=rec["layer"], K=rec["K"], C=rec["C"], N=rec["N"], mode=rec["mode"],
                density=rec.get("density"), seed=rec.get("seed", 0),
                sparse_graph=plan.get("sparse_graph"), kb=plan["kb"], gb=plan["gb"],
                wfan=plan["wfan"], passes=rec["passes"], contexts=rec["contexts"],
                chunks=plan.get("chunks", 1),
                rows=rec["rows"], cols=rec["cols"], slots=rec["slots"],
                int_issue=rec.get("int_issue", 1), operand_depth=rec.get("operand_depth", 4),
                dbuf_bytes=rec.get("dbuf_bytes", 1 << 21),
                dma_channels=rec.get("dma_channels", 1), mem_latency=rec.get("mem_latency", 20),
                mem_bandwidth=rec.get("mem_bandwidth", 8.0),
                config_ports=rec.get("config_ports", 4), overlap=rec.get("overlap", True),
                double_buffer=bool(plan.get("double_buffer", False)),
                early_start=bool(rec.get("early_start", False)),
                edge_multicast=bool(rec.get("edge_multicast", False)),
                config_spans=bool(rec.get("config_spans", False)),
                backdoor_in=bool(rec.get("dma_in_backdoor", False)))


def point(rec, name, command, holdout):
    """Return the calibration point of an RTL record: configuration and measured figures."""
    runs = rec.get("pass_cycles")
    meas = dict(compute=rec["compute_cycles"], config=rec["config_cycles"],
                contexts=rec["context_cycles"], cycles=rec["cycles"],
                dma_in=sum(r["dma_in"] for r in runs) if runs else None,
                dma_out=sum(r["dma_out"] for r in runs) if runs else None,
                ext_read=rec["ext_read_bytes"], ext_write=rec["ext_write_bytes"])
    return dict(name=name, command=command, holdout=bool(holdout), config=_config(rec),
                measured=meas)


@functools.lru_cache(maxsize=4)
def _weights(layer, k, c, density, seed):
    """Return the weights a point ran: the zoo layer's or a ``K x C`` shape's, seeded and
    pruned to ``density`` (``None``: the zoo layer's own, all weights of a shape).  Read-only:
    the points of one layer share them (:func:`check` takes the points layer by layer)."""
    if layer in layers.layer_names():
        w = layers.make_weights(layers.get_layer(layer), density, seed)
    else:
        w = layers.make_weights((k, c), 1.0 if density is None else density, seed)
    w.setflags(write=False)
    return w


def _weights_key(pt):
    """Return the arguments of :func:`_weights` of calibration point ``pt``."""
    c = pt["config"]
    return c["layer"], c["K"], c["C"], c["density"], c["seed"]


def rebuild(pt):
    """Return ``(plan, weights, inputs, system)`` of calibration point ``pt``, as it ran."""
    c = pt["config"]
    params = ArrayParams(rows=c["rows"], cols=c["cols"], slots=c["slots"],
                         int_issue=c["int_issue"], operand_depth=c["operand_depth"],
                         dbuf_bytes=c["dbuf_bytes"])
    w = _weights(*_weights_key(pt))
    x = layers.make_inputs(c["C"], c["N"], c["seed"])
    plan = planner.plan_fc(FcLayer.of(w, c["N"]), params, PlanOptions(
        c["mode"], c["sparse_graph"], c["kb"], c["gb"],
        wfan=c["wfan"] if graph_kind(c["mode"], c["sparse_graph"]).sparse else None,
        double_buffer=c.get("double_buffer", False), chunks=c.get("chunks", 1)))
    if (plan.passes, plan.contexts) != (c["passes"], c["contexts"]):
        raise FdpuError(f"calibration point {pt['name']}: the plan now has {plan.passes} passes "
                        f"of {plan.contexts} contexts, the RTL ran {c['passes']} of "
                        f"{c['contexts']}: re-run it (scripts/calibrate.py run)")
    system = System(dma_channels=c["dma_channels"], mem_latency=c["mem_latency"],
                    mem_bandwidth=c["mem_bandwidth"], config_ports=c["config_ports"],
                    overlap=c["overlap"], early_start=c.get("early_start", False),
                    edge_multicast=c.get("edge_multicast", False),
                    config_spans=c.get("config_spans", False))
    return plan, w, x, system


def workload(pt):
    """Return the :class:`~sw.models.perf.Workload` of calibration point ``pt``."""
    plan, w, _, system = rebuild(pt)
    return Workload(plan, w, system)


def measured(pt):
    """Return the measured figures of ``pt`` the model is compared on (``None``: not measured,
    e.g. the DMA-in of a point loaded by backdoor)."""
    m = dict(pt["measured"])
    if pt["config"]["backdoor_in"]:
        m.update(dma_in=None, cycles=None, ext_read=None)
    return m


#: What a run and a calibration point must share to be the same point (the weights besides:
#: the same seed and count of stored weights).
_SAME = ("layer", "K", "C", "N", "mode", "sparse_graph", "kb", "gb", "wfan", "passes",
         "contexts", "rows", "cols", "slots", "int_issue", "operand_depth", "dbuf_bytes",
         "dma_channels", "mem_latency", "mem_bandwidth", "config_ports", "overlap",
         "double_buffer", "early_start", "edge_multicast", "config_spans", "backdoor_in")


@functools.lru_cache(maxsize=8)
def _stored(layer, k, c, density, seed):
    """Return the count of stored (non-zero) weights of a point's weights."""
    w = np.asarray(_weights(layer, k, c, density, seed), np.float16)
    return int(np.count_nonzero(w.view(np.uint16)))


def _config_of(pt):
    """Return point ``pt``'s configuration, with the options its record predates at the
    value they had then (``config_spans`` off)."""
    return {"config_spans": False, **pt["config"]}


def measured_point(rec, calibration=None):
    """Return the calibration point that ran the configuration of ``rec`` on the RTL, or
    ``None``.

    ``rec`` is a record of ``fdpu run`` (``--sim model`` or a simulator, ``--json``): the
    point matches when it has the same layer, batch, graph and blocking, passes and contexts,
    array, system options and DMA (the DMA-in on the RTL, not by backdoor), seed and count of
    stored weights (``rec["nnz"]``).  ``calibration`` defaults to :func:`load`'s.
    """
    cfg = _config(rec)
    for pt in (calibration or load())["points"]:
        c = _config_of(pt)
        if all(c.get(k) == cfg[k] for k in _SAME) and c.get("seed", 0) == cfg["seed"] and \
                _stored(c["layer"], c["K"], c["C"], c["density"], c["seed"]) == rec["nnz"]:
            return pt
    return None


def error_of(rec, pt):
    """Return the relative error of a model record ``rec`` against calibration point ``pt``'s
    measurement (:func:`measured_point`): ``{"compute": e, "cycles": e}`` (``None`` where the
    RTL did not measure it)."""
    meas = measured(pt)
    got = dict(compute=rec["compute_cycles"], cycles=rec["cycles"])
    return {k: (got[k] - meas[k]) / meas[k] if meas.get(k) else None for k in got}


def _figures(pred):
    d = pred.as_dict()
    return dict(compute=d["compute_cycles"], config=d["config_cycles"],
                contexts=d["context_cycles"], cycles=d["cycles"],
                dma_in=sum(p.dma_in for p in pred.passes),
                dma_out=sum(p.dma_out for p in pred.passes), ext_read=d["ext_read_bytes"],
                ext_write=d["ext_write_bytes"])


def _residuals(loads, names, base, x, which):
    k = Constants(**{**base, **dict(zip(names, x))})
    out = []
    for wl, meas in loads:
        pred = _figures(wl.evaluate(k, rounded=False))
        for key in which:
            if meas.get(key):
                out.append((pred[key] - meas[key]) / meas[key])
    return np.array(out)


def fit(points, start=None):
    """Return the calibration ``{"constants", "points"}`` fitted to ``points`` not held out.

    ``start``: the constants to start from (default :class:`~sw.models.perf.Constants`'s).
    """
    from scipy.optimize import least_squares
    base = asdict(start or Constants())
    train = [(workload(p), measured(p)) for p in points if not p["holdout"]]
    if not train:
        raise FdpuError("no calibration point to fit (all are held out)")
    for group, which in (("config", ("config",)), ("compute", ("compute",)),
                         ("dma", ("dma_in", "dma_out"))):
        names = list(_GROUPS[group])
        x0 = np.array([base[n] for n in names], dtype=float)
        r0 = _residuals(train, names, base, x0, which)
        if not len(r0):
            continue
        # Only the constants some point depends on are fitted (no point with one INT issue:
        # int1 keeps its value).
        used = [i for i in range(len(names))
                if any(not np.allclose(_residuals(train, names, base, x0 * np.where(
                    np.arange(len(names)) == i, f, 1.0), which), r0) for f in (0.3, 3.0))]
        names, x0 = [names[i] for i in used], x0[used]
        # A weak pull towards the starting values (a factor of 2 costs as much as a 1.4 %
        # error on one point) keeps constants that trade off against each other physical.
        start_x = x0.copy()

        def cost(x):
            return np.concatenate([_residuals(train, names, base, x, which),
                                   _PRIOR * np.log(x / start_x)])
        res = least_squares(cost, x0,
                            bounds=(np.full(len(x0), 1e-3), np.full(len(x0), np.inf)),
                            x_scale=np.maximum(np.abs(x0), 1e-2), diff_step=1e-3,
                            loss="soft_l1", f_scale=0.05)
        base.update(dict(zip(names, (float(v) for v in res.x))))
    return dict(constants=base, points=list(points))


def save(calibration, path=CALIBRATION):
    """Write ``calibration`` (:func:`fit`'s) to ``path`` and forget the cached constants."""
    perf.constants_of(calibration["constants"], path)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(calibration, f, indent=1, allow_nan=False)
        f.write("\n")
    os.replace(tmp, path)
    perf.calibrated.cache_clear()


def check(calibration=None, names=None):
    """Return ``(rows, summary)``: each point predicted with the calibration's constants.

    ``rows``: per point its name, ``holdout``, and per figure predicted, measured and relative
    error (``None`` where not measured); ``summary``: per set (``fitted``, ``held out``) the
    mean and largest absolute relative error of the compute and end-to-end cycles.
    ``names`` limits the points checked.
    """
    cal = calibration or load()
    k = perf.constants_of(cal["constants"])
    rows = []
    order = {pt["name"]: i for i, pt in enumerate(cal["points"])}
    for pt in sorted(cal["points"], key=lambda pt: repr(_weights_key(pt))):
        if names and pt["name"] not in names:
            continue
        wl = workload(pt)
        pred = wl.evaluate(k)
        got, meas = _figures(pred), measured(pt)
        err = {key: (got[key] - meas[key]) / meas[key] if meas.get(key) else None
               for key in got}
        rows.append(dict(name=pt["name"], holdout=pt["holdout"], predicted=got, measured=meas,
                         error=err, bound=pred.passes[0].bound, command=pt["command"],
                         effects=effects(pt["config"])))
    rows.sort(key=lambda row: order[row["name"]])
    return rows, summarize(rows)


def network_point(rec, name, command, model_command, keep=None):
    """Return the calibration entry of a network run on the RTL (``fdpu net --sim verilator
    --json`` record ``rec``): its name, the command that measured it, the ``fdpu net``
    arguments that predict it (``--sim model``), and per layer (those of index in ``keep``,
    default all) what the RTL measured and the effects it exercises.  Network points are
    validation only (held out)."""
    layers_ = []
    for lay in rec["layers"]:
        if keep is not None and lay["index"] not in keep:
            continue
        runs = lay.get("pass_cycles") or []
        meas = dict(compute=lay["compute_cycles"],
                    config=sum(r["config"] for r in runs) if runs else None,
                    contexts=sum(r["contexts"] for r in runs) if runs else None,
                    cycles=lay["cycles"],
                    dma_in=sum(r["dma_in"] for r in runs) if runs else None,
                    dma_out=sum(r["dma_out"] for r in runs) if runs else None,
                    ext_read=lay["ext_read_bytes"], ext_write=lay["ext_write_bytes"])
        config = dict(mode=rec["mode"], sparse_graph=lay["graph"].split("/")[-1]
                      if "/" in lay["graph"] else None, rows=rec["rows"], cols=rec["cols"],
                      N=lay["N"], operand_depth=rec["operand_depth"], passes=lay["passes"],
                      double_buffer=lay["double_buffer"], backdoor_in=False,
                      early_start=rec["early_start"], edge_multicast=rec["edge_multicast"],
                      config_spans=rec.get("config_spans", False))
        layers_.append(dict(index=lay["index"], name=lay["name"], stage=lay.get("stage"),
                            K=lay["K"], C=lay["C"], measured=meas,
                            effects=effects(config) + _network_effects(lay)))
    return dict(name=name, command=command, model_command=model_command, holdout=True,
                layers=layers_)


def _network_effects(lay):
    """Return the effects only a network shows of one layer record (``fdpu net --json``)."""
    out = ["network"]
    out.append("chained in (MOVEs)" if lay["chained_in"] else "inputs from the host")
    out.append("chained out" if lay["chained_out"] else "outputs to the host")
    if lay.get("stage"):
        out.append(f"split: {lay['stage']}")
    if "Conv" in lay["name"]:
        out.append("convolution (unrolled rows)")
    return out


def network_rows(calibration, predict, names=None):
    """Return :func:`check`'s rows for the calibration's network points: each network run
    by ``predict(argv)`` (the ``fdpu net`` record of the arguments ``argv``, ``--sim
    model``), its layers paired with the RTL's by index.  ``names`` limits the networks."""
    rows = []
    for net in calibration.get("networks", ()):
        if names and net["name"] not in names:
            continue
        argv = shlex.split(net["model_command"])[2:]           # after "fdpu net"
        got = {lay["index"]: lay for lay in predict(argv)["layers"]}
        for lay in net["layers"]:
            p = got.get(lay["index"])
            if p is None or p["name"] != lay["name"]:
                raise FdpuError(f"network point {net['name']}: the model no longer runs layer "
                                f"{lay['index']} ({lay['name']}) as the RTL did: re-run it "
                                f"(scripts/calibrate.py run)")
            runs = p.get("pass_cycles") or []
            pred = dict(compute=p["compute_cycles"], cycles=p["cycles"],
                        dma_in=sum(r["dma_in"] for r in runs),
                        dma_out=sum(r["dma_out"] for r in runs),
                        ext_read=p["ext_read_bytes"], ext_write=p["ext_write_bytes"])
            meas = lay["measured"]
            err = {key: (pred[key] - meas[key]) / meas[key] if meas.get(key) else None
                   for key in pred}
            rows.append(dict(name=f"{net['name']}:{lay['index']}", holdout=True,
                             predicted=pred, measured=meas, error=err, bound=p["bound_by"],
                             command=net["command"], effects=lay["effects"]))
    return rows


def summarize(rows):
    """Return :func:`check`'s summary of ``rows``: fitted and held-out points apart."""
    return {label: _errors([r for r in rows if r["holdout"] == sel])
            for label, sel in (("fitted", False), ("held out", True))}


def _errors(rows):
    """Return the mean and largest absolute error of ``rows``' compute and end-to-end cycles,
    and how many points are within both targets."""
    s = {}
    for key, fig in (("compute", "compute"), ("end_to_end", "cycles")):
        errs = [abs(r["error"][fig]) for r in rows if r["error"][fig] is not None]
        s[key] = dict(points=len(errs), mean=float(np.mean(errs)) if errs else None,
                      max=float(np.max(errs)) if errs else None)
    s["within"] = sum(1 for r in rows if all(
        r["error"][fig] is None or abs(r["error"][fig]) <= TARGETS[key]
        for key, fig in (("compute", "compute"), ("end_to_end", "cycles"))))
    s["points"] = len(rows)
    return s


def effects(config):
    """Return the effects a calibration point's configuration exercises: its graph, array,
    batch (1, 2-16, more: latency-bound to issue-bound), operand depth, passes, double
    buffering, how its inputs arrived (the DMA on the RTL or a backdoor) and the DMA's
    options."""
    out = [f"graph {graph_kind(config['mode'], config['sparse_graph']).name}",
           f"array {config['rows']} x {config['cols']}",
           "batch 1" if config["N"] == 1 else "batch 2-16" if config["N"] <= 16 else
           "batch > 16",
           f"operand depth {config['operand_depth']}",
           "one pass" if config["passes"] == 1 else "several passes"]
    if config.get("double_buffer"):
        out.append("double-buffered")
    if config["backdoor_in"]:
        out.append("inputs by backdoor (compute only)")
    else:
        out.append("DMA on the RTL")
        out += [name for name, key in (("early start", "early_start"),
                                       ("edge multicast", "edge_multicast"),
                                       ("configuration spans", "config_spans"))
                if config.get(key)]
    return out


def by_effect(rows):
    """Return ``{effect: summary}`` of :func:`check`'s rows, fitted and held out together: per
    effect of :func:`effects` the points exercising it, their mean and largest errors and how
    many are within both :data:`TARGETS`."""
    names = []
    for r in rows:
        names += [e for e in r["effects"] if e not in names]
    return {e: _errors([r for r in rows if e in r["effects"]]) for e in sorted(names)}


def print_check(rows, summary, console):
    """Print :func:`check`'s rows and summary as tables on a rich ``console``."""
    from rich.table import Table
    t = Table(title="performance model vs RTL (calibration points; * held out of the fit)",
              title_justify="left")
    for col in ("point", "compute model", "compute RTL", "error", "end to end model",
                "end to end RTL", "error", "bound"):
        t.add_column(col, justify="left" if col in ("point", "bound") else "right")

    def pct(v):
        return "-" if v is None else f"{v:+.1%}"

    def num(v):
        return "-" if v is None else f"{v:,}"
    for r in rows:
        p, m, e = r["predicted"], r["measured"], r["error"]
        t.add_row(("* " if r["holdout"] else "") + r["name"], num(p["compute"]),
                  num(m["compute"]), pct(e["compute"]), num(p["cycles"]), num(m["cycles"]),
                  pct(e["cycles"]), r["bound"])
    console.print(t)
    e = Table(title="error per effect (the points exercising it, fitted and held out)",
              title_justify="left")
    for col in ("effect", "points", "within both targets", "compute mean", "compute max",
                "end to end mean", "end to end max"):
        e.add_column(col, justify="left" if col == "effect" else "right")
    for name, v in by_effect(rows).items():
        e.add_row(name, str(v["points"]), str(v["within"]),
                  *(_pct(v[key][stat]) for key in TARGETS for stat in ("mean", "max")))
    console.print(e)
    s = Table(title="error summary (|model - RTL| / RTL)", title_justify="left")
    for col in ("points", "figure", "n", "mean", "max", "target", "within both targets"):
        s.add_column(col, justify="left" if col in ("points", "figure") else "right")
    for label, part in summary.items():
        for key in TARGETS:
            v = part[key]
            s.add_row(label, key.replace("_", " "), str(v["points"]), _pct(v["mean"]),
                      _pct(v["max"]), f"{TARGETS[key]:.0%}",
                      f"{part['within']} of {part['points']}")
    console.print(s)


def _pct(v):
    return "-" if v is None else f"{v:.1%}"
