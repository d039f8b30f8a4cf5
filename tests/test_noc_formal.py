"""Formal checks of the NoC with Yosys ``sat`` (harnesses in :mod:`tb.noc.formal`).

* The route function is XY: for every router coordinate of 1x1, 2x3, 3x4, 1x5 and 8x8 arrays
  and every header, the output port equals ``ArrayParams.route(src, dst)[0]`` (one proof per
  shape over all coordinate and header values, the coordinate being a router input; illegal
  ones are assumed away).  A mutant (the rule of a neighbouring router) must fail.
* Occupancy: per router input, flits in minus flits out stays in ``0 .. depth`` (no overflow,
  no duplicate) and stalled outputs hold their flit; bounded proofs from reset.
* Dbuf credits: requests accepted minus replies delivered stays in ``0 .. reply_depth``.

Bounded depths are small so that CI stays fast; ``-m slow`` runs deeper bounds.  Temporal
induction was tried on the Dbuf and does not converge (the memory and FIFO pointers admit
unreachable states), so the sequential properties are bounded.
"""

import pytest

from sw.spec.arch import ArrayParams
from tb.noc.formal import (DbufCreditHarness, RouteHarness,
                           RouterOccupancyHarness, prove)

pytestmark = pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")


@pytest.mark.parametrize("rows, cols", [(1, 1), (2, 3), (3, 4), (1, 5), (8, 8)])
def test_route_is_xy(rows, cols):
    """One proof per array shape over every router coordinate and every header."""
    assert "SUCCESS" in prove(RouteHarness(ArrayParams(rows=rows, cols=cols, slots=64,
                                                       operand_depth=4, int_issue=1)))


def test_route_mutant_is_caught():
    with pytest.raises(AssertionError, match="formal check failed"):
        prove(RouteHarness(ArrayParams(rows=2, cols=3, slots=64, operand_depth=4,
                                       int_issue=1), shift=1))


def test_dbuf_credits_bounded():
    assert "SUCCESS" in prove(DbufCreditHarness(reply_depth=2), seq=6)


def test_router_occupancy_bounded():
    harness = RouterOccupancyHarness(ArrayParams(rows=2, cols=2, slots=64, operand_depth=4,
                                                 int_issue=1), depth=2)
    assert "SUCCESS" in prove(harness, seq=3)


def test_router_occupancy_mutant_is_caught():
    harness = RouterOccupancyHarness(ArrayParams(rows=2, cols=2, slots=64, operand_depth=4,
                                                 int_issue=1), depth=2, limit=1)
    with pytest.raises(AssertionError, match="formal check failed"):
        prove(harness, seq=3)


@pytest.mark.slow
@pytest.mark.parametrize("seq", [5, 8])
def test_router_occupancy_deeper(seq):
    harness = RouterOccupancyHarness(ArrayParams(rows=3, cols=3, slots=64, operand_depth=4,
                                                 int_issue=1), depth=2)
    assert "SUCCESS" in prove(harness, seq=seq, timeout_s=3600)


@pytest.mark.slow
def test_dbuf_credits_deeper():
    assert "SUCCESS" in prove(DbufCreditHarness(reply_depth=3), seq=12, timeout_s=3600)
