"""Run the performance model's calibration set on the RTL and re-fit the model's constants.

The calibration set is a list of RTL runs (:data:`POINTS`): array sizes 1 x 1 to 8 x 8, the
dense graph and each sparse graph, batch 1 to 64, several shapes, layers that take several
passes.  Each point is an ``fdpu run --sim verilator`` command (or, for the 8 x 8 points
whose DMA-in is loaded by backdoor, the ``scripts/bench_skip.py`` record it came from); a
quarter of them are *held out*: not used for fitting, their error reported apart.  Beside
them, validation only (held out): whole networks run on the RTL (:data:`NET_POINTS`, each
layer a point: chained layers, split stages, convolutions) and the paper's RTL records
measured on today's hardware (:func:`paper_points`).

Usage::

    python scripts/calibrate.py run              # run the points not yet in the cache
    python scripts/calibrate.py fit              # fit, write sw/models/calibration.json
    python scripts/calibrate.py points           # the points only: constants kept
    python scripts/calibrate.py table            # the error table of docs/perf.md
    fdpu model-check                             # predicted vs measured, per point

``run`` keeps every RTL record in ``docs/data/calibration.jsonl`` (a result cache: a point
already there is not run again, so an interrupted run resumes).  ``fit`` re-fits the
constants of :mod:`sw.models.perf` on the points not held out (least squares on the relative
error of the compute cycles, then of the DMA cycles) and writes them, with the measured
figures of every point and the command that measured it, to
:data:`sw.models.perf_fit.CALIBRATION` (``sw/models/calibration.json``).  ``points`` writes
the points' measured figures (points re-run after a change of the machine: remove their
records from the cache, ``run``) and keeps the fitted constants.
"""

import argparse
import contextlib
import io
import json
import os
import shlex
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from sw.cli import app  # noqa: E402
from sw.cli import model as model_cli  # noqa: E402

#: The RTL records of the calibration points (a result cache, one JSON object a line).
CACHE = os.path.join(ROOT, "docs", "data", "calibration.jsonl")
#: Records of the 8 x 8 skip-graph benchmarks (``scripts/bench_skip.py``), DMA-in by backdoor.
BENCH = (os.path.join(ROOT, "docs", "data", "skip_fc8.jsonl"),
         os.path.join(ROOT, "docs", "data", "skip_sweep.jsonl"),
         os.path.join(ROOT, "docs", "data", "skip_depth.jsonl"))

#: The README's configuration, at the operand depth each point states.
_README = "--slots 128 --int-issue 2 --dma-channels 4"

#: ``(name, fdpu run options)`` of the points run here, on Verilator with the real DMA.
POINTS = (
    ("1x1-dense-16x64-b4", "--rows 1 --cols 1 --out-features 16 --in-features 64 --batch 4 "
                           "--mode dense"),
    ("1x1-gather-32x128-b4", "--rows 1 --cols 1 --out-features 32 --in-features 128 "
                             "--batch 4 --density 0.25 --sparse-graph gather"),
    ("1x1-skip-32x256-b8", "--rows 1 --cols 1 --out-features 32 --in-features 256 --batch 8 "
                           "--density 0.25 --sparse-graph skip"),
    ("1x1-switch-16x128-b4", "--rows 1 --cols 1 --out-features 16 --in-features 128 "
                             "--batch 4 --density 0.25 --sparse-graph switch"),
    ("1x1-dense-24x96-b1", "--rows 1 --cols 1 --out-features 24 --in-features 96 --batch 1 "
                           "--mode dense"),
    ("2x2-dense-64x256-b16", "--rows 2 --cols 2 --out-features 64 --in-features 256 "
                             "--batch 16 --mode dense"),
    ("2x2-gather-64x512-b16", "--rows 2 --cols 2 --out-features 64 --in-features 512 "
                              "--batch 16 --density 0.25 --sparse-graph gather"),
    ("2x2-skip-64x512-b16", "--rows 2 --cols 2 --out-features 64 --in-features 512 "
                            "--batch 16 --density 0.1 --sparse-graph skip"),
    ("2x2-switch-32x256-b4", "--rows 2 --cols 2 --out-features 32 --in-features 256 "
                             "--batch 4 --density 0.25 --sparse-graph switch"),
    ("2x2-dense-64x256-b1", "--rows 2 --cols 2 --out-features 64 --in-features 256 "
                            "--batch 1 --mode dense"),
    ("2x2-skip-96x1024-b64-multipass", "--rows 2 --cols 2 --out-features 96 --in-features 1024 "
                                   "--batch 64 --density 0.25 --sparse-graph skip "
                                   "--dbuf-bytes 65536"),
    ("2x2-dense-64x512-b8-multipass", "--rows 2 --cols 2 --out-features 64 --in-features 512 "
                                  "--batch 8 --mode dense --dbuf-bytes 8192"),
    ("4x4-dense-256x1024-b4", "--rows 4 --cols 4 --out-features 256 --in-features 1024 "
                              "--batch 4 --mode dense"),
    ("4x4-skip-256x1024-b4", "--rows 4 --cols 4 --out-features 256 --in-features 1024 "
                             "--batch 4 --density 0.09 --sparse-graph skip"),
    ("4x4-gather-256x1024-b64", "--rows 4 --cols 4 --out-features 256 --in-features 1024 "
                                "--batch 64 --density 0.09 --sparse-graph gather"),
    ("4x4-dense-128x512-b64", "--rows 4 --cols 4 --out-features 128 --in-features 512 "
                              "--batch 64 --mode dense"),
    ("4x4-skip-512x2048-b16", "--rows 4 --cols 4 --out-features 512 --in-features 2048 "
                              "--batch 16 --density 0.04 --sparse-graph skip"),
    ("8x8-skip-fc8-b4-d4", "--layer alexnet-fc8 --batch 4 --density 0.04 "
                           "--sparse-graph skip"),
    ("8x8-dense-256x1024-b4", "--out-features 256 --in-features 1024 --batch 4 --mode dense"),
)

