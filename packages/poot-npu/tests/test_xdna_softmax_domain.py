"""A softmax's exponent on the XDNA2 host stand-in: a masked softmax (padded attention) runs.

This is the device span that refused all-MiniLM-L6-v2 (the models suite): layer 0's
``exp(scores - broadcast(max))`` then ``reduce_sum``, the scores and their row maximum passed
in by the host. exp's XDNA2 domain was the specification's [-87, 88], so every padded key's
exponent (the host prelude's mask ``poot_planner.fp16.prelude.MASK`` = -2^15, or an exported
``finfo(float32).min``) was counted in the flag word and the batch refused. The kernel's exp
flushes a result below FLT_MIN to +0, inside its absolute bound, so the domain is now
[-inf, 88]: masked keys run and weigh exactly 0. What is still refused, typed: an exponent
above 88 (counted exactly in the flag word, no more and no fewer), and a ``-inf`` score (the
subtraction's domain is finite operands: refused on the host before anything runs).

The expected counts come from numpy on the inputs (the differences are exact in float64),
not from the kernels. A run is verified against the oracle under the plan's contract
(``Engine(verify="always")``, the running error bound).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from poot_engine import Engine
from poot_ir import Builder, DomainError, DomainFlagged, DType, Program
from poot_npu.xdna_host import XdnaHostDevice
from poot_planner import plan
from poot_planner.fp16.prelude import MASK
from poot_planner.guards import Site

F32 = DType.F32
SHAPE = (4, 32)
LO = -87.0  # the specification's lower edge of exp's XDNA2 domain, now [-inf, 88]
HI = 88.0
BIG = float(np.finfo(np.float32).max)


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
    return int(np.count_nonzero(d > HI))


def test_the_exponent_is_guarded_on_the_device() -> None:
    p = plan(_softmax_span(), "xdna2").check()
    sites = {(g.eqn, g.operand): g.site for g in p.guards}
    assert sites[(1, 0)] is Site.DEVICE  # exp's operand is computed inside the region
    assert len(p.tiles) == 3  # no fusion: each exponent is guarded once, so the count is exact


def test_inside_the_domain_runs_within_the_contract(engine: Engine) -> None:
    scores, row_max = _inputs()
    scores[0, 2] = np.nextafter(np.float32(LO), np.float32(-np.inf))  # past the old edge
    assert _outside(scores, row_max) == 0 and float(scores[0, 1] - row_max[0, 1]) == LO
    entry = engine.add_entry(_softmax_span())
    got = engine.step(entry, {"scores": scores, "row_max": row_max})  # verified: the oracle
    assert got["e"][0, 1] > 0.0 and np.all(got["s"] >= 1.0)  # exp(0) is in every row's sum
    stats = engine.stats()
    assert stats.verified_steps == 1 and stats.worst_error_ratio <= 1.0


@pytest.mark.parametrize("mask", [MASK, -BIG], ids=["prelude_mask", "finfo_min"])
def test_padded_keys_run_and_weigh_zero(engine: Engine, mask: float) -> None:
    # the mask on the last keys of rows 1..3, as a padded batch has it, added on the host (a
    # -FLT_MAX mask plus a score is -FLT_MAX: its difference with the row maximum rounds to
    # -FLT_MAX, no overflow, so the difference's result guard lets it through)
    scores, row_max = _inputs()
    masked = np.zeros(SHAPE, bool)
    for row, length in ((1, 12), (2, 9), (3, 4)):
        masked[row, length:] = True
    scores = np.where(masked, scores + np.float32(mask), scores).astype(np.float32)
    scores[2, 3] = row_max[2, 3] - np.float32(90.25)  # an unmasked score far below, too
    assert _outside(scores, row_max) == 0
    entry = engine.add_entry(_softmax_span())
    got = engine.step(entry, {"scores": scores, "row_max": row_max})  # verified
    assert np.all(got["e"][masked] == 0.0) and got["e"][2, 3] == 0.0  # flushed: exactly 0
    want = np.exp(scores.astype(np.float64) - row_max.astype(np.float64)).sum(axis=1)
    assert np.allclose(got["s"], want, rtol=1e-4)
    assert engine.stats().worst_error_ratio <= 1.0


def test_an_exponent_past_88_is_counted_exactly(engine: Engine) -> None:
    scores, row_max = _inputs()
    scores[1, 5] = row_max[1, 5] + np.float32(HI)  # the edge itself runs
    scores[3, 7] = row_max[3, 7] + np.nextafter(np.float32(HI), np.float32(np.inf))
    scores[2, 2] = row_max[2, 2] + np.float32(100.0)
    assert _outside(scores, row_max) == 2
    entry = engine.add_entry(_softmax_span())
    with pytest.raises(DomainFlagged) as err:
        engine.step(entry, {"scores": scores, "row_max": row_max})
    assert err.value.count == 2 and 1 in err.value.eqns


def test_an_infinite_score_is_refused_before_the_run(engine: Engine) -> None:
    # -inf - max: the subtraction's operands must be finite (the specification), checked on
    # the host since the scores are an argument
    scores, row_max = _inputs()
    scores[1, 20] = -np.inf
    entry = engine.add_entry(_softmax_span())
    with pytest.raises(DomainError) as err:
        engine.step(entry, {"scores": scores, "row_max": row_max})
    assert (err.value.argument, err.value.primitive) == ("scores", "sub")
