"""The Intel in-graph guards check the equations they name, in the program the graph is lowered
from.

A plan for intel-npu4 runs ``narrow(legalize(source))``; the guards must be found on the
legalized program (``intermediate_guards(plan.legalized, ...)``). Found on the source, as
``VpuDevice.lower`` once did, their indices name other equations once a rewrite has added some:
a select's mask (a ``ge`` of a legalized ``gt``) was checked for overflow, and OpenVINO has no
Abs of a boolean (9 ONNX node cases crashed on vpu-cpu), while the steps of a legalized tanh
were checked in place of the ones named. Every guarded equation of each legalized program below
(a select over a mask, a tanh and an abs approximated by steps) is lowered and checked: each
guard is on a float value of exactly the equation its label names, the graph carries the labels
in that order, and the stand-in's results match the oracle within the plan's bound.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
from poot_codegen.intel import graph as intel_graph
from poot_codegen.intel import guard as intel_guard
from poot_engine import Engine
from poot_ir import Builder, CodegenError, DType, Program, compare, evaluate
from poot_npu.vpu import VpuDevice
from poot_planner import plan
from poot_planner.fp16.narrowing import intermediate_guards

F32 = DType.F32


def _select() -> Program:
    b = Builder("select")
    x, y = b.slot("x", F32, (8,)), b.slot("y", F32, (8,))
    z = b.select(b.gt(x, y), b.mul(x, 3.0), b.add(y, 1.0))
    b.output("z", b.mul(z, z))
    return b.build()


def _tanh_abs() -> Program:
    b = Builder("tanh_abs")
    x, y = b.slot("x", F32, (8,)), b.slot("y", F32, (8,))
    b.output("t", b.add(b.tanh(b.mul(x, y)), b.abs(b.sub(x, y))))
    return b.build()


PROGRAMS: dict[str, Callable[[], Program]] = {"select": _select, "tanh_abs": _tanh_abs}


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_every_guard_checks_a_float_value_of_the_equation_it_names(name: str) -> None:
    p = plan(PROGRAMS[name](), "intel-npu4").check()
    assert p.rewrites and p.narrowing is not None  # legalized, then narrowed
    found = intermediate_guards(p.legalized, p.narrowing)
    assert found
    for at, g in found:
        named = p.legalized.eqns[g.eqn]  # the equation the label names
        lowered = p.program.eqns[at]  # the one whose value the graph checks
        assert g.primitive == named.prim.value == lowered.prim.value, g.label
        assert lowered.out.dtype.is_float and named.out.dtype.is_float, g.label
        assert [a.type.shape for a in lowered.inputs] == [a.type.shape for a in named.inputs]
    model = intel_graph.lower(p.program, emulate_f16=True, guards=found)
    labels = [intel_guard.guard_labels({str(n) for n in out.get_names()}) for out in model.outputs]
    (carried,) = [x for x in labels if x is not None]
    assert list(carried) == [g.label for _, g in found]


def test_guards_found_on_the_source_name_other_equations() -> None:
    """The cause of the crash: the source's indices, applied to the legalized program, put the
    check of ``1.mul`` on the ``ge`` that the legalized ``gt`` became (a boolean)."""
    p = plan(_select(), "intel-npu4").check()
    assert p.narrowing is not None
    stale = intermediate_guards(p.source, p.narrowing)
    assert any(g.primitive != p.program.eqns[at].prim.value for at, g in stale)
    assert any(not p.program.eqns[at].out.dtype.is_float for at, _ in stale)
    with pytest.raises(CodegenError, match="not a float one"):  # refused, never guessed
        intel_graph.lower(p.program, emulate_f16=True, guards=stale)


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[Engine]:
    with Engine(VpuDevice("CPU"), tmp_path / "cache") as e:
        yield e


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_the_guarded_programs_run_on_the_stand_in_within_their_bound(
    engine: Engine, name: str
) -> None:
    program = PROGRAMS[name]()
    p = plan(program, "intel-npu4").check()
    rng = np.random.default_rng(12)
    inputs = {a.name: rng.uniform(-4, 4, a.var.shape).astype(np.float32) for a in program.args}
    got = engine.step(engine.add_entry(program), inputs)
    want = evaluate(program, inputs)
    for k, v in want.items():
        cmp = compare(got[k], v, p.numerics.bound)
        assert cmp.ok, f"{name} {k}: {cmp}"