#: The same kind of points at operand depth 2 (the defaults: the paper's 6 KB operand
#: buffer); :data:`POINTS` above ran at depth 4.
POINTS_D2 = (
    ("d2-1x1-dense-16x64-b4", "--rows 1 --cols 1 --out-features 16 --in-features 64 --batch 4 "
                              "--mode dense"),
    ("d2-1x1-skip-32x256-b8", "--rows 1 --cols 1 --out-features 32 --in-features 256 "
                              "--batch 8 --density 0.25 --sparse-graph skip"),
    ("d2-1x1-gather-32x128-b4", "--rows 1 --cols 1 --out-features 32 --in-features 128 "
                                "--batch 4 --density 0.25 --sparse-graph gather"),
    ("d2-1x1-switch-16x128-b4", "--rows 1 --cols 1 --out-features 16 --in-features 128 "
                                "--batch 4 --density 0.25 --sparse-graph switch"),
    ("d2-2x2-dense-64x256-b16", "--rows 2 --cols 2 --out-features 64 --in-features 256 "
                                "--batch 16 --mode dense"),
    ("d2-2x2-skip-64x512-b16", "--rows 2 --cols 2 --out-features 64 --in-features 512 "
                               "--batch 16 --density 0.1 --sparse-graph skip"),
    ("d2-2x2-gather-64x512-b64", "--rows 2 --cols 2 --out-features 64 --in-features 512 "
                                 "--batch 64 --density 0.25 --sparse-graph gather"),
    ("d2-2x2-dense-64x256-b1", "--rows 2 --cols 2 --out-features 64 --in-features 256 "
                               "--batch 1 --mode dense"),
    ("d2-2x2-skip-64x1024-b16-multipass", "--rows 2 --cols 2 --out-features 64 "
                                          "--in-features 1024 --batch 16 --density 0.25 "
                                          "--sparse-graph skip --dbuf-bytes 32768"),
    ("d2-4x4-dense-256x1024-b4", "--rows 4 --cols 4 --out-features 256 --in-features 1024 "
                                 "--batch 4 --mode dense"),
    ("d2-4x4-skip-256x1024-b64", "--rows 4 --cols 4 --out-features 256 --in-features 1024 "
                                 "--batch 64 --density 0.09 --sparse-graph skip"),
    ("d2-4x4-gather-128x512-b4", "--rows 4 --cols 4 --out-features 128 --in-features 512 "
                                 "--batch 4 --density 0.25 --sparse-graph gather"),
    ("d2-8x8-skip-fc8-b1-d4", "--layer alexnet-fc8 --batch 1 --density 0.04 "
                              "--sparse-graph skip"),
    ("d2-2x2-gather-64x512-b16-int1", "--rows 2 --cols 2 --out-features 64 --in-features 512 "
                                      "--batch 16 --density 0.25 --sparse-graph gather"),
    ("d2-2x2-dense-64x256-b16-int1", "--rows 2 --cols 2 --out-features 64 --in-features 256 "
                                     "--batch 16 --mode dense"),
    # Double-buffered passes (``-db``): each pass's contexts run beside the DMA-out of the
    # one before and the DMA-in of the one after (the model's ``steal``).
    ("d2-2x2-dense-128x1024-b4-db", "--rows 2 --cols 2 --out-features 128 --in-features 1024 "
                                    "--batch 4 --mode dense --dbuf-bytes 131072"),
    ("d2-2x2-skip-64x1024-b16-db", "--rows 2 --cols 2 --out-features 64 --in-features 1024 "
                                   "--batch 16 --density 0.25 --sparse-graph skip "
                                   "--dbuf-bytes 131072"),
    ("d2-2x2-dense-64x512-b64-db", "--rows 2 --cols 2 --out-features 64 --in-features 512 "
                                   "--batch 64 --mode dense --dbuf-bytes 131072"),
    ("d2-4x4-dense-256x1024-b64-db", "--rows 4 --cols 4 --out-features 256 --in-features 1024 "
                                     "--batch 64 --mode dense --dbuf-bytes 262144"),
    ("d2-4x4-skip-512x2048-b16-db", "--rows 4 --cols 4 --out-features 512 --in-features 2048 "
                                    "--batch 16 --density 0.25 --sparse-graph skip "
                                    "--dbuf-bytes 262144"),
    ("d2-4x4-dense-256x2048-b4-db", "--rows 4 --cols 4 --out-features 256 --in-features 2048 "
                                    "--batch 4 --mode dense --dbuf-bytes 65536"),
    # Early start (``-es``): each context starts when its own data are in, beside the rest
    # of its pass's DMA-in.
    ("d2-2x2-skip-64x1024-b16-es", "--rows 2 --cols 2 --out-features 64 --in-features 1024 "
                                   "--batch 16 --density 0.25 --sparse-graph skip"),
    ("d2-4x4-skip-256x1024-b16-es", "--rows 4 --cols 4 --out-features 256 --in-features 1024 "
                                    "--batch 16 --density 0.25 --sparse-graph skip"),
    ("d2-4x4-dense-256x1024-b64-es", "--rows 4 --cols 4 --out-features 256 --in-features 1024 "
                                     "--batch 64 --mode dense"),
    ("d2-2x2-dense-64x512-b16-es", "--rows 2 --cols 2 --out-features 64 --in-features 512 "
                                   "--batch 16 --mode dense"),
    # Early start with edge multicast (``-es-em``): an input block several Dbufs of an edge
    # hold goes as one multicast flit a word, and each context starts when its data are in.
    ("d2-2x2-dense-64x512-b16-es-em", "--rows 2 --cols 2 --out-features 64 "
                                      "--in-features 512 --batch 16 --mode dense"),
    ("d2-4x4-skip-256x1024-b16-es-em", "--rows 4 --cols 4 --out-features 256 "
                                       "--in-features 1024 --batch 16 --density 0.25 "
                                       "--sparse-graph skip"),
    ("d2-4x4-dense-256x1024-b4-es-em", "--rows 4 --cols 4 --out-features 256 "
                                       "--in-features 1024 --batch 4 --mode dense"),
    ("d2-4x4-dense-256x1024-b64-es-em", "--rows 4 --cols 4 --out-features 256 "
                                        "--in-features 1024 --batch 64 --mode dense"),
    ("d2-4x4-gather-128x512-b16-es-em", "--rows 4 --cols 4 --out-features 128 "
                                        "--in-features 512 --batch 16 --density 0.25 "
                                        "--sparse-graph gather"),
    ("d2-4x4-skip-512x2048-b16-db-es-em", "--rows 4 --cols 4 --out-features 512 "
                                          "--in-features 2048 --batch 16 --density 0.25 "
                                          "--sparse-graph skip --dbuf-bytes 262144"),
    ("d2-4x4-dense-256x1024-b64-db-es-em", "--rows 4 --cols 4 --out-features 256 "
                                           "--in-features 1024 --batch 64 --mode dense "
                                           "--dbuf-bytes 262144"),
    ("d2-8x8-dense-256x1024-b4-es-em", "--out-features 256 --in-features 1024 --batch 4 "
                                       "--mode dense"),
    ("d2-8x8-skip-fc8-b4-es-em", "--layer alexnet-fc8 --batch 4 --density 0.25 "
                                 "--sparse-graph skip"),
    ("d2-8x8-gather-1024x1024-b64-es-em", "--out-features 1024 --in-features 1024 --batch 64 "
                                          "--density 0.25 --sparse-graph gather"),
    ("d2-8x8-dense-fc8-b64-es-em", "--layer alexnet-fc8 --batch 64 --mode dense"),
    # The SWITCH graph on the 8 x 8, where two engines share a Dbuf (fitted: the paper's
    # layers below are validation only).
    ("d2-8x8-switch-1024x1024-b64-es-em", "--out-features 1024 --in-features 1024 "
                                          "--batch 64 --density 0.25 --sparse-graph switch"),
    ("d2-8x8-switch-fc8-b16-es-em", "--layer alexnet-fc8 --batch 16 --sparse-graph switch"),
    # The paper's layers on the 8 x 8 with the defaults (edge multicast; early start and
    # double buffering as the model chose them), at the layers' own densities.
    ("d2-8x8-dense-fc8-b4-em", "--layer alexnet-fc8 --batch 4 --mode dense"),
    ("d2-8x8-skip-fc8-b64-es-em", "--layer alexnet-fc8 --batch 64 --sparse-graph skip"),
    ("d2-8x8-switch-fc8-b4-es-em", "--layer alexnet-fc8 --batch 4 --sparse-graph switch"),
    ("d2-8x8-switch-fc8-b64-es-em", "--layer alexnet-fc8 --batch 64 --sparse-graph switch"),
    ("d2-8x8-dense-vgg7-b4-db-em", "--layer vgg16-fc7 --batch 4 --mode dense"),
    ("d2-8x8-skip-vgg7-b4-es-em", "--layer vgg16-fc7 --batch 4 --sparse-graph skip"),
    ("d2-8x8-dense-vgg7-b64-es-em", "--layer vgg16-fc7 --batch 64 --mode dense"),
    ("d2-8x8-skip-vgg7-b64-es-em", "--layer vgg16-fc7 --batch 64 --sparse-graph skip"),
    ("d2-8x8-switch-vgg7-b64-es-em", "--layer vgg16-fc7 --batch 64 --sparse-graph switch"),
    # Finer row blocks than the chooser's at batch 4: more contexts a pass, which start
    # beside the rest of the DMA-in and slow it (the model's ``give``).
    ("d2-8x8-dense-fc8-b4-kb4-es-em", "--layer alexnet-fc8 --batch 4 --mode dense --kb 4 "
                                      "--gb 1"),
    ("d2-8x8-skip-fc8-b4-kb2-es-em", "--layer alexnet-fc8 --batch 4 --sparse-graph skip "
                                     "--kb 2 --gb 1"),
    ("d2-8x8-dense-vgg7-b4-kb4-es-em", "--layer vgg16-fc7 --batch 4 --mode dense --kb 4 "
                                       "--gb 1"),
    # The skip graph's rows in parallel, without the DMA beside the contexts: the same layer
    # at 2, 4 and 8 rows an item (each row its own loads in flight), and at 4 % density.
    ("d2-8x8-skip-fc8-b4-kb2-em", "--layer alexnet-fc8 --batch 4 --sparse-graph skip --kb 2 "
                                  "--gb 1"),
    ("d2-8x8-skip-fc8-b4-kb4-em", "--layer alexnet-fc8 --batch 4 --sparse-graph skip --kb 4 "
                                  "--gb 1"),
    ("d2-8x8-skip-fc8-b4-kb8-em", "--layer alexnet-fc8 --batch 4 --sparse-graph skip --kb 8 "
                                  "--gb 1"),
    ("d2-8x8-skip-fc8-4pc-b4-kb8-em", "--layer alexnet-fc8 --batch 4 --density 0.04 "
                                      "--sparse-graph skip --kb 8 --gb 1"),
    ("d2-8x8-skip-vgg7-b4-kb8-em", "--layer vgg16-fc7 --batch 4 --sparse-graph skip --kb 8 "
                                   "--gb 1"),
    # Streamed items (an item over 16 contexts, each starting when its share of the weights
    # is in), beside the same layer unstreamed where that point is not above.
    ("d2-2x2-dense-32x2048-b4-es-em", "--rows 2 --cols 2 --out-features 32 --in-features 2048 "
                                      "--batch 4 --mode dense --chunks 1"),
    ("d2-2x2-dense-32x2048-b4-st16-es-em", "--rows 2 --cols 2 --out-features 32 "
                                           "--in-features 2048 --batch 4 --mode dense "
                                           "--chunks 16"),
    ("d2-8x8-dense-fc8-b4-st16-es-em", "--layer alexnet-fc8 --batch 4 --mode dense "
                                       "--chunks 16"),
    ("d2-8x8-dense-vgg7-b4-st16-es-em", "--layer vgg16-fc7 --batch 4 --mode dense "
                                        "--chunks 16"),
    # The skip graph streamed (its sums carried by the count token's continue bit).
    ("d2-8x8-skip-fc8-b4-st16-es-em", "--layer alexnet-fc8 --batch 4 --sparse-graph skip "
                                      "--chunks 16"),
    ("d2-8x8-skip-fc8-b4-st8-es-em", "--layer alexnet-fc8 --batch 4 --sparse-graph skip "
                                     "--chunks 8"),
    ("d2-8x8-skip-vgg7-b4-st16-es-em", "--layer vgg16-fc7 --batch 4 --sparse-graph skip "
                                       "--chunks 16"),
    ("d2-2x2-skip-32x2048-b4-st8-es-em", "--rows 2 --cols 2 --out-features 32 "
                                         "--in-features 2048 --batch 4 --density 0.25 "
                                         "--sparse-graph skip --chunks 8"),
    # The configuration's records of spans of PEs (``-cs``): the same layers as points above,
    # the Cbufs loading each instruction the engines share once.
    ("d2-8x8-skip-fc8-b64-es-em-cs", "--layer alexnet-fc8 --batch 64 --sparse-graph skip"),
    ("d2-8x8-skip-fc8-b4-st16-es-em-cs", "--layer alexnet-fc8 --batch 4 --sparse-graph skip "
                                         "--chunks 16"),
    ("d2-8x8-dense-fc8-b4-st16-es-em-cs", "--layer alexnet-fc8 --batch 4 --mode dense "
                                          "--chunks 16"),
    ("d2-2x2-dense-32x2048-b4-st16-es-em-cs", "--rows 2 --cols 2 --out-features 32 "
                                              "--in-features 2048 --batch 4 --mode dense "
                                              "--chunks 16"),
    # The SWITCH graph at batch 4 in 8-row blocks (the chooser's are 4): more feedback loops
    # an engine, more held loads at its Dbuf.
    ("d2-8x8-switch-fc8-b4-kb8-es-em", "--layer alexnet-fc8 --batch 4 --sparse-graph switch "
                                       "--kb 8 --gb 1"),
    # Double-buffered passes on the 8 x 8 whose contexts keep the Dbufs busy: the next pass's
    # DMA-in beside them, each slowing the other (small Dbufs: four passes of one context).
    ("d2-8x8-dense-fc8-b4-db-es-em", "--layer alexnet-fc8 --batch 4 --mode dense --chunks 1 "
                                     "--dbuf-bytes 262144"),
    ("d2-8x8-skip-fc8-b4-db-es-em", "--layer alexnet-fc8 --batch 4 --sparse-graph skip "
                                    "--dbuf-bytes 262144"),
    # alexnet-fc6 dense at batch 1 as two single-buffered passes of streamed contexts (36 an
    # item): its DMA-in beside busy contexts, against the double-buffered plan the chooser
    # takes (the paper's point).
    ("d2-8x8-dense-fc6-b1-st36-es-em", "--layer alexnet-fc6 --batch 1 --mode dense --chunks 36"),
    # Short accumulations: a few stored weights a row (the small layers of a network).
    ("d2-2x2-skip-256x64-b8-es-em", "--rows 2 --cols 2 --out-features 256 --in-features 64 "
                                    "--batch 8 --density 0.09 --sparse-graph skip --kb 4 --gb 2"),
    ("d2-2x2-skip-128x256-b8-es-em", "--rows 2 --cols 2 --out-features 128 --in-features 256 "
                                     "--batch 8 --density 0.09 --sparse-graph skip"),
    ("d2-4x4-skip-256x128-b8-es-em", "--rows 4 --cols 4 --out-features 256 --in-features 128 "
                                     "--batch 8 --density 0.09 --sparse-graph skip"),
    ("d2-8x8-skip-256x64-b8-es-em", "--out-features 256 --in-features 64 --batch 8 "
                                    "--density 0.09 --sparse-graph skip"),
)

