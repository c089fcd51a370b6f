"""Random programs on every device, each step checked against the oracle under its plan.

For each device, hypothesis draws programs built only from what the device's target admits (read
from ``TARGETS[target].capabilities``), plans them for that target, and runs every admitted plan
through ``run_program`` (two steps, a module-wide cache directory) with every step checked under
the plan's numerics; a refused plan must carry typed refusals, and a domain refusal at run time
(``DomainError``, ``DomainFlagged``) must name a value the oracle puts outside its domain
(``conformance.outside``). The cpu target admits everything,
so the oracle's device gets ``strategies.programs()`` whole (every primitive, every dtype, NaN
payloads and size-0 axes). An NPU target gets ``_npu_programs``: chains in one float dtype (F32
on xdna2; F16, or F32 that the planner narrows, on intel-npu4) of the admitted pointwise steps,
comparisons, reductions, gathers, matmuls, data movement and ``rmsnorm``, whose inputs stay
inside every step's domain: each value carries an interval, a step whose domain needs a positive
operand gets one (``x * x + 1`` where needed), and no value leaves +-10^4 (FP16 holds 65504, and
the Intel engine refuses more by design). One program in five may also take steps the target
does not admit, so refused plans are drawn too.

Deterministic (``derandomize=True``); each device's budget keeps the module to a few seconds
(xdna-host compiles C for every distinct program). One line per device reports the counts.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np
import pytest
import strategies
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from poot_engine.device import Device
from poot_engine.run import run_program
from poot_ir import Builder, DomainError, DomainFlagged, DType, Prim, Program, Var
from poot_ir.ops import rmsnorm
from poot_npu.registry import DeviceInfo
from poot_planner import TARGETS, Refusal, RefusalKind, plan
from poot_planner.fp16.narrowing import ARITHMETIC
from poot_planner.legalize.rules import RULES

from conformance.devices import DEVICE_PARAMS, Lent, Opened, opened
from conformance.outside import feeds, unjustified

#: Examples per device: small enough for a ~40 s budget on two cores (xdna-host compiles C).
EXAMPLES = {"cpu": 150, "vpu-cpu": 120, "vpu": 120, "xdna-host": 100, "xdna": 100, "host": 100}

_MAG = 1e4  # every drawn value stays within this magnitude
_LEGAL_DRAWN = frozenset({Prim.TANH, Prim.ERF, Prim.ABS, Prim.RECIP, Prim.MIN})
_AWAY = 0.25  # a positive operand (of log, sqrt, recip, a divisor) is at least this


@dataclass(frozen=True, slots=True)
class _Val:
    """A value of the program being drawn, with an interval that holds every element."""

    var: Var
    lo: float
    hi: float

    @property
    def positive(self) -> bool:
        return self.lo >= _AWAY


def _hull(*bounds: tuple[float, float]) -> tuple[float, float]:
    return min(b[0] for b in bounds), max(b[1] for b in bounds)


class _Npu:
    """Draws one program in ``dtype`` from what ``target`` admits on it."""

    def __init__(self, draw: st.DrawFn, target: str, dtype: DType) -> None:
        t = TARGETS[target]
        self.draw, self.dtype = draw, dtype
        narrows = t.narrowing is not None and dtype is DType.F32
        device_dtype = t.narrowing.device_dtype if t.narrowing is not None else dtype

        # the elementwise primitives a legalization rule of the target rewrites are drawn as
        # admitted too, so each rule's bound is checked here on every drawn program
        legal = {r.prim for r in RULES if r.target == target and r.prim in _LEGAL_DRAWN}

        def admitted(p: Prim) -> bool:
            on = device_dtype if narrows and p in ARITHMETIC else dtype
            table = any(c.prim is p and on in c.dtypes for c in t.capabilities)
            return table or (p in legal and dtype.is_float)

        self.admitted = admitted
        # a narrowed F32 program is held to a normwise bound, a design figure for a short,
        # well-conditioned graph: see _NARROWED
        self.narrowed = narrows
        # now and then a program also draws steps the target does not admit (the primitive, a
        # reduction's axis, a step outside a row kernel): its plan must refuse with typed reasons
        self.stray = draw(st.integers(0, 4)) == 0
        self.fused = t.fused_steps  # xdna2 admits these steps only inside rmsnorm
        self.b = Builder("random")
        self.rows = draw(st.integers(1, 4))
        self.cols = draw(st.integers(1, 40))
        self.pool: list[_Val] = []
        self.bools: list[Var] = []
        self.bounds: dict[str, tuple[float, float]] = {}
        self.indices: dict[str, int] = {}  # a gather's index argument: the axis size
        self.args: set[int] = set()  # the float arguments' var ids

    def arg(self, shape: tuple[int, ...], positive: bool = False) -> _Val:
        name = f"a{len(self.bounds) + len(self.indices)}"
        lo, hi = (_AWAY, 4.0) if positive or self.narrowed else (-4.0, 4.0)
        if self.draw(st.booleans()):
            v = self.b.slot(name, self.dtype, shape)
        else:
            v = self.b.weight(name, self.dtype, shape)
        self.bounds[name] = (lo, hi)
        self.args.add(v.id)
        val = _Val(v, lo, hi)
        self.pool.append(val)
        return val

    def pick(self, shape: tuple[int, ...] | None = None, positive: bool = False) -> _Val:
        found = [
            v
            for v in self.pool
            if (shape is None or v.var.shape == shape) and (v.positive or not positive)
        ]
        if found and self.draw(st.integers(0, 3)) > 0:
            return self.draw(st.sampled_from(found))
        if not positive and shape is None:
            shape = (self.rows, self.cols)
        mine = [v for v in self.pool if shape is None or v.var.shape == shape]
        if positive and mine and self.can(Prim.MUL, Prim.ADD) and self.draw(st.booleans()):
            x = self.draw(st.sampled_from(mine))
            m = max(abs(x.lo), abs(x.hi))
            if m * m + 1 <= _MAG:  # x * x + 1 keeps a log or a divisor in its domain
                return self.put(self.b.add(self.b.mul(x.var, x.var), 1.0), 1.0, m * m + 1)
        return self.arg(shape or (self.rows, self.cols), positive)

    def put(self, v: Var, lo: float, hi: float) -> _Val:
        val = _Val(v, lo, hi)
        self.pool.append(val)
        return val

    def can(self, *prims: Prim) -> bool:
        return all(
            (self.stray or (self.admitted(p) and p not in self.fused))
            and not (self.narrowed and p in _NARROWED)
            for p in prims
        )

    # one step: returns False when the drawn step would leave the domains ----------------------

    def unary(self, p: Prim) -> bool:
        if p in (Prim.LOG, Prim.SQRT, Prim.RECIP):
            x = self.pick(positive=True)
            f = {Prim.LOG: math.log, Prim.SQRT: math.sqrt, Prim.RECIP: lambda a: 1 / a}[p]
            lo, hi = sorted((f(x.lo), f(x.hi)))
        else:
            x = self.pick()
            top = 2.0 if self.narrowed else math.log(_MAG)
            if p is Prim.EXP and not (x.lo >= -80 and x.hi <= top):
                return False
            f = {Prim.NEG: lambda a: -a, Prim.EXP: math.exp, Prim.TANH: math.tanh}.get(p, math.erf)
            lo, hi = sorted((f(x.lo), f(x.hi)))
        self.put(getattr(self.b, p.value)(x.var), lo, hi)
        return True

    def binary(self, p: Prim) -> bool:
        x = self.pick()
        if self.draw(st.integers(0, 3)) == 0:  # a literal operand
            c = self.draw(st.sampled_from([0.5, 2.0, 3.0, -1.5]))
            y_var: Var | float = c
            ylo = yhi = c
        else:
            y = self.pick(x.var.shape, positive=p is Prim.DIV)
            y_var, ylo, yhi = y.var, y.lo, y.hi
        if p is Prim.GE:
            self.bools.append(self.b.ge(x.var, y_var))
            return True
        corners: list[float]
        match p:
            case Prim.ADD:
                corners = [x.lo + ylo, x.hi + yhi]
            case Prim.SUB:
                corners = [x.lo - yhi, x.hi - ylo]
            case Prim.MUL:
                corners = [a * b for a in (x.lo, x.hi) for b in (ylo, yhi)]
            case Prim.DIV:
                if not (ylo >= _AWAY or yhi <= -_AWAY):
                    return False
                corners = [a / b for a in (x.lo, x.hi) for b in (ylo, yhi)]
            case _:  # max
                corners = [max(x.lo, ylo), max(x.hi, yhi)]
        lo, hi = min(corners), max(corners)
        if max(abs(lo), abs(hi)) > _MAG:
            return False
        self.put(getattr(self.b, p.value)(x.var, y_var), lo, hi)
        return True

    def reduce(self, p: Prim) -> bool:
        x = self.pick()
        if x.var.type.rank == 0:
            return False
        n = x.var.shape[-1]
        lo, hi = (x.lo, x.hi) if p is Prim.REDUCE_MAX else (n * x.lo, n * x.hi)
        if max(abs(lo), abs(hi)) > _MAG:
            return False
        axis = x.var.type.rank - 1
        if self.stray and self.draw(st.booleans()):
            axis = 0  # not the last axis: xdna2 strides over the resident operand
            n = x.var.shape[0]
            lo, hi = (x.lo, x.hi) if p is Prim.REDUCE_MAX else (n * x.lo, n * x.hi)
            if max(abs(lo), abs(hi)) > _MAG:
                return False
        self.put(getattr(self.b, p.value)(x.var, axes=axis), lo, hi)
        return True

    def gather(self, _: Prim) -> bool:
        size = self.draw(st.integers(1, 6))
        table = self.pick((size, self.cols))
        name = f"a{len(self.bounds) + len(self.indices)}"
        self.indices[name] = size
        idx = self.b.slot(name, DType.I32, (self.rows,))
        self.put(self.b.gather(table.var, idx, axis=0), table.lo, table.hi)
        return True

    def matmul(self, _: Prim) -> bool:
        x = self.pick()
        if x.var.type.rank != 2:
            return False
        k, n = x.var.shape[1], self.draw(st.integers(1, 6))
        w = self.pick((k, n))
        corners = [a * b * k for a in (x.lo, x.hi) for b in (w.lo, w.hi)]
        if max(abs(c) for c in corners) > _MAG:
            return False
        self.put(self.b.matmul(x.var, w.var), min(corners), max(corners))
        return True

    def move(self, p: Prim) -> bool:
        x = self.pick()
        shape = x.var.shape
        if len(shape) != 2:
            return False
        match p:
            case Prim.TRANSPOSE:
                v = self.b.transpose(x.var, (1, 0))
            case Prim.SLICE:
                v = self.b.slice(x.var, (0, 0), shape, (1, self.draw(st.integers(1, 3))))
            case Prim.CONCAT:
                y = self.pick(shape)
                v = self.b.concat([x.var, y.var], axis=0)
                self.put(v, *_hull((x.lo, x.hi), (y.lo, y.hi)))
                return True
            case _:  # reshape
                v = self.b.reshape(x.var, (shape[0] * shape[1],))
        self.put(v, x.lo, x.hi)
        return True

    def rmsnorm(self, _: Prim) -> bool:
        x = self.pick((self.rows, self.cols))
        if self.draw(st.booleans()):
            y = rmsnorm(self.b, x.var)
            bound = math.sqrt(self.cols)
        else:
            w = self.pick((self.rows, self.cols))
            y = rmsnorm(self.b, x.var, w.var)
            bound = math.sqrt(self.cols) * max(abs(w.lo), abs(w.hi))
        self.put(y, -bound, bound)
        return True

    def convert(self, _: Prim) -> bool:
        x = self.pick()
        other = DType.F16 if self.dtype is DType.F32 else DType.F32
        back = self.b.convert(self.b.convert(x.var, other), self.dtype)  # out and back
        self.put(back, x.lo, x.hi)
        return True


#: Left out of narrowed F32 programs (whose inputs are positive, within FP16's normal range):
#: their NarrowStorage bound is normwise relative (above FP16's absolute floor of 2^-24 per
#: element), so it holds only where the graph is well conditioned. A subtraction can cancel, a
#: log near 1 has a small result, a comparison flips on an FP16 rounding. These are limits of a
#: narrowed graph's published class, not of a device: the contract, a measured figure, covers
#: the graphs it was measured on.
_NARROWED = frozenset({Prim.SUB, Prim.LOG, Prim.GE})

_UNARY = (Prim.NEG, Prim.RECIP, Prim.EXP, Prim.LOG, Prim.TANH, Prim.ERF, Prim.SQRT)
_BINARY = (Prim.ADD, Prim.SUB, Prim.MUL, Prim.DIV, Prim.MAX, Prim.GE)
_MOVES = (Prim.TRANSPOSE, Prim.SLICE, Prim.CONCAT, Prim.RESHAPE)


def _menu(g: _Npu) -> list[tuple[str, Callable[[Prim], bool], Prim]]:
    """Every step the target admits in the program's dtype, with its maker."""
    steps: list[tuple[str, Callable[[Prim], bool], Prim]] = []
    steps += [(p.value, g.unary, p) for p in _UNARY if g.can(p)]
    steps += [(p.value, g.binary, p) for p in _BINARY if g.can(p)]
    steps += [(p.value, g.reduce, p) for p in (Prim.REDUCE_SUM, Prim.REDUCE_MAX) if g.can(p)]
    steps += [(p.value, g.move, p) for p in _MOVES if g.can(p)]
    if g.can(Prim.GATHER):
        steps.append(("gather", g.gather, Prim.GATHER))
    if g.can(Prim.MATMUL):
        steps.append(("matmul", g.matmul, Prim.MATMUL))
    if g.can(Prim.CONVERT):
        steps.append(("convert", g.convert, Prim.CONVERT))
    rms = (Prim.MUL, Prim.REDUCE_SUM, Prim.DIV, Prim.ADD, Prim.SQRT, Prim.BROADCAST_IN_DIM)
    if all(g.admitted(p) for p in rms):
        steps.append(("rmsnorm", g.rmsnorm, Prim.MUL))
    return steps


