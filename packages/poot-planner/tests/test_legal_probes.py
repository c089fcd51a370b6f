"""The rule probes ``poot acceptance`` runs on a device (``poot_planner.legalize.probes``): every
rule of every target has one, each probe's plan applies exactly the rules it names (so a probe
measures what it says), and its inputs reach near zero and stay inside the source program's
finite domain; the legalized program, evaluated by the oracle in the device's precision,
is within the plan's running bound of the source program's oracle."""

from __future__ import annotations

import numpy as np
import pytest
from poot_ir import evaluate
from poot_planner import plan
from poot_planner.error_bounds import result_bounds
from poot_planner.legalize.probes import NEAR_ZERO, probes
from poot_planner.legalize.rules import RULES

TARGETS = sorted({r.target for r in RULES})


@pytest.mark.parametrize("target", TARGETS)
def test_every_rule_has_a_probe_that_applies_exactly_its_rules(target: str) -> None:
    table = probes(target)
    covered: set[str] = set()
    for probe in table:
        p = plan(probe.program, target)
        assert p.admitted, [str(r) for r in p.refusals]
        assert {rw.rule.name for rw in p.rewrites} == probe.rules, probe.program.name
        covered |= probe.rules
    assert covered == {r.name for r in RULES if r.target == target}


@pytest.mark.parametrize("target", TARGETS)
def test_the_probes_inputs_reach_near_zero_and_fp16_holds_them(target: str) -> None:
    for probe in probes(target):
        values = np.concatenate([v.ravel() for v in probe.inputs.values()])
        assert np.any(np.isin(values, NEAR_ZERO)), probe.program.name
        if target == "intel-npu4":  # an F32 input FP16 cannot hold is refused before a run
            assert np.all(np.abs(values) < 65504), probe.program.name


@pytest.mark.parametrize("target", TARGETS)
def test_each_legalized_probe_is_within_its_running_bound_on_the_oracle(target: str) -> None:
    for probe in probes(target):
        p = plan(probe.program, target)
        inputs = dict(probe.inputs)
        # the device's program (FP16 on intel-npu4) against the F32 oracle of the source: the
        # bound is the largest error a device running the plan may have against the oracle
        got, want = evaluate(p.program, inputs), evaluate(p.source, inputs)
        for name, bound in result_bounds(p, inputs).items():
            g, w = got[name].astype(np.float64), want[name].astype(np.float64)
            finite = np.isfinite(w) & np.isfinite(bound)
            assert np.all(np.abs(g - w)[finite] <= bound[finite] + 1e-30), (probe.rules, name)