#: The RTL records of the paper's evaluation (``fdpu paper --source rtl``'s result cache).
PAPER_RTL = os.path.join(ROOT, "docs", "data", "paper-rtl")
#: The sources whose paper records measure today's hardware (``{source digest: commit}``):
#: their points are validation points (held out); the records of older hardware are not.
PAPER_SOURCES = {"4bb66a4248b8df949ba4a5b89608dc0a4022c203e05414728ba15c28ccd6dcb3": "0454ba6"}

#: The networks' cache: one ``fdpu net --sim verilator --json`` record a line (per layer).
NET_CACHE = os.path.join(ROOT, "docs", "data", "calibration_net.jsonl")

#: ``(name, fdpu net arguments)`` of the network points: whole networks on the RTL, each layer
#: a point of its own, so that what a single layer never shows is measured (a layer chained on
#: chip after another, its MOVEs beside its configuration; the two stages of a split
#: reduction; a convolution run on its unrolled rows).  Validation only: never fitted.
NET_POINTS = (
    ("net-8x8-digits-b8-chain", "examples/digits/digits.onnx --inputs examples/digits/test_x.npy "
                                "--limit 8 --chain --no-split"),
    ("net-8x8-digits-b8-host", "examples/digits/digits.onnx --inputs examples/digits/test_x.npy "
                               "--limit 8 --no-chain --no-split"),
    ("net-8x8-digits-b8-split", "examples/digits/digits.onnx --inputs "
                                "examples/digits/test_x.npy --limit 8 --chain --split"),
    ("net-2x2-digits-b8-chain", "examples/digits/digits.onnx --inputs examples/digits/test_x.npy "
                                "--limit 8 --rows 2 --cols 2 --chain --no-split"),
    ("net-2x2-digits-b8-host", "examples/digits/digits.onnx --inputs examples/digits/test_x.npy "
                               "--limit 8 --rows 2 --cols 2 --no-chain --no-split"),
    ("net-2x2-lenet-b2", "examples/cnn/lenet_digits.onnx --inputs examples/cnn/lenet_x.npy "
                         "--limit 2 --rows 2 --cols 2 --no-split"),
    ("net-8x8-lenet-b2", "examples/cnn/lenet_digits.onnx --inputs examples/cnn/lenet_x.npy "
                         "--limit 2 --no-split"),
)

