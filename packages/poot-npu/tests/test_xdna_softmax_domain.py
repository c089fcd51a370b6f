"""A softmax's exponent on the XDNA2 host stand-in, at the lower edge of exp's domain.

This is the device span that refused all-MiniLM-L6-v2 (the models suite): layer 0's
``exp(scores - broadcast(max))`` then ``reduce_sum``, the scores and their row maximum passed
in by the host. The specification gives exp on XDNA2 the domain [-87, 88]. The host prelude's
mask (``poot_planner.fp16.prelude.MASK`` = -2^15 in place of the exported ``-inf``) puts every
padded key's exponent near -32768, far outside it. The flag word must count exactly the
exponents outside the domain, no more and no fewer: -87 itself runs, the next float below it
is counted.

The expected counts come from numpy on the inputs (the differences are exact in float64),
not from the kernels. A run inside the domain is verified against the oracle under the plan's
contract (``Engine(verify="always")``).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from poot_engine import Engine
from poot_ir import Builder, DomainFlagged, DType, Program
from poot_npu.xdna_host import XdnaHostDevice
from poot_planner import plan
from poot_planner.fp16.prelude import MASK
from poot_planner.guards import Site

F32 = DType.F32
SHAPE = (4, 32)
LO = -87.0  # exp's XDNA2 domain is [-87, 88] (the specification; targets/xdna2.py)


def _softmax_span() -> Program:
    b = Builder("softmax_exponent")
    x = b.slot("scores", F32, SHAPE)
    m = b.slot("row_max", F32, SHAPE)  # the row maximum, broadcast, computed on the host
    e = b.exp(b.sub(x, m))
    b.output("e", e)
    b.output("s", b.reduce_sum(e, 1))
    return b.build()


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[Engine]:
    with Engine(XdnaHostDevice(tmp_path / "kernels"), tmp_path / "blobs", verify="always") as e:
        yield e


def _inputs() -> tuple[np.ndarray, np.ndarray]:
    """Scores in [-87, 0] below row maxima whose differences are exact in F32 (multiples of
    1/64 under 2^10), with the edge -87 itself in row 0, whose maximum is 0."""
    rng = np.random.default_rng(0)
    top = np.array([0.0, 2.5, -1.25, 10.0], np.float32)[:, None]
    t = np.round(rng.uniform(-86.0, 0.0, SHAPE) * 64) / 64
    t[:, 0] = 0.0  # each row's maximum is its own entry
    t[0, 1] = LO
    scores = (top + t).astype(np.float32)
    return scores, np.broadcast_to(top, SHAPE).astype(np.float32)


def _outside(scores: np.ndarray, row_max: np.ndarray) -> int:
    d = scores.astype(np.float64) - row_max.astype(np.float64)
    return int(np.count_nonzero((d < LO) | (d > 88.0)))


def test_the_exponent_is_guarded_on_the_device() -> None:
    p = plan(_softmax_span(), "xdna2").check()
    sites = {(g.eqn, g.operand): g.site for g in p.guards}
    assert sites[(1, 0)] is Site.DEVICE  # exp's operand is computed inside the region
    assert len(p.tiles) == 3  # no fusion: each exponent is guarded once, so the count is exact


def test_inside_the_domain_runs_within_the_contract(engine: Engine) -> None:
    scores, row_max = _inputs()
    assert _outside(scores, row_max) == 0 and float(scores[0, 1] - row_max[0, 1]) == LO
    entry = engine.add_entry(_softmax_span())
    got = engine.step(entry, {"scores": scores, "row_max": row_max})  # verified: the oracle
    assert got["e"][0, 1] > 0.0 and np.all(got["s"] >= 1.0)  # exp(0) is in every row's sum
    stats = engine.stats()
    assert stats.verified_steps == 1 and stats.worst_error_ratio <= 1.0


@pytest.mark.parametrize("case", ["one_past_the_edge", "padded_keys"])
def test_outside_the_domain_is_counted_exactly(engine: Engine, case: str) -> None:
    scores, row_max = _inputs()
    if case == "one_past_the_edge":
        scores[0, 1] = np.nextafter(np.float32(LO), np.float32(-np.inf))
    else:  # the prelude's mask on the last keys of rows 1..3, as a padded batch has it
        for row, length in ((1, 12), (2, 9), (3, 4)):
            scores[row, length:] += np.float32(MASK)
        scores[2, 3] = row_max[2, 3] - np.float32(90.25)  # an unmasked score beyond the edge too
    want = _outside(scores, row_max)
    assert want == (1 if case == "one_past_the_edge" else 20 + 23 + 28 + 1)
    entry = engine.add_entry(_softmax_span())
    with pytest.raises(DomainFlagged) as err:
        engine.step(entry, {"scores": scores, "row_max": row_max})
    assert err.value.count == want and 1 in err.value.eqns
