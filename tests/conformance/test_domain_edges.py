"""No silent wrong results: random programs with inputs at and past their domains' edges, on
every stand-in, each step either within its contract or a typed refusal.

Programs come from the random-program generator (``test_random_programs._npu_programs``: what
each target admits, one in five with steps it does not); the inputs do not respect its
intervals: every element is drawn from the edges of the contracts' domains and past them (0 and
-0, the smallest normal and a subnormal, 87 to 89 and 100 for exp, the F32 and F16 largest
values and one past, the infinities and NaN, -1 for sqrt and log) or from the ordinary range,
and a gather's indices at and one past each end of the axis.

Each case runs two steps on ``Engine(device, verify="always")``. A step passes when:

- it returns, its results are within the plan's contract against the oracle (the verified
  step's own check), and every equation the device computed read operands inside its domain
  (checked here, independently, on the oracle's values of every equation: a result computed
  outside a domain is promised nothing, so it must never come back); or
- it raises a typed refusal: ``DomainError`` (a host guard), ``DomainFlagged`` (a device guard),
  ``NarrowingRangeError`` (Intel's FP16 range), the oracle's own ``EvaluationError`` on the
  cpu (a gather index outside its axis). A domain refusal must be real: the equation it names
  reads a value the oracle puts outside its domain (``conformance.outside``, which the
  random-program suite shares). A ``ContractViolation`` fails the test: no stand-in may breach
  a contract inside its domain.

The same case through ``poot run``'s code (``run_program``) must agree: the same refusal at
the same step, or the same results bit for bit with every check ok. One line per device reports
the steps run and the refusals by guard.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from poot_engine import Engine
from poot_engine.device import Device
from poot_engine.run import run_program
from poot_ir import (
    DomainError,
    DomainFlagged,
    DType,
    EvaluationError,
    GatherParams,
    NarrowingRangeError,
    PootError,
    Prim,
    Program,
    Storage,
    Var,
)
from poot_npu.registry import DEVICES, DeviceInfo, DeviceKind
from poot_planner import TARGETS, plan
from poot_planner.guards import Site

from conformance.devices import Lent, Opened, opened
from conformance.outside import DEVICE_FLAGS, outside, unjustified
from conformance.test_random_programs import _npu_programs

STAND_INS = [d for d in DEVICES if d.kind is not DeviceKind.HARDWARE]
EXAMPLES = {"cpu": 60, "vpu-cpu": 50, "xdna-host": 50, "host": 50}
REFUSALS = (DomainError, DomainFlagged, NarrowingRangeError, EvaluationError)


def _edges() -> list[float]:
    """Every domain's edge values and the value just past it (``poot_ir.edges``, which
    ``poot acceptance`` shares), for F32 and F16, over the domains the targets' contracts use;
    and what lies further past: exp's -88, 89 and 100, F16's 65520 (rounds to infinity), an F32
    subnormal."""
    values: list[float] = [-88.0, 89.0, 100.0, 65520.0, 1e-40]
    for t in TARGETS.values():
        for cap in t.capabilities:
            for dtype in (DType.F32, DType.F16):
                e = cap.contract.domain.edges(dtype)
                values += [*e.every, *e.past]
    by_bits = {np.float64(v).tobytes(): v for v in values}  # keeps -0.0 beside 0.0
    return sorted(by_bits.values(), key=lambda v: (np.isnan(v), v))


_EDGES = _edges()


def _index_sizes(program: Program) -> dict[str, int]:
    """Each gather index argument and the size of the axis it indexes."""
    args = {a.var.id: a.name for a in program.args}
    sizes = {}
    for e in program.eqns:
        if e.prim is Prim.GATHER and isinstance(e.params, GatherParams):
            idx = e.inputs[1]
            if isinstance(idx, Var) and idx.id in args:
                sizes[args[idx.id]] = e.inputs[0].type.shape[e.params.axis]
    return sizes


def _edge_array(rng: np.random.Generator, dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
    """Ordinary values with some elements (a drawn share, all of them at most) at the edges."""
    x = rng.uniform(-4.0, 4.0, shape)
    share = rng.choice([0.0, 0.05, 0.3, 1.0])
    at = rng.random(shape) < share
    x = np.where(at, rng.choice(np.array(_EDGES), shape), x)
    with np.errstate(over="ignore"):
        return x.astype(dtype)


@st.composite
def _cases(draw: st.DrawFn, target: str) -> tuple[Program, list[dict[str, np.ndarray]]]:
    program, _ = draw(_npu_programs(target))
    sizes = _index_sizes(program)
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    steps = []
    for _ in range(2):
        feed: dict[str, np.ndarray] = {}
        for a in program.args:
            t = a.var.type
            if a.name in sizes:
                n = sizes[a.name]
                past = rng.random(t.shape) < 0.1
                edge = rng.choice(np.array([-n - 1, n]), t.shape)
                feed[a.name] = np.where(past, edge, rng.integers(-n, n, t.shape)).astype(np.int32)
            else:
                feed[a.name] = _edge_array(rng, t.dtype.numpy, t.shape)
        steps.append(feed)
    return program, steps


def _run_engine(
    device: Device, program: Program, steps: list[dict[str, np.ndarray]], cache: Path
) -> tuple[list[dict[str, np.ndarray]], PootError | None, int]:
    """Run ``steps`` on a verifying engine: the results of each step that returned, the typed
    refusal that ended the run (if one did), and the number of steps verified."""
    kinds = {a.name: a.storage for a in program.args}
    first = steps[0]
    weights = {n: v for n, v in first.items() if kinds[n] is Storage.WEIGHT}
    states = {n: v for n, v in first.items() if kinds[n] is Storage.STATE}
    outs: list[dict[str, np.ndarray]] = []
    engine = Engine(Lent(device), cache_dir=cache, verify="always")
    try:
        try:
            handle = engine.load_weights(weights)
            entry = engine.add_entry(program, handle, initial_state=states)
            for s in steps:
                slots = {n: v for n, v in s.items() if kinds[n] is Storage.SLOT}
                outs.append(engine.step(entry, slots))
        except REFUSALS as refusal:
            return outs, refusal, engine.stats().verified_steps
        return outs, None, engine.stats().verified_steps
    finally:
        engine.close()


@pytest.fixture(scope="module")
def tally(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Opened]:
    yield from opened(tmp_path_factory, "domain-edges")


def _refusal_kind(err: PootError) -> str:
    match err:
        case DomainError():
            return f"host guard ({err.primitive})"
        case DomainFlagged():
            return "device guard (flag word)"
        case NarrowingRangeError():
            return f"FP16 range ({type(err).__name__})"
        case _:
            return f"oracle ({type(err).__name__})"


def _check(
    info: DeviceInfo, t: Opened, program: Program, steps: list[dict[str, np.ndarray]]
) -> None:
    counts = t.counts[info.name]
    p = plan(program, info.target)
    if not p.admitted:
        counts["plans refused"] += 1
        return
    device = t.get(info)
    outs, refusal, verified = _run_engine(device, program, steps, t.cache_dir)
    counts["steps returned"] += len(outs)
    counts["steps verified"] += verified
    feeds = []
    kinds = {a.name: a.storage for a in program.args}
    state = {n: v for n, v in steps[0].items() if kinds[n] is Storage.STATE}
    weights = {n: v for n, v in steps[0].items() if kinds[n] is Storage.WEIGHT}
    for k, got in enumerate(outs):
        slots = {n: v for n, v in steps[k].items() if kinds[n] is Storage.SLOT}
        feed = {**weights, **state, **slots}
        feeds.append(feed)
        found = outside(p, feed)
        if info.target not in DEVICE_FLAGS and any(o.site is Site.DEVICE for o in found):
            counts["returned outside a device-guarded domain (no device flag here)"] += 1
            found = [o for o in found if o.site is not Site.DEVICE]
        bad = [o.what for o in found]
        assert not bad, f"step {k} returned from outside a domain: {bad}\n{program}"
        state = {n: got[n] for n in state}
    if refusal is not None:
        if isinstance(refusal, DomainError | DomainFlagged):
            # the refusing step's feed: its slots, the state the returned steps carried
            refused = steps[len(outs)]
            slots = {n: v for n, v in refused.items() if kinds[n] is Storage.SLOT}
            why = unjustified(refusal, p, [{**weights, **state, **slots}])
            assert why is None, f"step {len(outs)}: {why}\n{program}"
        counts["refused: " + _refusal_kind(refusal)] += 1
    # poot run's code on the same case: the same refusal at the same step, or the same results
    try:
        report = run_program(
            program, Lent(device), info.name, steps=len(steps), inputs=steps, cache_dir=t.cache_dir
        )
    except REFUSALS as err:
        assert refusal is not None and type(err) is type(refusal), (
            f"poot run: {err!r} vs {refusal!r}"
        )
        return
    if not report.plan.admitted:
        # poot run plans with the weights it is given (``plan(constants=...)``): a weight the
        # engine refuses as it binds it is refused when planning, naming that weight
        named = {r.fact("constant") for r in report.plan.refusals}
        assert refusal is not None and not outs, f"planned refused, the engine ran: {named}"
        assert getattr(refusal, "argument", None) in named, (refusal, named)
        return
    assert refusal is None, f"poot run returned where the engine refused: {refusal!r}"
    assert all(s.ok for s in report.steps), [str(s.worst) for s in report.steps]
    for mine, theirs in zip(outs, report.outputs, strict=True):
        for name, v in mine.items():
            assert v.tobytes() == theirs[name].tobytes(), name


@pytest.mark.parametrize("info", STAND_INS, ids=lambda d: d.name)
def test_edges_are_within_contract_or_refused(
    info: DeviceInfo, tally: Opened, capsys: pytest.CaptureFixture[str]
) -> None:
    @settings(
        max_examples=EXAMPLES[info.name],
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(_cases(info.target))
    def check(case: tuple[Program, list[dict[str, np.ndarray]]]) -> None:
        _check(info, tally, *case)

    check()
    counts = tally.counts[info.name]
    with capsys.disabled():
        print(
            f"\ndomain edges on {info.name}: "
            + ", ".join(f"{k} {n}" for k, n in sorted(counts.items()))
        )
    assert counts["steps returned"] > 0