#: Network points whose first layers ran as another point's did (the same layers, options and
#: cycles): only these layers of theirs are points.
NET_LAYERS = {"net-8x8-digits-b8-split": (2, 3)}

#: The README's system for the network points, each option named (the defaults may change).
_NET_SYSTEM = (_README + " --operand-depth 2 --edge-multicast --early-start "
               "--no-double-buffer --no-config-spans")


def net_command(opts, sim="verilator"):
    """Return the full ``fdpu net`` argument list of a network point's arguments."""
    return ["net", *shlex.split(opts), "--sim", sim, *shlex.split(_NET_SYSTEM)]


#: Points not used for fitting, reported apart: one or two of each kind (array size, graph,
#: batch, depth, multi-pass), none that is the only one of its kind (the fit needs those).
HOLDOUT = frozenset(("1x1-switch-16x128-b4", "2x2-gather-64x512-b16",
                     "d2-1x1-gather-32x128-b4", "d2-2x2-dense-64x256-b1",
                     "d2-4x4-skip-256x1024-b64",
                     "d2-2x2-skip-64x1024-b16-multipass", "4x4-skip-256x1024-b4",
                     "4x4-dense-256x1024-b4", "bench-256x1024-b64-skip-0.09",
                     "bench-alexnet-fc8-b4-gather-0.25", "d2-bench-alexnet-fc8-b4-skip-0.25",
                     "d2-2x2-dense-64x512-b64-db", "d2-4x4-skip-512x2048-b16-db",
                     "d2-4x4-dense-256x1024-b64-es", "d2-4x4-dense-256x1024-b64-es-em",
                     "d2-8x8-skip-fc8-b4-es-em", "d2-4x4-dense-256x1024-b64-db-es-em",
                     # The paper's layers on the 8 x 8 with the defaults, and finer blockings:
                     # validation only.
                     "d2-8x8-dense-fc8-b4-em", "d2-8x8-skip-fc8-b64-es-em",
                     "d2-8x8-switch-fc8-b4-es-em",
                     "d2-8x8-switch-fc8-b64-es-em", "d2-8x8-dense-vgg7-b4-db-em",
                     "d2-8x8-skip-vgg7-b4-es-em", "d2-8x8-dense-vgg7-b64-es-em",
                     "d2-8x8-skip-vgg7-b64-es-em", "d2-8x8-switch-vgg7-b64-es-em",
                     "d2-8x8-dense-fc8-b4-kb4-es-em",
                     "d2-8x8-skip-fc8-b4-kb2-es-em",
                     "d2-8x8-dense-vgg7-b4-kb4-es-em", "d2-8x8-switch-fc8-b4-kb8-es-em",
                     "d2-8x8-dense-fc6-b1-st36-es-em",
                     "d2-8x8-dense-fc8-b4-st16-es-em", "d2-8x8-dense-vgg7-b4-st16-es-em",
                     "d2-2x2-dense-32x2048-b4-es-em", "d2-2x2-dense-32x2048-b4-st16-es-em",
                     "d2-4x4-skip-256x128-b8-es-em", "d2-8x8-skip-fc8-b4-kb4-em",
                     "d2-8x8-skip-fc8-b4-st16-es-em", "d2-8x8-skip-fc8-b4-st8-es-em",
                     "d2-8x8-skip-vgg7-b4-st16-es-em", "d2-2x2-skip-32x2048-b4-st8-es-em",
                     "d2-8x8-skip-fc8-b64-es-em-cs", "d2-8x8-skip-fc8-b4-st16-es-em-cs",
                     "d2-8x8-dense-fc8-b4-st16-es-em-cs", "d2-2x2-dense-32x2048-b4-st16-es-em-cs",
                     # The skip graph at operand depth 2 and 4 (compute only).
                     "bench-alexnet-fc8-b16-skip-0.25", "d2-bench-2x2-64x1024-b64-skip-0.25"))


