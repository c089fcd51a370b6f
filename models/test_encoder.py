"""The legalization issue's done-when on the real sentence encoder (``minilm``, all-MiniLM-L6-v2
as exported by ``tools/export_minilm.py``; skipped, naming the command, until it is exported):
imported as shipped, partitioned for intel-npu4 after legalization, every equation that reads a
float runs on the device, in at most two device spans (one, here), and the partitioned run on
the Intel stand-in (vpu-cpu) is within NarrowStorage of the oracle on real sentences padded so
the attention mask has zeros: the whole result, and each sequence's real tokens on their own
(its padding rows are figured).

The equations left on the host are the integer side alone (``poot_planner.fp16.prelude``): the
exported mask is ``attention_mask != 0`` gathered and and-ed as booleans (an FP16 device makes
no float of a boolean or an integer), and its ``select(mask, 0, -inf)`` per layer, which reads
only that boolean mask and makes the additive mask: the only host equations with a float result.

On vpu-cpu that mask becomes -2^15 (``poot_planner.fp16.prelude``): the rewrite needs the scores
within ``SCORE_BOUND``, and minilm's export scales q and k by 32^-1/4 each before their matmul,
so its scores are a matmul's output, not proven bounded; the device span's graph checks them at
run time instead (``Plan.score_bound``, ``GuardKind.SCORE``: a score beyond the bound or NaN is
``NarrowingRangeIntermediate``). Partitioned for a device that does not check them, the mask
stays ``-inf`` (refused at the device's input check, typed).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from poot_engine import Engine
from poot_ir import Eqn, Prim, Program, Var, evaluate
from poot_ir.numerics import Normwise, compare
from poot_npu.registry import make_device
from poot_onnx import Imported, import_model
from poot_planner import Span, partition, plan
from poot_planner.fp16.prelude import MASK
from poot_planner.targets import get_target

from models.catalog import MODELS, available

MINILM = next(m for m in MODELS if m.name == "minilm")
pytestmark = [
    pytest.mark.skipif(available() is not None, reason=str(available())),
    pytest.mark.skipif(MINILM.missing() is not None, reason=str(MINILM.missing())),
]
TARGET = "intel-npu4"
_CACHE: dict[str, object] = {}


def _imported() -> Imported:
    if "imp" not in _CACHE:
        _CACHE["imp"] = import_model(MINILM.file(), shapes=MINILM.shapes)
    return _CACHE["imp"]  # type: ignore[return-value]


def _spans() -> tuple[Span, ...]:
    if "spans" not in _CACHE:
        # as the engine partitions for vpu-cpu: a device that checks the scores' bound
        _CACHE["spans"] = partition(_imported().program, TARGET, score_guard=True)
    return _CACHE["spans"]  # type: ignore[return-value]


def _reads_or_makes_a_float(program: Program, i: int) -> bool:
    e = program.eqns[i]
    ins = [a for a in e.inputs if isinstance(a, Var)]
    return any(v.dtype.is_float for v in (*ins, *e.outputs))


def test_the_inputs_are_padded() -> None:
    mask = MINILM.inputs()["attention_mask"]
    assert set(np.unique(mask)) == {0, 1}
    assert mask.all(axis=1).any() and (~mask.astype(bool)).any(axis=1).sum() >= 2


def test_every_float_equation_is_on_the_device_in_at_most_two_spans() -> None:
    program = _imported().program
    spans = _spans()
    on_device = [s for s in spans if s.device]
    floats = {i for i in range(len(program.eqns)) if _reads_or_makes_a_float(program, i)}
    holding = [s for s in on_device if floats & set(s.eqns)]
    assert len(holding) <= 2, [(s.first, s.last) for s in holding]
    host = [i for s in spans if not s.device for i in s.eqns]
    # what stays on the host reads integers and booleans alone; the selects among it make
    # the additive mask from the boolean mask
    for i in host:
        e = program.eqns[i]
        assert not any(a.dtype.is_float for a in e.inputs if isinstance(a, Var)), (i, e.prim)
    host_float = {program.eqns[i].prim.value for i in host if program.eqns[i].out.dtype.is_float}
    assert host_float <= {"select"}
    assert len(host) < 0.03 * len(program.eqns)
    # before legalization the same program is cut into many graphs
    before = partition(program, TARGET, legalization=False)
    assert sum(s.device for s in before) > 2


def test_the_mask_is_rewritten_where_the_device_checks_its_scores() -> None:
    program = _imported().program
    (host,) = (s for s in _spans() if not s.device)
    lits = {a.as_float() for e in host.program.eqns for a in e.inputs if not isinstance(a, Var)}
    assert MASK in lits  # and -inf for a fully masked row
    made = {v.id: e for e in program.eqns for v in e.outputs}
    selects = [program.eqns[i] for i in host.eqns if program.eqns[i].prim is Prim.SELECT]
    masks = [e for e in selects if e.out.dtype.is_float]
    assert masks
    scores: set[int] = set()
    for m in masks:  # each is added to a matmul of scaled q and k (through movement)
        (add,) = (e for e in program.eqns if e.prim is Prim.ADD and _reads_moved(made, e, m))
        (s,) = (a for a in add.inputs if isinstance(a, Var) and not _moved_from(made, a, m))
        s = _unmoved(made, s)
        assert made[s.id].prim is Prim.MATMUL
        for a in made[s.id].inputs:
            assert isinstance(a, Var) and made[_unmoved(made, a).id].prim is Prim.MUL
        scores.add(s.id)
    # no literal bounds a contraction: unproven, so the device span checks exactly those
    checked = {i for s in _spans() if s.plan is not None for i in s.plan.score_bound}
    assert checked == scores and len(scores) == len(masks)
    # a device that does not check them (CpuDevice, VpuDevice without its guard) keeps -inf
    plain = partition(program, TARGET)
    (host,) = (s for s in plain if not s.device)
    lits = {a.as_float() for e in host.program.eqns for a in e.inputs if not isinstance(a, Var)}
    assert MASK not in lits and float("-inf") in lits
    assert all(s.plan is None or not s.plan.score_bound for s in plain)


_MOVES = {Prim.RESHAPE, Prim.TRANSPOSE, Prim.BROADCAST_IN_DIM}


def _unmoved(made: dict[int, Eqn], v: Var) -> Var:
    """``v`` before the data movement that made it."""
    while v.id in made and made[v.id].prim in _MOVES and isinstance(made[v.id].inputs[0], Var):
        v = made[v.id].inputs[0]  # type: ignore[assignment]
    return v


def _moved_from(made: dict[int, Eqn], v: Var, m: Eqn) -> bool:
    return made.get(_unmoved(made, v).id) is m


def _reads_moved(made: dict[int, Eqn], e: Eqn, m: Eqn) -> bool:
    return any(isinstance(a, Var) and _moved_from(made, a, m) for a in e.inputs)


def test_the_partitioned_run_on_vpu_cpu_is_within_narrow_storage(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    imp = _imported()
    inputs = MINILM.inputs()
    slots = {imp.inputs[k]: v for k, v in inputs.items()}
    want = imp.results(evaluate(imp.program, {**imp.weights, **slots}))["last_hidden_state"]
    t = get_target(TARGET)
    assert t.narrowing is not None
    with Engine(make_device("vpu-cpu"), cache_dir=tmp_path) as engine:
        entry = engine.add_partitioned(plan(imp.program, TARGET), engine.load_weights(imp.weights))
        got = imp.results(engine.step(entry, slots))["last_hidden_state"]
    assert got.dtype == np.float32 and np.isfinite(got).all()
    bound = Normwise(t.narrowing.normwise, t.narrowing.floor)
    mask = inputs["attention_mask"].astype(bool)
    whole = compare(got, want, bound)
    figures = [f"whole {_rel(got, want):.2e}"]
    for b in range(mask.shape[0]):
        # each sequence's real tokens within the contract on their own, the padding with
        # them; a padding row (a [PAD] query over the few real keys, its output discarded by
        # any pooling) is figured, not held to the bound alone: the contract is normwise
        c = compare(got[b][mask[b]], want[b][mask[b]], bound)
        assert c.ok, (b, int(mask[b].sum()), c)
        pad = (
            f", padding rows {_rel(got[b][~mask[b]], want[b][~mask[b]]):.2e}"
            if (~mask[b]).any()
            else ""
        )
        figures.append(
            f"seq {b}: {int(mask[b].sum())} tokens {_rel(got[b][mask[b]], want[b][mask[b]]):.2e}{pad}"
        )
    with capsys.disabled():
        print(
            "\nminilm on vpu-cpu, normwise error against the oracle (bound 2^-8): "
            + "; ".join(figures)
        )
    assert whole.ok, whole


def _rel(got: np.ndarray, want: np.ndarray) -> float:
    g, w = got.astype(np.float64), want.astype(np.float64)
    return float(np.linalg.norm(g - w) / np.linalg.norm(w))