@st.composite
def _npu_programs(draw: st.DrawFn, target: str) -> tuple[Program, list[dict[str, np.ndarray]]]:
    """A program for an NPU target (see the module) and the inputs of two steps."""
    dtypes = sorted(
        {DType.F32, DType.F16}
        & {d for c in TARGETS[target].capabilities for d in c.dtypes if c.prim in ARITHMETIC}
        | ({DType.F32} if TARGETS[target].narrowing is not None else set()),
        key=lambda d: d.value,
    )
    g = _Npu(draw, target, draw(st.sampled_from(dtypes)))
    menu = _menu(g)
    made = 0
    for _ in range(draw(st.integers(1, 5))):
        _, step, prim = draw(st.sampled_from(menu))
        made += step(prim)
    if not made:
        g.unary(Prim.NEG)
    computed = [v.var for v in g.pool if v.var.id not in g.args] + g.bools
    outs = [computed[-1]] + draw(st.lists(st.sampled_from(computed), max_size=1))
    for i, v in enumerate(dict.fromkeys(outs)):
        g.b.output(f"out{i}", v)
    program = g.b.build()
    return program, [_inputs(draw, g, program) for _ in range(2)]


def _inputs(draw: st.DrawFn, g: _Npu, program: Program) -> dict[str, np.ndarray]:
    out: dict[str, np.ndarray] = {}
    width = 16 if g.dtype is DType.F16 else 32
    for a in program.args:
        t = a.var.type
        if a.name in g.indices:
            size = g.indices[a.name]
            elements: st.SearchStrategy[object] = st.integers(-size, size - 1)
            out[a.name] = draw(hnp.arrays(np.int32, t.shape, elements=elements))
            continue
        lo, hi = g.bounds[a.name]
        floats = st.floats(lo, hi, width=width, allow_subnormal=False)
        out[a.name] = draw(hnp.arrays(t.dtype.numpy, t.shape, elements=floats))
    return out


