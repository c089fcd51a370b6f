"""xdna2's F32 attention-mask rewrite (``poot_planner.fp16.prelude``, issue #28), on the Builder
encoder with MiniLM's mask (``encoder_model``, ``mask_style="bool"``: ``select(bool(mask), 0,
-inf)``, a host-prelude select): for a device whose kernels check every score the mask is
added to against 2^62 (``checks_score_bound``: xdna-host and the NPU), the mask becomes
``-2^64``, so a padded batch runs within its contract, the padded keys' probabilities exactly
0; a score past the bound is refused, typed (``DomainFlagged``). Before it, every padded step
was refused (``DomainError``: ``-inf`` outside the device add's domain)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from encoder_model import encoder_inputs, encoder_layer
from poot_codegen.xdna.guards import kernel_guards
from poot_engine import Engine
from poot_ir import DomainFlagged, Prim, Program, Storage, Var, evaluate, format_program
from poot_npu.registry import DEVICES, device_info, make_device
from poot_planner import Span, partition, plan
from poot_planner.fp16.prelude import F32_MASK

XDNA2 = "xdna2"


def _literals(span: Span) -> set[float]:
    return {a.as_float() for e in span.program.eqns for a in e.inputs if not isinstance(a, Var)}


def _mask_operands(program: Program) -> set[int]:
    """Independently: the ids of what each add reads beside the mask (through movement)."""
    made = {v.id: e for e in program.eqns for v in e.outputs}

    def from_select(v: Var) -> bool:
        e = made.get(v.id)
        while e is not None and e.prim in (Prim.RESHAPE, Prim.BROADCAST_IN_DIM):
            v = e.inputs[0]  # type: ignore[assignment]
            e = made.get(v.id)
        return e is not None and e.prim is Prim.SELECT

    out = set()
    for e in program.eqns:
        ins = [a for a in e.inputs if isinstance(a, Var)]
        if e.prim is Prim.ADD and any(from_select(a) for a in ins):
            out |= {a.id for a in ins if not from_select(a)}
    return out


def _run(program: Program, feed: dict[str, np.ndarray], tmp_path: Path) -> np.ndarray:
    weights = {a.name: feed[a.name] for a in program.args if a.storage is not Storage.SLOT}
    slots = {a.name: feed[a.name] for a in program.args if a.storage is Storage.SLOT}
    with Engine(make_device("xdna-host"), cache_dir=tmp_path, verify="always") as engine:
        entry = engine.add_partitioned(plan(program, XDNA2), engine.load_weights(weights))
        got = engine.step(entry, slots)["hidden"]
        assert engine.stats().worst_error_ratio <= 1.0
    return got


def test_a_checking_device_gets_the_f32_mask_and_checks_each_score() -> None:
    program = encoder_layer(mask_style="bool")
    want = _mask_operands(program)
    assert len(want) == 1  # the scores of the layer's one attention
    host, device = partition(program, XDNA2, score_guard=True)
    assert F32_MASK in _literals(host) and float("-inf") in _literals(host)  # a full row's
    p = device.plan
    assert p is not None and p.score_bound == want
    # the kernels hold the check: on the add's score operand, and nowhere else
    adds = {
        (i, k)
        for i, e in enumerate(p.program.eqns)
        for k, a in enumerate(e.inputs)
        if isinstance(a, Var) and a.id in want and e.prim is Prim.ADD
    }
    assert len(adds) == 1 and kernel_guards(p).scores == adds
    # without a checking device the mask stays -inf, and no plan names scores
    spans = partition(program, XDNA2)
    assert F32_MASK not in _literals(spans[0]) and float("-inf") in _literals(spans[0])
    assert all(s.plan is None or not s.plan.score_bound for s in spans)


def test_a_padded_batch_runs_within_the_contract(tmp_path: Path) -> None:
    program = encoder_layer(mask_style="bool")
    feed = encoder_inputs(program)
    assert not feed["attention_mask"].all()  # padded
    got = _run(program, feed, tmp_path)
    want = evaluate(program, feed)["hidden"]
    # as test_xdna_masked_encoder's finfo mask: bf16 operands through two layer norms
    assert np.allclose(got, want, atol=3e-2)


def test_scores_past_the_bound_are_refused_typed(tmp_path: Path) -> None:
    # q and k 2^31 times larger: scores about 2^62 times the model's, past the bound; where the
    # padded key's score is the largest, -2^64 would no longer mask it
    program = encoder_layer(mask_style="bool")
    feed = encoder_inputs(program)
    for name in ("wq", "wk"):
        feed[name] = feed[name] * np.float32(2.0**31)
    with pytest.raises(DomainFlagged):  # without the check it ran (tried: no error)
        _run(program, feed, tmp_path)


def test_poot_plan_cuts_the_program_as_poot_run_does(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``poot plan --target xdna2`` partitions for the device ``poot run`` picks (xdna-host,
    whose kernels check the scores), so it shows the mask rewrite that run makes and counts
    the scores checked; it once partitioned as for a device that checks nothing and showed
    the ``-inf`` mask left in place."""
    from poot.cli import main

    program = encoder_layer(mask_style="bool")
    source = tmp_path / "encoder.poot"
    source.write_text(format_program(program))
    assert main(["plan", str(source), "--target", XDNA2]) == 1  # refused whole: partitioned
    out = " ".join(capsys.readouterr().out.replace("│", " ").split())
    checked = partition(program, XDNA2, score_guard=True)
    n = sum(len(s.plan.score_bound) for s in checked if s.plan is not None)
    assert n > 0 and f"{n} score value(s) checked on the device" in out


@pytest.mark.parametrize("name", [d.name for d in DEVICES], ids=str)
def test_the_registry_knows_which_devices_check_scores(name: str) -> None:
    """``DeviceInfo.checks_score_bound`` (what ``poot plan`` reads without opening a device)
    is what the device it makes says in its traits."""
    info = device_info(name)
    if info.unavailable_reason() is not None:
        pytest.skip(f"hardware unavailable: {info.unavailable_reason()}")
    device = info.make()
    try:
        assert device.traits.checks_score_bound is info.checks_score_bound
    finally:
        device.close()