def command(name, opts):
    """Return the full ``fdpu run`` argument list of a point's options.

    The name's tags set what the README's configuration leaves to its defaults, each named
    either way so a point reruns as it ran whatever the defaults become: ``-int1``, one INT
    issue instead of two; ``-db``, double-buffered passes (else not); ``-es``, early start;
    ``-em``, edge multicast; ``-cs``, configuration records of spans of PEs (else none of
    them)."""
    tags = name.split("-")
    depth = 2 if name.startswith("d2-") else 4
    readme = _README.replace("--int-issue 2", "--int-issue 1") if "int1" in tags else _README
    return ["run", "--sim", "verilator", *shlex.split(opts), *shlex.split(readme),
            "--operand-depth", str(depth),
            "--double-buffer" if "db" in tags else "--no-double-buffer",
            "--early-start" if "es" in tags else "--no-early-start",
            "--edge-multicast" if "em" in tags else "--no-edge-multicast",
            "--config-spans" if "cs" in tags else "--no-config-spans"]


def _points():
    return POINTS + POINTS_D2


def _density(opts):
    """Return the ``--density`` of a point's options (``None``: the layer's)."""
    words = shlex.split(opts)
    return float(words[words.index("--density") + 1]) if "--density" in words else None


def _cache():
    if not os.path.exists(CACHE):
        return {}
    with open(CACHE) as f:
        recs = [json.loads(line) for line in f if line.strip()]
    return {r["point"]: r for r in recs}


