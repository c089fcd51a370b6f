"""Host relayouts between XDNA2 regions (reshape: an alias; transpose, slice, concat: one host
copy; iota: a counter the host writes), run through the real ``Engine`` on the host stand-in and through XRT (the fake
``pyxrt``: a missing or misdirected sync gives wrong results there), bit exact against the
oracle; and a region's flag word still refuses a run across relayouts."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import fake_pyxrt
import numpy as np
import pytest
import xdna_cases as cases
from poot_codegen.xdna import RelayoutKind, design_program
from poot_engine import Engine
from poot_ir import Builder, DomainFlagged, DType, Program, Var, evaluate
from poot_npu import xdna_contexts
from poot_npu.xdna import XdnaDevice
from poot_npu.xdna_host import XdnaHostDevice
from poot_planner import plan

F32, I32 = DType.F32, DType.I32
Body = Callable[[Builder], None]


def _build(name: str, body: Body) -> Program:
    b = Builder(name)
    body(b)
    return b.build()


def _between(b: Builder) -> None:  # region | reshape (alias) | region
    b.output("z", b.mul(b.reshape(b.neg(b.slot("x", F32, (6, 8))), (4, 12)), 2.0))


def _transpose_between(b: Builder) -> None:  # region | transpose (copy) | region
    b.output("z", b.neg(b.transpose(b.exp(b.slot("x", F32, (5, 7))), (1, 0))))


def _argument_and_result(b: Builder) -> None:  # relayouts of an argument, as results
    x = b.slot("x", F32, (3, 4))
    b.output("r", b.reshape(x, (2, 6)))
    b.output("t", b.transpose(x, (1, 0)))
    b.output("n", b.neg(b.slice(x, (0, 1), (3, 4), (2, 1))))


def _two_readers(b: Builder) -> None:  # a relayout read by two later regions
    t = b.transpose(b.neg(b.slot("x", F32, (8, 4))), (1, 0))
    u = b.neg(t)
    v = b.mul(b.reshape(u, (32,)), 2.0)
    b.output("v", v)
    b.output("w", b.neg(b.reshape(t, (32,))))
    b.output("c", b.concat([t, b.slot("y", F32, (2, 8))], 0))


def _edges(b: Builder) -> None:  # size 1, empty, two in a row, i32
    x = b.slot("x", F32, (1, 1))
    b.output("one", b.neg(b.reshape(b.transpose(b.neg(x), (1, 0)), (1,))))
    b.output("empty", b.transpose(b.reshape(b.slot("e", F32, (0, 3)), (3, 0)), (1, 0)))
    i = b.slot("i", I32, (2, 3))
    b.output("idx", b.concat([b.transpose(i, (1, 0)), b.reshape(i, (3, 2))], 1))


def _only_relayouts(b: Builder) -> None:  # no region at all: the relayouts run on the host
    x = b.slot("x", F32, (3, 4))
    b.output("t", b.transpose(b.reshape(x, (4, 3)), (1, 0)))
    b.output("c", b.concat([b.slice(x, (0, 0), (3, 4), (1, 3)), x], 1))


def _counters(b: Builder) -> None:  # counters the host writes from nothing (no source slot)
    x = b.slot("x", F32, (3, 4))
    b.output("m", b.mul(x, b.iota((3, 4), F32, 1)))  # read by a region
    b.output("i", b.iota((2, 5), I32, 0))  # returned as it is
    zeros = b.reshape(b.iota((1, 3, 2), F32, 0), (3, 2))  # a convolution's zero padding
    b.output("padded", b.neg(b.concat([zeros, x, zeros], 1)))


PROGRAMS: dict[str, Body] = {
    "only_relayouts": _only_relayouts,
    "counters": _counters,
    "between": _between,
    "transpose_between": _transpose_between,
    "argument_and_result": _argument_and_result,
    "two_readers": _two_readers,
    "edges": _edges,
}


def _inputs(program: Program, seed: int) -> dict[str, cases.Array]:
    rng = np.random.default_rng(seed)
    out: dict[str, cases.Array] = {}
    for a in program.args:
        t = a.var.type
        if t.dtype is I32:
            out[a.name] = rng.integers(-(2**31), 2**31 - 1, t.shape, dtype=np.int64).astype(
                np.int32
            )
        else:  # signed zeros and the extremes among them: a relayout moves them bit for bit
            x = rng.uniform(-3, 3, t.shape).astype(np.float32).reshape(-1)
            edges = np.array([-0.0, 0.0, 1.1754944e-38, -2.0], np.float32)
            x[: min(x.size, edges.size)] = edges[: x.size]
            out[a.name] = x.reshape(t.shape)
    return out


def _run(engine: Engine, program: Program, steps: int = 2) -> None:
    """``steps`` steps of ``program``, each result bit for bit the oracle's: the tile jobs used
    here (neg, mul by 2) are exact and so are the relayouts (exp's result is compared under
    exp's contract)."""
    entry = engine.add_entry(program)
    for s in range(steps):
        feed = _inputs(program, s)
        got = engine.step(entry, feed)
        want = evaluate(program, feed)
        for name in program.result_names:
            assert got[name].shape == want[name].shape and got[name].dtype == want[name].dtype
            if program.name == "transpose_between":
                err = np.abs(got[name] - want[name]) / np.maximum(np.abs(want[name]), 1e-30)
                assert float(err.max()) <= 2e-5, (s, name)
            else:
                assert got[name].tobytes() == want[name].tobytes(), (s, name)
    engine.remove_entry(entry)


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_relayouts_on_the_host_stand_in(name: str, tmp_path: Path) -> None:
    program = _build(name, PROGRAMS[name])
    assert plan(program, "xdna2").admitted
    with Engine(XdnaHostDevice(tmp_path / "kernels"), tmp_path / "blobs") as engine:
        _run(engine, program)


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_relayouts_through_xrt(
    name: str, fake: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(xdna_contexts.ALLOW_ENV, "16")  # three regions: past the #3654 default
    program = _build(name, PROGRAMS[name])
    pl = plan(program, "xdna2").check()
    fake_pyxrt.install(pl, tmp_path / "kernels")
    toolchain = fake_pyxrt.fake_toolchain(tmp_path / "tools")
    with Engine(XdnaDevice(toolchain), tmp_path / "blobs") as engine:
        _run(engine, program)


def test_a_copy_syncs_only_its_slots_around_the_host_copy(fake: ModuleType, tmp_path: Path) -> None:
    """Between the regions: the source slot's bytes synced from the device, the destination's
    to it, each over its own byte range (syncing a whole arena would overwrite the device's
    copy of every other slot with stale host bytes)."""
    program = _build("transpose_between", _transpose_between)
    pl = plan(program, "xdna2").check()
    design = design_program(pl)
    (h,) = design.relayouts
    assert h.kind is RelayoutKind.TRANSPOSE and h.after == 1 and len(design.regions) == 2
    fake_pyxrt.install(pl, tmp_path / "kernels")
    with Engine(XdnaDevice(fake_pyxrt.fake_toolchain(tmp_path / "tools")), tmp_path / "blobs") as e:
        entry = e.add_entry(program)
        fake_pyxrt.STATE.log.clear()
        e.step(entry, _inputs(program, 0))
    log = fake_pyxrt.STATE.log
    ranged = [x for x in log if x[0] == "sync" and len(x) == 5]
    src, dst = design.layout.slot(h.sources[0]), design.layout.slot(h.target)
    assert [x[2:] for x in ranged] == [
        ("XCL_BO_SYNC_BO_FROM_DEVICE", src.nbytes, src.offset),
        ("XCL_BO_SYNC_BO_TO_DEVICE", dst.nbytes, dst.offset),
    ]
    waits = [i for i, x in enumerate(log) if x[0] == "wait"]
    at = [log.index(x) for x in ranged]
    assert waits[0] < at[0] < at[1] < waits[1]  # between the two region runs


def test_an_alias_moves_nothing_on_xrt(fake: ModuleType, tmp_path: Path) -> None:
    program = _build("between", _between)
    pl = plan(program, "xdna2").check()
    fake_pyxrt.install(pl, tmp_path / "kernels")
    with Engine(XdnaDevice(fake_pyxrt.fake_toolchain(tmp_path / "tools")), tmp_path / "blobs") as e:
        entry = e.add_entry(program)
        fake_pyxrt.STATE.log.clear()
        e.step(entry, _inputs(program, 0))
    assert not [x for x in fake_pyxrt.STATE.log if x[0] == "sync" and len(x) == 5]
    # the argument written, the flag words and the result read: nothing for the reshape
    moved = [x[0] for x in fake_pyxrt.STATE.log if x[0] in ("read", "write")]
    assert moved == ["write", "read", "read"]


def _flagged() -> Program:
    def body(b: Builder) -> None:
        v: Var = b.transpose(b.neg(b.slot("x", F32, (4, 8))), (1, 0))
        b.output("y", b.exp(b.add(b.reshape(v, (32,)), 99.0)))

    return _build("flag_after_relayout", body)


def _check_flagged(engine: Engine) -> None:
    program = _flagged()
    entry = engine.add_entry(program)
    x = np.full((4, 8), 20.0, np.float32)  # exp(-20 + 99) = exp(79): inside the domain
    got = engine.step(entry, {"x": x})["y"]
    assert np.allclose(got, evaluate(program, {"x": x})["y"], rtol=1e-5)
    bad = x.copy()
    bad[2, 1] = -1.0  # exp(1 + 99): outside exp's domain [-87, 88] (and past F32's range)
    with pytest.raises(DomainFlagged) as err:
        engine.step(entry, {"x": bad})
    assert err.value.region == 1 and err.value.count == 1  # the one operand, nothing else


def test_the_flag_word_refuses_a_run_across_relayouts_on_the_host(tmp_path: Path) -> None:
    with Engine(XdnaHostDevice(tmp_path / "kernels"), tmp_path / "blobs") as engine:
        _check_flagged(engine)


def test_the_flag_word_refuses_a_run_across_relayouts_through_xrt(
    fake: ModuleType, tmp_path: Path
) -> None:
    fake_pyxrt.install(plan(_flagged(), "xdna2").check(), tmp_path / "kernels")
    with Engine(XdnaDevice(fake_pyxrt.fake_toolchain(tmp_path / "tools")), tmp_path / "blobs") as e:
        _check_flagged(e)
