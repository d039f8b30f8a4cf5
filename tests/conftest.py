"""Fixtures the test modules share.

* ``seed``: a test's random seed: ``$FDPU_SEED`` when set, else the fixed default
  :data:`DEFAULT_SEED`; printed, so a failing run names the seed that replays it.
* ``small_pe``: the small PE the unit and block tests plan on, any size:
  ``small_pe(rows, cols, **more)`` is an :class:`~sw.spec.arch.ArrayParams` with 64 slots,
  operand depth 4 and one INT issue (``more`` overrides, e.g. ``dbuf_bytes``), the
  configuration a test names explicitly since ``ArrayParams()`` is the README's (128 slots,
  depth 2, two INT issues).

The simulator list is :data:`sw.spec.system.SIMULATORS`, read by every test that runs both.
"""

import os

import pytest

from sw.spec.arch import ArrayParams

#: The seed of a test that draws random data when ``$FDPU_SEED`` is not set.
DEFAULT_SEED = 20261130

#: The small PE of the unit and block tests.
SMALL_PE = dict(slots=64, operand_depth=4, int_issue=1)


@pytest.fixture
def seed():
    """Return the test's random seed (printed: ``FDPU_SEED`` replays it)."""
    value = int(os.environ.get("FDPU_SEED", DEFAULT_SEED))
    print(f"seed {value} (set FDPU_SEED to change)")
    return value


@pytest.fixture
def small_pe():
    """Return the factory of the small PE's :class:`ArrayParams` (module doc)."""
    def make(rows=1, cols=1, **more):
        return ArrayParams(rows=rows, cols=cols, **{**SMALL_PE, **more})
    return make