def _net_cache():
    if not os.path.exists(NET_CACHE):
        return {}
    with open(NET_CACHE) as f:
        recs = [json.loads(line) for line in f if line.strip()]
    return {r["point"]: r for r in recs}


def _run_json(name, argv):
    """Run ``fdpu <argv> --json`` for point ``name``, its output hidden; return its record, or
    ``None`` (its output and exit status printed) if it failed."""
    print(f"[{time.strftime('%H:%M:%S')}] {name}: fdpu {' '.join(argv)}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "rec.json")
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            status = app.main(argv + ["--json", path])
        if status != 0:
            print(out.getvalue())
            print(f"  {name}: exit status {status}, not recorded", flush=True)
            return None
        with open(path) as f:
            return json.load(f)


def run_networks(names=None):
    """Run the network points not yet in their cache (or only ``names``); append them."""
    have = _net_cache()
    for name, opts in NET_POINTS:
        if (names and name not in names) or name in have:
            continue
        argv = net_command(opts)
        rec = _run_json(name, argv)
        if rec is None:
            continue
        rec.update(point=name, command="fdpu " + " ".join(argv))
        with open(NET_CACHE, "a") as f:
            f.write(json.dumps(rec) + "\n")
        print("  " + ", ".join(f"{lay['name']}: {lay['compute_cycles']:,} / {lay['cycles']:,}"
                               for lay in rec["layers"]), flush=True)


def networks():
    """Return the network points of the cache as the calibration stores them
    (:func:`sw.models.perf_fit.network_point`), in :data:`NET_POINTS`' order."""
    from sw.models import perf_fit
    have = _net_cache()
    return [perf_fit.network_point(have[name], name, have[name]["command"],
                                   "fdpu " + " ".join(net_command(opts, "model")),
                                   NET_LAYERS.get(name))
            for name, opts in NET_POINTS if name in have]


def run_points(names=None):
    """Run the points not yet in the cache (or only ``names``); append their records."""
    run_networks(names)
    have = _cache()
    for name, opts in _points():
        if (names and name not in names) or name in have:
            continue
        argv = command(name, opts)
        rec = _run_json(name, argv)
        if rec is None:
            continue
        for drop in ("busy_map", "dma_descriptors", "golden_counters"):
            rec.pop(drop, None)
        rec.update(point=name, command="fdpu " + " ".join(argv), density=_density(opts),
                   seed=0)
        with open(CACHE, "a") as f:
            f.write(json.dumps(rec) + "\n")
        print(f"  compute {rec['compute_cycles']:,}, end to end {rec['cycles']:,}, "
              f"{rec['passes']} pass(es), {rec['sim_s']:.0f} s simulated", flush=True)


#: Graphs the model does not model yet (named only: ``GraphKind.auto``): their benchmark
#: records are not calibration points.
UNMODELLED = ("reuse",)


def bench_points():
    """Return the 8 x 8 benchmark records (``scripts/bench_skip.py``) as calibration points
    (the graphs of :data:`UNMODELLED` left out)."""
    out = []
    for path in BENCH:
        with open(path) as f:
            for line in f:
                rec = json.loads(line)
                if rec["graph"].split("/")[-1] in UNMODELLED:
                    continue
                graph = rec["graph"].split("/")[-1]
                array = "" if (rec["rows"], rec["cols"]) == (8, 8) else \
                    f"{rec['rows']}x{rec['cols']}-"
                name = f"bench-{array}{rec['layer']}-b{rec['N']}-{graph}-{rec['density']:g}"
                depth = rec.get("operand_depth", 4)
                if depth != 4:
                    name = f"d{depth}-{name}"
                which = "fc8" if rec["layer"] == "alexnet-fc8" else \
                    f"sweep --in-features {rec['C']} --out-features {rec['K']}"
                rec.update(point=name, command=(
                    f"python scripts/bench_skip.py {which} --rows {rec['rows']} --cols "
                    f"{rec['cols']} --batch {rec['N']} --density {rec['density']:g} --graphs "
                    f"{graph} --operand-depth {depth} (record in "
                    f"docs/data/{os.path.basename(path)})"))
                out.append(rec)
    return out


def paper_points():
    """Return the bit-exact RTL records of the paper's evaluation measured on a source of
    :data:`PAPER_SOURCES`, named ``paper-<layer>-b<batch>-<graph>`` (validation points)."""
    out = []
    for name in sorted(os.listdir(PAPER_RTL)) if os.path.isdir(PAPER_RTL) else ():
        with open(os.path.join(PAPER_RTL, name)) as f:
            rec = json.load(f)
        commit = PAPER_SOURCES.get(rec.get("source"))
        if commit is None or rec.get("sim") != "verilator" or rec.get("status") != 0 or \
                not rec["result"].get("match"):
            continue
        pt, res = rec["point"], dict(rec["result"])
        graph = pt.get("sparse-graph", pt.get("mode", "dense"))
        res.update(point=f"paper-{pt['layer']}-b{pt['batch']}-{graph}", density=None, seed=0,
                   command=f"{rec['command']} (at {commit}; record docs/data/paper-rtl/{name})")
        out.append(res)
    return sorted(out, key=lambda r: r["point"])


def print_markdown():
    """Print the calibration's error table as Markdown (docs/perf.md)."""
    from sw.models import perf_fit
    cal = perf_fit.load()
    rows, _ = perf_fit.check(cal)
    nets = perf_fit.network_rows(cal, model_cli.predict_network)
    summary = perf_fit.summarize(rows + nets)
    cfg = {p["name"]: p["config"] for p in cal["points"]}
    print("| point | array | depth | graph | K x C | batch | passes | compute model / RTL | "
          "error | end to end model / RTL | error |")
    print("|---|---|---:|---|---|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        c, p, m, e = cfg[r["name"]], r["predicted"], r["measured"], r["error"]
        graph = c["sparse_graph"] or "dense"
        if c["mode"] == "sparse" and c["density"]:
            graph += f" {c['density']:g}"
        end = "-" if e["cycles"] is None else f"{e['cycles']:+.1%}"
        meas = "-" if m["cycles"] is None else f"{m['cycles']:,}"
        print(f"| {'*' if r['holdout'] else ''}{r['name']} | {c['rows']}x{c['cols']} | "
              f"{c['operand_depth']} | {graph} | {c['K']} x {c['C']} | {c['N']} | "
              f"{c['passes']} | {p['compute']:,} / {m['compute']:,} | {e['compute']:+.1%} | "
              f"{p['cycles']:,} / {meas} | {end} |")
    print()
    layer = {f"{n['name']}:{lay['index']}": lay for n in cal.get("networks", ())
             for lay in n["layers"]}
    print("| network point: layer | K x C | what it shows | compute model / RTL | error | "
          "end to end model / RTL | error |")
    print("|---|---|---|---:|---:|---:|---:|")
    for r in nets:
        lay, p, m, e = layer[r["name"]], r["predicted"], r["measured"], r["error"]
        # Its graph and array, and what only a network shows (the effects after "network").
        eff = lay["effects"]
        shows = ", ".join(eff[:2] + eff[eff.index("network") + 1:])
        print(f"| *{r['name']} {lay['name']} | {lay['K']} x {lay['C']} | {shows} | "
              f"{p['compute']:,} / {m['compute']:,} | {e['compute']:+.1%} | "
              f"{p['cycles']:,} / {m['cycles']:,} | {e['cycles']:+.1%} |")
    print()
    print("| points | figure | n | mean | max | target |")
    print("|---|---|---:|---:|---:|---:|")
    for label, part in summary.items():
        for key in perf_fit.TARGETS:
            v = part[key]
            print(f"| {label} | {key.replace('_', ' ')} | {v['points']} | {v['mean']:.1%} | "
                  f"{v['max']:.1%} | {perf_fit.TARGETS[key]:.0%} |")
    print()
    print("| effect | points | within both targets | compute mean / max | "
          "end to end mean / max |")
    print("|---|---:|---:|---:|---:|")

    def pair(v):
        return "-" if v["mean"] is None else f"{v['mean']:.1%} / {v['max']:.1%}"
    for name, v in perf_fit.by_effect(rows + nets).items():
        print(f"| {name} | {v['points']} | {v['within']} | {pair(v['compute'])} | "
              f"{pair(v['end_to_end'])} |")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("what", choices=("run", "fit", "points", "list", "table"))
    ap.add_argument("--only", nargs="+", metavar="NAME", help="run only these points")
    args = ap.parse_args(argv)
    if args.what == "list":
        for name, opts in _points():
            print(f"{name:36s} fdpu {' '.join(command(name, opts))}")
        for name, opts in NET_POINTS:
            print(f"{name:36s} fdpu {' '.join(net_command(opts))}")
        return 0
    if args.what == "run":
        run_points(args.only)
        return 0
    if args.what == "table":
        print_markdown()
        return 0
    from rich.console import Console
    from sw.models import perf_fit
    opts = dict(_points())
    order = {name: i for i, name in enumerate(opts)}     # the points' order, however run
    recs = sorted(_cache().values(), key=lambda r: order.get(r["point"], len(order))) + \
        bench_points()
    for r in recs:
        if r["point"] in opts:
            r["command"] = "fdpu " + " ".join(command(r["point"], opts[r["point"]]))
            r.setdefault("density", _density(opts[r["point"]]))
    points = [perf_fit.point(r, r["point"], r["command"], r["point"] in HOLDOUT) for r in recs]
    # The paper's RTL points that no calibration point already ran, held out.
    for r in paper_points():
        if perf_fit.measured_point(r, dict(points=points)) is None:
            points.append(perf_fit.point(r, r["point"], r["command"], True))
    nets = networks()
    if args.what == "points":
        cal = dict(perf_fit.load(), points=points, networks=nets)
        perf_fit.save(cal)
        print(f"{len(points)} points and {len(nets)} networks written to "
              f"{perf_fit.CALIBRATION}, constants kept")
        perf_fit.print_check(*model_cli.check_all(cal), Console(width=140))
        return 0
    cal = dict(perf_fit.fit(points), networks=nets)
    perf_fit.save(cal)
    print(f"fitted on {sum(not p['holdout'] for p in points)} points, "
          f"{sum(p['holdout'] for p in points)} held out; constants written to "
          f"{perf_fit.CALIBRATION}:")
    for name, v in cal["constants"].items():
        print(f"  {name:10s} {v:10.4f}")
    perf_fit.print_check(*model_cli.check_all(cal), Console(width=140))
    return 0


if __name__ == "__main__":
    sys.exit(main())
