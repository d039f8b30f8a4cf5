"""Running a sweep's points: one ``fdpu run`` subprocess each, serially or on a Dask cluster.

:func:`run_point` runs one point as ``python -m sw.cli run ARGS --json FILE`` in a subprocess
(the same code path and figures as a user's ``fdpu run``; a crash or a memory-hungry point
ends with its process) and returns its record.  :func:`run_sweep` runs the points that the
:class:`~sw.sweep.cache.Store` does not hold:

* ``scheduler=None``: in this process, one after the other;
* ``scheduler="local"``: on a :class:`distributed.LocalCluster` of ``workers`` processes with
  one thread each (default: one per core);
* ``scheduler="tcp://host:port"``: on an existing Dask cluster.  Its workers must have the
  project installed at the same source (:func:`sw.sweep.cache.source_digest` are compared before
  any point runs: a worker with other code would compute results under the wrong key).  Each
  worker builds the Verilator model of a parameter set once in its checkout's ``build/sim``
  (shared, under a file lock, by workers on one filesystem; built once per machine otherwise).

Records come back to this process, which writes them to the store as they complete, so an
interrupted sweep resumes where it stopped.  A progress bar shows the points done (cached or
run), running (on a worker) and left, and the mean wall time of a point run.
"""

import ctypes
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime, timezone

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from sw.spec.errors import FdpuError
from sw.sweep import cache

__all__ = ["WALL", "run_point", "run_sweep", "connect"]

#: Figures of a ``fdpu run`` record that are wall-clock times, not results: a record keeps them
#: apart (``record["wall"]``) so that two runs of a point have equal ``result``s.
WALL = ("golden_s", "rtl_s", "build_s", "sim_s", "cycles_per_s", "model_seconds", "seconds",
        "waves", "segments", "resumed")
#: Bulky figures a sweep record does not keep.
DROP = ("dma_descriptors", "golden_counters")
#: Seconds to wait for a Dask scheduler and its first worker.
CONNECT_TIMEOUT = 20


def _die_with_parent():
    """Ask Linux to end this (child) process when its parent ends: a Dask worker that is
    killed takes its point's simulation with it."""
    try:
        ctypes.CDLL(None).prctl(1, signal.SIGTERM)          # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def run_point(args, sim, checkpoint=None):
    """Run ``fdpu run ARGS`` in a subprocess and return ``(record, error)``: the record when
    the run ended with a result (exit status 0: match, 1: mismatch), else ``None`` and the end
    of its output.  ``checkpoint``: for an RTL point, the directory where it keeps its
    finished segments (``fdpu run --checkpoint``): a point stopped before its end resumes from
    them (:func:`run_sweep` removes it once the point's record is in the store)."""
    start = time.perf_counter()
    extra = ["--checkpoint", str(checkpoint)] if checkpoint and sim in cache.SIMULATORS else []
    with tempfile.TemporaryDirectory(prefix="fdpu-sweep-") as tmp:
        path = os.path.join(tmp, "point.json")
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, (str(cache.ROOT),
                                                          env.get("PYTHONPATH"))))
        proc = subprocess.run([sys.executable, "-m", "sw.cli", "run", *args, *extra, "--json",
                               path],
                              capture_output=True, text=True, errors="replace", env=env,
                              cwd=tmp,
                              preexec_fn=_die_with_parent if sys.platform == "linux" else None)
        seconds = time.perf_counter() - start
        if proc.returncode not in (0, 1) or not os.path.exists(path):
            tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-12:])
            return None, f"exit status {proc.returncode}: {tail}"
        with open(path, encoding="utf-8") as f:
            result = json.load(f)
    wall = {k: result.pop(k) for k in WALL if k in result}
    wall["point_s"] = seconds
    for k in DROP:
        result.pop(k, None)
    record = dict(sim=sim, status=proc.returncode, result=result, wall=wall,
                  command="fdpu run " + " ".join(args),
                  finished=datetime.now(timezone.utc).isoformat(timespec="seconds"),
                  host=os.uname().nodename)
    return record, None


def _sim_of(args):
    return args[args.index("--sim") + 1] if "--sim" in args else "golden"


