"""Regions reused across identical layers (``poot_codegen.xdna.reuse``): a program of N
identical layers needs the hardware contexts of one layer, on the host stand-in (one kernel
library per distinct artifact, one blob-cache entry each) and through the fake XRT (one
``hw_context`` per distinct artifact; each region a run with its own instruction buffer, on its
artifact's context); results equal the oracle under the plan's contract; a region differing in
more than its arena offsets is not merged."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from types import ModuleType

import fake_pyxrt
import numpy as np
import pytest
from poot_codegen.xdna import DesignError, design_program
from poot_codegen.xdna.reuse import share
from poot_codegen.xdna.validate import validate
from poot_engine import Engine
from poot_engine.blob_cache import SUFFIX
from poot_ir import Builder, DType, Program, Var, evaluate
from poot_npu import xdna_contexts
from poot_npu.xdna import NODE, XdnaDevice
from poot_npu.xdna_host import XdnaHostDevice
from poot_planner import plan

F32 = DType.F32
SHAPE = (4, 16)
TILES = 8  # compute tiles per layer: four layers fill a region of 32


def _layer(b: Builder, x: Var, w: Var, k: int, factor: float) -> Var:
    """Eight tiles, every one bit exact on xdna2 (products, negations, maxima)."""
    a = b.mul(x, w)
    c = b.mul(b.max(a, x), factor)
    d = b.neg(c)
    e = b.max(d, b.mul(x, -0.25))
    return b.neg(b.mul(e, w))


def layers(n: int, *, distinct: bool = False, name: str = "layers") -> Program:
    """``n`` identical layers, each with a weight of its own (``distinct``: layer ``k``'s
    factor is its own, so no two regions are one design)."""
    b = Builder(f"{name}{n}")
    x = b.slot("x", F32, SHAPE)
    for k in range(n):
        w = b.weight(f"w{k}", F32, SHAPE)
        x = _layer(b, x, w, k, 0.5 + k / 64 if distinct else 0.5)
    b.output("y", x)
    return b.build()


def _inputs(program: Program, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {a.name: rng.uniform(-2.0, 2.0, a.var.shape).astype(np.float32) for a in program.args}


def _run(engine: Engine, program: Program, steps: int = 2) -> None:
    """Steps of ``program`` on ``engine`` (which verifies each against the oracle under the
    plan's contract) and each result equal to the oracle's bits (every step is exact)."""
    first = _inputs(program, 0)
    weights = {k: v for k, v in first.items() if k != "x"}
    entry = engine.add_entry(program, engine.load_weights(weights))
    for s in range(steps):
        feed = {"x": _inputs(program, s)["x"]}
        got = engine.step(entry, feed)["y"]
        want = evaluate(program, {**weights, **feed})["y"]
        assert got.tobytes() == want.tobytes()


# -- the plan --------------------------------------------------------------------------------


@pytest.mark.parametrize("n", [8, 12, 16, 64])
def test_n_identical_layers_need_the_contexts_of_the_first_two_regions(n: int) -> None:
    """Four layers fill a region. The first region is an artifact of its own: its first layer
    reads the program's argument, whose domain is checked on the host, where every later
    region's first layer reads a value computed on the device and guards it in its kernel
    (``poot_planner.guards``): different kernels. Every later region runs the second one's.
    So the contexts are those of eight layers, whatever ``n``."""
    one, eight, many = (plan(layers(k), "xdna2").check() for k in (4, 8, n))
    assert one.contexts == 1 and len(one.regions) == 1
    assert eight.contexts == 2 and many.contexts == eight.contexts
    assert many.contexts_before_reuse == len(many.regions) == n * TILES // 32
    assert [r.runs for r in many.regions] == [0] + [1] * (len(many.regions) - 1)


def test_80_layers_are_admitted_where_one_context_per_region_would_be_refused() -> None:
    p = plan(layers(80), "xdna2")  # 20 regions: past 16 without reuse
    assert p.admitted and p.contexts_before_reuse == 20 and p.contexts == 2
    q = plan(layers(80, distinct=True), "xdna2")
    assert not q.admitted and q.contexts == 20
    (r,) = q.refusals
    assert (r.fact("needed"), r.fact("available"), r.fact("regions")) == (20, 16, 20)


def test_a_layer_differing_in_a_literal_or_a_shape_is_not_merged() -> None:
    """Both sides: the same layers merge; a factor of their own, or another shape, keeps each
    region an artifact of its own."""
    assert [r.runs for r in plan(layers(12), "xdna2").regions] == [0, 1, 1]
    assert [r.runs for r in plan(layers(12, distinct=True), "xdna2").regions] == [0, 1, 2]
    p = plan(_two_shapes(), "xdna2").check()
    assert [r.runs for r in p.regions] == [0, 1, 1, 3, 4]


def _two_shapes() -> Program:
    """Twelve layers on ``SHAPE``, then eight on ``(4, 8)``: five regions."""
    b = Builder("shapes")
    x = b.slot("x", F32, SHAPE)
    for k in range(12):
        x = _layer(b, x, b.weight(f"w{k}", F32, SHAPE), k, 0.5)
    z = b.slot("z", F32, (4, 8))  # the same layers on another shape: another design
    for k in range(8):
        z = _layer(b, z, b.weight(f"v{k}", F32, (4, 8)), k, 0.5)
    b.output("y", x)
    b.output("u", z)
    return b.build()


# -- the design ------------------------------------------------------------------------------


def test_a_design_whose_use_differs_from_its_artifact_is_refused() -> None:
    """``share`` and ``validate`` refuse a region running another's artifact when the two
    differ in more than arena offsets; they accept it when only the offsets differ."""
    same = design_program(plan(layers(12), "xdna2").check())
    r0, r1, r2 = same.regions
    assert (r1.artifact, r2.artifact) == (None, 1) and r1.transfers != r2.transfers
    assert [c.symbol for c in r2.cores] == [c.symbol for c in r1.cores]
    assert r2.object_file == r1.object_file != r0.object_file
    other = design_program(plan(layers(12, distinct=True), "xdna2").check())
    assert [r.artifact for r in other.regions] == [None, None, None]
    # its kernels differ (a literal) where the designs' shapes agree: the kernel check refuses
    faked = dataclasses.replace(other.regions[2], artifact=1)
    with pytest.raises(DesignError, match="kernels other than region 1's"):
        validate(dataclasses.replace(other, regions=(*other.regions[:2], faked)))
    with pytest.raises(DesignError, match="differs in more than its arena offsets"):
        share(r1, dataclasses.replace(r2, cores=r2.cores[:-1]))
    shapes = design_program(plan(_two_shapes(), "xdna2").check())
    claimed = dataclasses.replace(shapes.regions[4], artifact=1)  # the same layers, (4, 8)
    with pytest.raises(DesignError, match="a design other than region 1's"):
        validate(dataclasses.replace(shapes, regions=(*shapes.regions[:4], claimed)))


# -- the host stand-in -----------------------------------------------------------------------


def _libraries(root: Path) -> int:
    return len(list(root.glob(f"*{SUFFIX}")))


def test_on_the_host_stand_in_results_equal_the_oracle_with_one_library_per_artifact(
    tmp_path: Path,
) -> None:
    program = layers(12)  # three regions, two artifacts
    device = XdnaHostDevice(tmp_path / "libraries")
    with Engine(device, tmp_path / "blobs", verify="always") as engine:
        _run(engine, program)
        stats = device.last_run_stats()
        assert stats is not None and (stats.regions, stats.contexts) == (3, 2)
    assert _libraries(tmp_path / "libraries") == 2
    distinct = layers(12, distinct=True)
    device = XdnaHostDevice(tmp_path / "distinct")
    with Engine(device, tmp_path / "blobs2", verify="always") as engine:
        _run(engine, distinct)
        stats = device.last_run_stats()
        assert stats is not None and (stats.regions, stats.contexts) == (3, 3)
    assert _libraries(tmp_path / "distinct") == 3


# -- the fake XRT ----------------------------------------------------------------------------


def _xrt_engine(tmp_path: Path) -> Engine:
    return Engine(XdnaDevice(fake_pyxrt.fake_toolchain(tmp_path / "tools")), tmp_path / "blobs")


def test_through_xrt_one_context_per_distinct_artifact_and_a_run_per_region(
    fake: ModuleType, tmp_path: Path
) -> None:
    """Twelve identical layers, three regions, two artifacts. The fake XRT makes two hardware
    contexts (within the default of two, which counts distinct artifacts: three would be
    refused, mlir-aie #3654), and each region runs on its artifact's context with its own
    instruction buffer, over the same arenas; results are the oracle's bits."""
    program = layers(12)
    p = plan(program, "xdna2").check()
    assert (p.contexts_before_reuse, p.contexts) == (3, 2)
    fake_pyxrt.install(p, tmp_path / "kernels")
    with _xrt_engine(tmp_path) as engine:
        _run(engine, program)
        assert xdna_contexts.held(NODE) == 2
    log = fake_pyxrt.STATE.log
    contexts = [e[1] for e in log if e[0] == "hw_context"]
    assert len(contexts) == 2 and len(set(contexts)) == 2
    runs = fake_pyxrt.STATE.runs_of
    assert sorted(len(v) for v in runs.values()) == [2, 4]  # two steps of 1 and of 2 regions
    by_region = {region: (insts, arenas) for v in runs.values() for region, insts, arenas in v}
    assert sorted(by_region) == [0, 1, 2]
    assert len({insts for insts, _ in by_region.values()}) == 3  # an instruction buffer each
    assert len({arenas for _, arenas in by_region.values()}) == 1  # the same arenas
    shared = next(v for v in runs.values() if len(v) == 4)
    assert [region for region, _, _ in shared] == [1, 2, 1, 2]
    assert fake_pyxrt.STATE.executed == 6


def test_the_fake_refuses_instructions_on_another_artifacts_context(
    fake: ModuleType, tmp_path: Path
) -> None:
    """The check the call-sequence test leans on can fail: a region's instructions called on a
    kernel of another artifact's context are refused."""
    program = layers(12, distinct=True)
    p = plan(program, "xdna2").check()
    fake_pyxrt.install(p, tmp_path / "kernels")
    with pytest.MonkeyPatch.context() as m:
        m.setenv(xdna_contexts.ALLOW_ENV, "3")
        with _xrt_engine(tmp_path) as engine:
            device = engine.device
            assert isinstance(device, XdnaDevice)
            weights = {k: v for k, v in _inputs(program, 0).items() if k != "x"}
            entry = engine.add_entry(program, engine.load_weights(weights))
            loaded = next(iter(device._loaded.values()))
            r0, r1 = loaded.regions[0], loaded.regions[1]
            loaded.regions[1] = dataclasses.replace(r1, kernel=r0.kernel)
            with pytest.raises(Exception, match="context of their region's artifact"):
                engine.step(entry, {"x": _inputs(program, 1)["x"]})


# -- the NPU ---------------------------------------------------------------------------------


@pytest.mark.xdna
def test_identical_layers_share_a_context_on_the_npu(tmp_path: Path) -> None:
    """Twelve identical layers (three regions, two artifacts) on the NPU, every step verified
    and equal to the oracle's bits: the second artifact's context runs two regions, each with its
    own instruction buffer (the pattern of mlir-aie's add_one_two_txn), within the default of
    two contexts."""
    why = XdnaDevice.probe()
    if why is not None:
        pytest.skip(f"hardware unavailable: {why}")
    with Engine(XdnaDevice(), tmp_path / "blobs", verify="always") as engine:
        _run(engine, layers(12), steps=3)
        assert xdna_contexts.held(NODE) == 2
