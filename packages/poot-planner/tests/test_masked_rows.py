"""A softmax over scores masked by ``finfo(float32).min`` (what torch folds a causal or padding
mask to): the running error analysis keeps a finite bound through it (gpt2_tiny's attention,
``tests/test_models_xdna2.py``).

Three rules make it so: a row maximum moves by its competitors' errors only (a masked score
far below the maximum moves nothing, whatever its error), a rounding at the largest finite
magnitude whose exact value is known to sit below the overflow threshold parts from its
neighbour by the ulp below (not an infinite one), and the softmax's range
(``poot_planner.row_ranges``, tested there).
"""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st
from poot_ir import Builder, DType, Eqn
from poot_planner.error_bounds.steps import _max_carry, _rerounded

F32 = DType.F32
LOWEST = float(np.finfo(np.float32).min)


@given(
    st.lists(st.floats(-1e4, 1e4, width=32), min_size=1, max_size=16),
    st.integers(0, 2**32 - 1),
)
def test_a_row_maximum_moves_by_its_competitors_errors(row: list[float], seed: int) -> None:
    """Any device row within the errors has its maximum within the carry (numpy float64)."""
    rng = np.random.default_rng(seed)
    x = np.asarray(row, np.float64)
    masked = rng.random(x.size) < 0.3
    x = np.where(masked, LOWEST, x)
    err = np.where(masked, 1e32, rng.uniform(0, 1, x.size) * 10.0 ** rng.integers(-6, 2, x.size))
    m = np.max(x)
    carry = float(_max_carry(x[None], err[None], np.asarray([m]), (1,))[0])
    for _ in range(20):
        moved = np.clip(x + rng.choice([-1.0, 0.0, 1.0], x.size) * err, LOWEST, -LOWEST)
        assert abs(float(np.max(moved)) - m) <= carry
    if not masked.all():  # the masked scores' 1e32 moves nothing
        assert carry <= np.max(err[~masked]) * (1 + 1e-12) + 1e-9 * abs(m)


def test_a_rounding_at_the_largest_magnitude_parts_by_the_ulp_below() -> None:
    """``score + finfo.min`` rounds to ``-FLT_MAX``, whose ulp above is infinite; the exact
    value is within half an ulp of the overflow threshold only when the score is (about)
    2^103 below, so a small carry parts the neighbouring rounding by the ulp below (2^104),
    and a carry past the threshold by infinity."""
    scores = np.asarray([0.5, -3.0, 7.0], np.float32)
    mask = np.full(3, LOWEST, np.float32)
    y = (scores + mask).astype(np.float32)
    assert np.all(y == np.float32(LOWEST))
    eqn = _add_eqn()
    small = _rerounded(eqn, y, np.full(3, 0.01), [scores, mask])
    assert np.all(small == 2.0**104)
    huge = _rerounded(eqn, y, np.full(3, 2.0**104), [scores, mask])
    assert np.all(np.isinf(huge))
    assert np.all(np.isinf(_rerounded(eqn, y, np.full(3, 0.01))))  # no operands: unknown


def _add_eqn() -> Eqn:
    b = Builder("add")
    x, m = b.slot("x", F32, (3,)), b.slot("m", F32, (3,))
    b.output("y", b.add(x, m))
    return b.build().eqns[0]