def connect(scheduler, workers):
    """Return ``(client, cluster)`` for ``scheduler`` (``"local"`` or an address), checked:
    reachable, with a worker, running this project's source."""
    import logging

    from distributed import Client, LocalCluster

    cluster = None
    try:
        if scheduler == "local":
            cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                                   dashboard_address=":0", silence_logs=logging.ERROR)
            client = Client(cluster)
        else:
            client = _bounded_client(Client, scheduler)
    except (OSError, TimeoutError) as exc:
        if cluster is not None:
            cluster.close()
        raise FdpuError(f"--scheduler {scheduler}: cannot reach the Dask scheduler within "
                        f"{CONNECT_TIMEOUT} s ({exc})") from None
    try:
        client.wait_for_workers(1, timeout=CONNECT_TIMEOUT)
        theirs = set(client.run(_digests).values())
    except (OSError, TimeoutError) as exc:
        _close(client, cluster)
        raise FdpuError(f"--scheduler {scheduler}: no worker answered within {CONNECT_TIMEOUT} s "
                        f"({exc})") from None
    except Exception as exc:  # noqa: BLE001: a worker without the project fails to unpickle
        _close(client, cluster)
        raise FdpuError(f"--scheduler {scheduler}: the workers cannot run the project's code "
                        f"(install it on them: pip install -e .): {exc}") from None
    if theirs != {_digests()}:
        _close(client, cluster)
        raise FdpuError(f"--scheduler {scheduler}: the workers run another version of the "
                        f"project's source than this checkout (source digests differ): install "
                        f"this version on them")
    return client, cluster


def _bounded_client(client_class, address):
    """Return a client of the scheduler at ``address``, connected within
    :data:`CONNECT_TIMEOUT` seconds whatever the other end does (a server that accepts the
    connection and never answers included): the handshake runs in a daemon thread that is
    abandoned past the bound."""
    result = {}

    def connect_():
        try:
            result["client"] = client_class(address, timeout=CONNECT_TIMEOUT)
        except BaseException as exc:  # noqa: BLE001: reported below, whatever it is
            result["error"] = exc
    thread = threading.Thread(target=connect_, daemon=True, name="fdpu-connect")
    thread.start()
    thread.join(CONNECT_TIMEOUT + 5)
    if thread.is_alive():
        raise TimeoutError(f"no handshake in {CONNECT_TIMEOUT + 5} s")
    if "error" in result:
        exc = result["error"]
        if isinstance(exc, (OSError, TimeoutError)):
            raise exc
        raise OSError(f"{type(exc).__name__}: {exc}") from None
    return result["client"]


def _digests():
    """Return the source digests of every kind of ``--sim`` (compared with the workers')."""
    return tuple(cache.source_digest(sim) for sim in ("golden", "model", "verilator"))


def _close(client, cluster):
    client.close()
    if cluster is not None:
        cluster.close()


def run_sweep(todo, store, *, scheduler=None, workers=None, console=None):
    """Run the points ``todo`` (a list of ``(key, name, args, point)``) and put their records in
    ``store`` as they arrive; return ``{key: error}`` of the points that ended without a
    result."""
    failed = {}
    times = []
    progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                        TextColumn("{task.fields[info]}"), TimeElapsedColumn(),
                        console=console, transient=False)

    def done(k, name, args, point, record, error):
        if record is None:
            failed[k] = error
            progress.console.print(f"[red]failed[/red] {name}: {error}")
            return
        record.update(key=k, name=name, point=point, args=list(args),
                      tools=cache.tool_versions(record["sim"]),
                      source=cache.source_digest(record["sim"]))
        store.put(k, record)
        shutil.rmtree(store.partial(k), ignore_errors=True)
        times.append(record["wall"]["point_s"])

    def info(running, left):
        mean = f"{sum(times) / len(times):.1f} s/point" if times else "-"
        return f"running {running}, left {left}, {mean}"

    with progress:
        task = progress.add_task("sweep", total=len(todo), info=info(0, len(todo)))
        if scheduler is None:
            for i, (k, name, args, point) in enumerate(todo):
                progress.update(task, description=name[:60], info=info(1, len(todo) - i - 1))
                done(k, name, args, point, *run_point(args, _sim_of(args), store.partial(k)))
                progress.advance(task)
            progress.update(task, description="sweep", info=info(0, 0))
            return failed
        from distributed import as_completed

        client, cluster = connect(scheduler, workers)
        try:
            futures, names = [], {}
            for k, name, args, point in todo:
                fut = client.submit(run_point, list(args), _sim_of(args), str(store.partial(k)),
                                    pure=False, key=f"fdpu-point-{k[:20]}")
                futures.append(fut)
                names[fut.key] = (k, name, args, point)
            queue = as_completed(futures)
            left = len(todo)
            while not queue.is_empty():
                for fut in queue.next_batch(block=False):
                    k, name, args, point = names[fut.key]
                    try:
                        record, error = fut.result()
                    except Exception as exc:  # noqa: BLE001: a worker lost, a task killed
                        record, error = None, f"{type(exc).__name__}: {exc}"
                    done(k, name, args, point, record, error)
                    left -= 1
                    progress.advance(task)
                running = sum(len(v) for v in client.processing().values())
                progress.update(task, info=info(min(running, left), left - min(running, left)))
                time.sleep(0.25)
        finally:
            _close(client, cluster)
    return failed
