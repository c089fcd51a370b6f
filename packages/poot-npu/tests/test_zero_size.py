"""Zero-size shapes through every device (issue 26: ``Engine.add_entry`` of a ``gather`` with
``i32[0]`` indices killed vpu-cpu with SIGFPE inside OpenVINO's compile). Each primitive is
drawn with a size-0 axis somewhere (operand, result, or the reduced or gathered axis) and run
on cpu, vpu-cpu and xdna-host in one subprocess per batch (``zero_size_worker``): each program
must run and equal the oracle, or be refused with a typed ``PootError``; a crash of the
subprocess fails the test, naming the program that was running."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from poot_ir import Builder, DType, Prim, Program, format_program
from poot_npu.registry import device_info

F32, F16, I32 = DType.F32, DType.F16, DType.I32
DEVICES = ("cpu", "vpu-cpu", "xdna-host")
WORKER = Path(__file__).with_name("zero_size_worker.py")
UNARY = (Prim.NEG, Prim.EXP, Prim.LOG, Prim.TANH, Prim.ERF, Prim.SQRT, Prim.ABS, Prim.RECIP)
BINARY = (Prim.ADD, Prim.SUB, Prim.MUL, Prim.DIV, Prim.MAX, Prim.MIN, Prim.GE, Prim.GT, Prim.EQ)


def _outcomes(device: str, programs: list[Program], cache: Path) -> dict[str, str]:
    texts = [format_program(p) for p in programs]
    done = subprocess.run(
        [sys.executable, str(WORKER), device, str(cache)],
        input=json.dumps(texts),
        capture_output=True,
        text=True,
        check=False,
        timeout=900,
    )
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    last = lines[-1]["name"] if lines else "(none)"
    assert done.returncode == 0, (
        f"{device} died ({done.returncode}) in {last}: {done.stderr[-800:]}"
    )
    return {line["name"]: line["outcome"] for line in lines}


@st.composite
def zero_size_programs(draw: st.DrawFn, index: int) -> Program:
    """One equation of a drawn primitive over shapes with a size-0 axis where it matters."""
    dt = draw(st.sampled_from([F32, F16]))
    rank = draw(st.integers(1, 3))
    shape = [draw(st.integers(1, 3)) for _ in range(rank)]
    zero = draw(st.integers(0, rank - 1))
    empty = list(shape)
    empty[zero] = 0
    kind = draw(
        st.sampled_from(
            ["unary", "binary", "select", "convert", "reduce", "gather", "transpose", "reshape"]
            + ["broadcast", "slice", "concat", "dus", "iota", "matmul"]
        )
    )
    b = Builder(f"z{index}_{kind}")
    x = b.slot("x", dt, tuple(empty))
    match kind:
        case "unary":
            y = getattr(b, draw(st.sampled_from(UNARY)).value)(x)
        case "binary":
            y = getattr(b, draw(st.sampled_from(BINARY)).value)(x, b.slot("u", dt, tuple(empty)))
        case "select":
            y = b.select(b.gt(x, 1.0), x, 0.5)
        case "convert":
            y = b.convert(x, draw(st.sampled_from([F32, F16, I32])))
        case "reduce":
            axes = draw(st.lists(st.integers(0, rank - 1), unique=True))
            y = getattr(b, draw(st.sampled_from(["reduce_sum", "reduce_max"])))(x, axes)
        case "gather":
            # either the indices are empty (an empty result) or the table's axis is
            idx_shape = tuple(draw(st.lists(st.integers(0, 2), min_size=1, max_size=2)))
            table = b.slot("t", dt, tuple(shape if 0 in idx_shape else empty))
            y = b.gather(table, b.slot("i", I32, idx_shape), draw(st.integers(0, rank - 1)))
        case "transpose":
            y = b.transpose(x, draw(st.permutations(range(rank))))
        case "reshape":
            y = b.reshape(x, (*draw(st.permutations(empty)), 1))
        case "broadcast":
            y = b.broadcast_in_dim(x, (2, *empty), tuple(range(1, rank + 1)))
        case "slice":
            full = b.slot("f", dt, tuple(shape))
            at = draw(st.integers(0, shape[zero]))
            start = [0] * rank
            start[zero] = at
            limit = list(shape)
            limit[zero] = at
            y = b.add(b.slice(full, start, limit), x)
        case "concat":
            y = b.concat([x, b.slot("f", dt, tuple(shape))], zero)
        case "dus":
            y = b.dynamic_update_slice(b.slot("f", dt, tuple(shape)), x, [0] * rank)
        case "iota":
            y = b.add(x, b.iota(tuple(empty), dt, draw(st.integers(0, rank - 1))))
        case "matmul":
            m, k, n = (draw(st.integers(0, 3)) for _ in range(3))
            if 0 not in (m, k, n):
                k = 0
            y = b.matmul(b.slot("a", dt, (m, k)), b.slot("w", dt, (k, n)))
        case _:
            raise AssertionError(kind)
    b.output("y", y)
    return b.build()


@pytest.mark.parametrize("device", DEVICES)
@settings(
    max_examples=2,
    deadline=None,
    derandomize=True,
    phases=[Phase.explicit, Phase.reuse, Phase.generate],  # a shrink is a subprocess per try
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_zero_size_shapes_run_or_are_refused_typed(
    device: str, tmp_path: Path, data: st.DataObject
) -> None:
    why = device_info(device).unavailable_reason()
    if why is not None:
        pytest.skip(f"hardware unavailable: {why}")
    programs = [data.draw(zero_size_programs(i), label=f"program {i}") for i in range(24)]
    outcomes = _outcomes(device, programs, tmp_path / "cache")
    bad = {n: o for n, o in outcomes.items() if o != "ok" and not o.startswith("typed ")}
    assert not bad, bad


GATHERS = {
    "empty indices": ((4, 3), (0,), 0),
    "empty indices, axis 1": ((4, 3), (2, 0), 1),
    "empty other axis": ((4, 0), (2,), 0),
    "empty table axis": ((0, 3), (2,), 0),
}


@pytest.mark.parametrize("device", DEVICES)
def test_a_zero_size_gather_is_planned_or_refused_typed(device: str, tmp_path: Path) -> None:
    """The issue's case and its neighbours: an empty result runs (it is empty, or zero-size on
    an axis the indices do not touch); a gather from an empty axis into a non-empty result
    (every index outside the table) is refused typed, never run."""
    why = device_info(device).unavailable_reason()
    if why is not None:
        pytest.skip(f"hardware unavailable: {why}")
    programs = []
    for n, (table, idx, axis) in enumerate(GATHERS.values()):
        b = Builder(f"g{n}")
        b.output("y", b.gather(b.slot("t", F16, table), b.slot("i", I32, idx), axis))
        programs.append(b.build())
    got = _outcomes(device, programs, tmp_path / "cache")
    # cpu and intel-npu4 plan an empty result; xdna2 refuses a job that streams nothing
    runs = "typed PlanRefused" if device == "xdna-host" else "ok"
    assert [got[f"g{n}"] for n in range(3)] == [runs] * 3
    assert got["g3"].startswith("typed "), got["g3"]
