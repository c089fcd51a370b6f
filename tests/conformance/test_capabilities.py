"""One conformance suite, generated from the target tables, run on every device.

For every capability row of a device's target (a primitive on a dtype, with its contract and
domain), a one-equation program is built, fed inputs drawn from the contract's domain (reaching
its edges), run through the ordinary pipeline (plan, codegen, engine, device) and compared with
the oracle under that row's contract. Adding a row to a target adds its test here; a hardware
device runs the same cases under its marker, and skips with "hardware unavailable" where it is
absent.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from poot_engine import Engine
from poot_ir import (
    Builder,
    DomainError,
    DomainFlagged,
    DType,
    NarrowStorage,
    Prim,
    Program,
    ReduceParams,
    Storage,
    compare,
    evaluate,
)
from poot_planner import TARGETS, AxisRule, Capability, KernelClass, plan

from conformance.devices import DEVICE_PARAMS, open_device
from conformance.domains import sample_domain

_SHAPE = (4, 33)


#: a row's second program (``_variants``): a reduction over a leading axis and the last at once
#: (of a (3, 5, 16) operand), or a transposed convolution (input dilation)
_LEADING_AXES = "axes02"
_TRANSPOSED = "transposed"
#: a window reduction of a channels-last value (Flax pools NHWC)
_CHANNELS_LAST = "nhwc"


def _program(cap: Capability, dtype: DType, variant: str = "") -> Program | None:
    """A one-equation program exercising ``cap`` on ``dtype`` (None: not a one-liner), or its
    ``variant``."""
    b = Builder(f"{cap.prim.value}_{dtype.value}")
    p = cap.prim
    if p.is_unary:
        x = b.slot("x", dtype, _SHAPE)
        out = getattr(b, p.value)(x)
    elif p.is_binary:
        x, y = b.slot("x", dtype, _SHAPE), b.slot("y", dtype, _SHAPE)
        out = getattr(b, p.value)(x, y)
    elif p in (Prim.REDUCE_SUM, Prim.REDUCE_MAX):
        if variant == _LEADING_AXES:
            out = getattr(b, p.value)(b.slot("x", dtype, (3, 5, 16)), axes=(0, 2))
        else:
            out = getattr(b, p.value)(b.slot("x", dtype, (5, 48)), axes=1)
    elif p is Prim.GATHER:
        t = b.weight("table", dtype, (7, 5))
        idx = b.slot("idx", DType.I32, (9,))
        out = b.gather(t, idx, axis=0)
    elif p is Prim.MATMUL:
        out = b.matmul(b.slot("a", dtype, (3, 8)), b.slot("c", dtype, (8, 5)))
    elif p is Prim.CONV and variant == _TRANSPOSED:
        # ONNX's ConvTranspose as the importer writes it: input dilation 2, grouped, the
        # kernel dilated, low pads up to the kernel's reach, a high pad past it
        x, w = b.slot("x", dtype, (2, 4, 5, 6)), b.weight("w", dtype, (6, 2, 3, 2))
        out = b.conv(x, w, None, [(2, 1), (1, 3)], (2, 2), (1, 2), 2)
    elif p is Prim.CONV:  # grouped, strided, padded and dilated at once
        x, w = b.slot("x", dtype, (2, 4, 7, 6)), b.weight("w", dtype, (6, 2, 3, 2))
        out = b.conv(x, w, (2, 1), [(1, 2), (0, 1)], None, (1, 2), 2)
    elif p in (Prim.REDUCE_WINDOW_SUM, Prim.REDUCE_WINDOW_MAX) and variant == _CHANNELS_LAST:
        window, strides = (1, 3, 2, 1), (1, 2, 2, 1)
        pads = [(0, 0), (1, 1), (0, 1), (0, 0)]
        out = getattr(b, p.value)(b.slot("x", dtype, (2, 7, 6, 3)), window, strides, pads)
    elif p in (Prim.REDUCE_WINDOW_SUM, Prim.REDUCE_WINDOW_MAX):
        window, strides = (1, 1, 3, 2), (1, 1, 2, 2)
        pads = [(0, 0), (0, 0), (1, 1), (0, 1)]
        out = getattr(b, p.value)(b.slot("x", dtype, (2, 3, 7, 6)), window, strides, pads)
    elif p is Prim.TRANSPOSE:
        out = b.transpose(b.slot("x", dtype, (2, 3, 4)), (2, 0, 1))
    elif p is Prim.RESHAPE:
        out = b.reshape(b.slot("x", dtype, (4, 6)), (3, 8))
    elif p is Prim.BROADCAST_IN_DIM:
        out = b.broadcast_in_dim(b.slot("x", dtype, (5,)), (3, 5), (1,))
    elif p is Prim.SLICE:
        out = b.slice(b.slot("x", dtype, (6, 7)), (1, 0), (6, 7), (2, 3))
    elif p is Prim.CONCAT:
        out = b.concat([b.slot("x", dtype, (2, 3)), b.slot("y", dtype, (4, 3))], axis=0)
    elif p is Prim.DYNAMIC_UPDATE_SLICE:
        start = b.slot("start", DType.I32, ())
        cache = b.state("cache", dtype, (6, 4))
        out = b.dynamic_update_slice(cache, b.slot("u", dtype, (2, 4)), [start, 0])
        b.update(cache, out)  # the cache carries over
        return b.build()
    elif p is Prim.IOTA:
        out = b.iota((3, 4), dtype, axis=1)
    elif p is Prim.SELECT:
        pred = b.slot("p", DType.BOOL, _SHAPE)
        out = b.select(pred, b.slot("x", dtype, _SHAPE), b.slot("y", dtype, _SHAPE))
    elif p is Prim.CONVERT:
        dst = next(d for d in cap.dtypes if d is not dtype)
        out = b.convert(b.slot("x", dtype, _SHAPE), dst)
    else:
        return None
    b.output("y", out)
    return b.build()


def _variants(target: str, cap: Capability) -> list[str]:
    """The programs a row runs: its own, and a second where the row admits more than it shows.
    A reduction over any axes runs over a leading one too, on a device that does not narrow (a
    narrowing one refuses at run time a sum of edge values past FP16's range, which is not the
    row's to answer; its last-axis case covers the row); a graph op's convolution runs
    transposed too (``(Group)ConvolutionBackpropData-1``: ``poot_planner.admission``); a window
    reduction runs over a channels-last value too."""
    if cap.prim in (Prim.REDUCE_SUM, Prim.REDUCE_MAX) and cap.axes is AxisRule.ANY:
        return ["", _LEADING_AXES] if TARGETS[target].narrowing is None else [""]
    if cap.prim is Prim.CONV and cap.kernel is KernelClass.GRAPH_OP:
        return ["", _TRANSPOSED]
    if cap.prim in (Prim.REDUCE_WINDOW_SUM, Prim.REDUCE_WINDOW_MAX):
        return ["", _CHANNELS_LAST]  # intel-npu4's pools window NCHW: legalized by a transpose
    return [""]


def _cases() -> list[object]:
    cases = []
    for dev in DEVICE_PARAMS:
        info = dev.values[0]
        for cap in TARGETS[info.target].capabilities:
            for dtype in sorted(cap.dtypes, key=lambda d: d.value):
                for variant in _variants(info.target, cap):
                    tail = f"-{variant}" if variant else ""
                    cases.append(
                        pytest.param(
                            info,
                            cap,
                            dtype,
                            variant,
                            id=f"{info.name}-{cap.prim.value}-{dtype.value}{tail}",
                            marks=dev.marks,
                        )
                    )
    return cases


def _inside_only(
    cap: Capability, program: Program, feed: dict[str, np.ndarray], slots: dict[str, np.ndarray]
) -> dict[str, np.ndarray] | None:
    """``slots`` with every element whose result is outside the domain replaced by 1 (the
    elements reduced into it, for a reduction), or None when every element is inside."""
    want = evaluate(program, feed)
    (name,) = want
    eqn = program.eqns[-1]
    ops = [feed[a.name] for a in program.args if a.var in eqn.inputs]
    mask = np.asarray(cap.contract.domain.inside(ops, want[name]))
    if mask.all():
        return None
    if isinstance(eqn.params, ReduceParams):  # the reduced axes back, as units
        mask = np.expand_dims(mask, eqn.params.axes)
    out = {}
    for n, v in slots.items():
        m = (
            mask
            if v.shape == mask.shape
            else mask.reshape(*mask.shape, *([1] * (v.ndim - mask.ndim)))
        )
        out[n] = np.where(m, v, v.dtype.type(1)) if v.dtype.kind == "f" else v
    return out


@pytest.mark.parametrize(("info", "cap", "dtype", "variant"), _cases())
def test_capability(
    info: object, cap: Capability, dtype: DType, variant: str, tmp_path: Path
) -> None:
    program = _program(cap, dtype, variant)
    if program is None:
        pytest.fail(f"{cap.prim.value} has no one-equation conformance program: add one")
    device = open_device(info)
    p = plan(program, device.target)
    assert p.admitted, (
        f"the table admits {cap.prim.value} on {dtype.value}, the plan refuses: {p.refusals}"
    )
    rng = np.random.default_rng(7)
    narrowing = TARGETS[device.target].narrowing
    limit = None if narrowing is None else narrowing.max_magnitude
    args = {a.name: a for a in program.args}
    engine = Engine(device, cache_dir=tmp_path)
    try:
        first = {n: sample_domain(cap, a.var.type, rng, program, n, limit) for n, a in args.items()}
        weights = {n: v for n, v in first.items() if args[n].storage is Storage.WEIGHT}
        states = {n: v for n, v in first.items() if args[n].storage is Storage.STATE}
        entry = engine.add_entry(program, engine.load_weights(weights), initial_state=states)
        for step in range(2):  # the first step records, the second replays new inputs
            slots = {
                n: sample_domain(cap, a.var.type, rng, program, n, limit)
                for n, a in args.items()
                if a.storage is Storage.SLOT
            }
            try:
                got = engine.step(entry, slots)
            except (DomainError, DomainFlagged):
                # a sample reaching past the domain is refused (nothing is promised there):
                # only when it really does; the step then runs on the elements inside
                inside = _inside_only(cap, program, {**weights, **states, **slots}, slots)
                assert inside is not None, "refused inputs that are inside the domain"
                slots = inside
                got = engine.step(entry, slots)
            feed = {**weights, **states, **slots}
            # a narrowed program (F32 carried as FP16) is held to the row's contract on what
            # the device runs, and to the published NarrowStorage against the F32 oracle
            want = evaluate(p.program, feed)
            operands = [feed[a.name] for a in program.args if a.var in program.eqns[-1].inputs]
            (name,) = want  # one result: the output, or the updated state
            cmp = cap.contract.check(got[name], want[name], operands, program.eqns[-1])
            assert cmp.ok, f"step {step}: {cmp}"
            assert cmp.compared > 0, "nothing inside the domain was compared"
            if isinstance(p.numerics, NarrowStorage):
                wide = compare(got[name], evaluate(program, feed)[name], p.numerics.bound)
                assert wide.ok, f"step {step}, against the F32 oracle: {wide}"
            states = {n: got[n] for n in states}
    finally:
        engine.close()
        device.close()
