"""xdna2's sigmoid rule on the xdna-host stand-in (the host C compiler over the region layout),
verified by the engine: within the derived bound of the original sigmoid, and past the rule's
domain refused on the device (exp's operand outside its domain: ``DomainFlagged``)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from poot_engine import Engine
from poot_ir import AbsRel, DomainFlagged, evaluate
from poot_npu.registry import make_device
from poot_planner import TARGETS, plan

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "packages/poot-planner/tests"))
from test_legal_sigmoid import inputs, sigmoid_program


def test_sigmoid_on_xdna_host_within_its_derived_bound(tmp_path: Path) -> None:
    x = inputs(1)
    x = x[(x > -87.3) & (np.abs(x) != np.float32(1e-38))]  # the device flags those (subnormals)
    program = sigmoid_program(x.size)
    p = plan(program, TARGETS["xdna2"])
    (rw,) = [rw for rw in p.rewrites if rw.primitive == "select"]
    bound = rw.derivation.bound
    assert isinstance(bound, AbsRel)
    with Engine(make_device("xdna-host"), cache_dir=tmp_path, verify="always") as engine:
        entry = engine.add_entry(p, engine.load_weights({}))
        got = engine.step(entry, {"x": x})["y"].astype(np.float64)
        for bad in (88.0, -88.5):
            worse = x.copy()
            worse[7] = bad
            with pytest.raises(DomainFlagged):
                engine.step(entry, {"x": worse})
    want = evaluate(program, {"x": x})["y"].astype(np.float64)
    assert np.max(np.abs(got - want)) <= bound.abs