@st.composite
def _cpu_programs(draw: st.DrawFn) -> tuple[Program, list[dict[str, np.ndarray]]]:
    """The oracle's target admits everything: the shared strategy, unrestricted."""
    program = draw(strategies.programs(max_eqns=6))
    return program, [draw(strategies.inputs_for(program)) for _ in range(2)]


@pytest.fixture(scope="module")
def devices(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Opened]:
    yield from opened(tmp_path_factory, "random-programs")


def _check(
    info: DeviceInfo,
    device: Device,
    d: Opened,
    program: Program,
    inputs: list[dict[str, np.ndarray]],
) -> None:
    counts = d.counts[info.name]
    p = plan(program, info.target)
    if not p.admitted:
        untyped = [
            r
            for r in p.refusals
            if not (isinstance(r, Refusal) and isinstance(r.kind, RefusalKind))
        ]
        assert not untyped, f"untyped refusals: {untyped}"
        counts["refused"] += 1
        counts.update(f"refused: {k}" for k in {r.kind.value for r in p.refusals})
        return
    try:
        report = run_program(
            program, Lent(device), info.name, steps=2, inputs=inputs, cache_dir=d.cache_dir
        )
    except (DomainError, DomainFlagged) as err:
        # a drawn input inside each argument's bounds can still make a computed value leave
        # its equation's domain (a product of two tiny values is subnormal): a typed refusal,
        # but only where the oracle's values really leave the domain it names
        why = unjustified(err, p, feeds(program, inputs))
        assert why is None, f"{why}\n{program}"
        counts[f"refused: {type(err).__name__}"] += 1
        return
    for s in report.steps:
        assert s.ok, f"step {s.step} under {p.numerics}: {s.worst}\n{program}"
    counts["admitted"] += 1
    counts["compared"] += sum(c.compared for s in report.steps for _, c in s.results)
    counts.update(f"legalized {rw.primitive}" for rw in p.rewrites)


@pytest.mark.parametrize("info", DEVICE_PARAMS)
def test_random_programs(
    info: DeviceInfo, devices: Opened, capsys: pytest.CaptureFixture[str]
) -> None:
    device = devices.get(info)
    drawn = _cpu_programs() if info.target == "cpu" else _npu_programs(info.target)

    @settings(
        max_examples=EXAMPLES[info.name],
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(drawn)
    def check(case: tuple[Program, list[dict[str, np.ndarray]]]) -> None:
        _check(info, device, devices, *case)

    check()
    counts = devices.counts[info.name]
    with capsys.disabled():
        print(
            f"\nrandom programs on {info.name} ({info.target}): "
            + ", ".join(f"{k} {n}" for k, n in sorted(counts.items()))
        )
    assert counts["admitted"] > 0, f"no drawn program was admitted on {info.name}"
