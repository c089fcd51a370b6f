"""One probe per legalization rule: a small program the rule rewrites, with inputs near zero
(where an approximation's relative error shows, issue 24 item 3) and at the edges of the
target's domain for it (FP16's on intel-npu4: zeros, subnormals, the clamps, 65504's
neighbours; the finite line on xdna2). ``poot acceptance`` runs every probe of a target on the
device; the planner's tests hold the table to the rules (every rule of ``RULES`` is probed, and
each probe's plan applies exactly the rules it names), so a new rule without a probe fails there.

The inputs stay where the source program's own contract is finite: an FP16 device refuses an
F32 input it cannot hold (so nothing here is 65504 or beyond), ``1/x`` keeps ``|x| >= 2^-15``
(its result within FP16), and ``log`` reads positive numbers (``x <= 0`` is flagged in the
graph, a typed refusal that the probe would not measure).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from poot_ir import Builder, DType, Program, Var, ops

from poot_planner.legalize.rules import HOST, INTEL, RULES, XDNA

__all__ = ["NEAR_ZERO", "Probe", "counters", "probes"]

Array = np.ndarray[Any, np.dtype[Any]]
F32 = DType.F32

#: magnitudes from 1e-6 to 1e-1, both signs: where erf and tanh are small (issue 24 item 3)
NEAR_ZERO = np.concatenate([m := np.logspace(-6.0, -1.0, 11), -m]).astype(np.float32)

#: FP16's edges inside its range (every value exactly FP16, stored as F32)
FP16_EDGES = np.array(
    [0.0, -0.0, 2**-24, -(2**-24), 3 * 2**-24, 2**-14, -(2**-14), 2**-10, 0.1, 0.5, 0.75, 1.0,
     -1.0, 1.5, 2.0, 3.99, 4.0, -4.0, 8.99, 9.0, -9.0, 11.0, 100.0, -100.0, 1000.0, 65472.0,
     -65472.0],
    dtype=np.float16,
).astype(np.float32)  # fmt: skip

_BIG = float(np.finfo(np.float32).max)
#: the finite line's normal edges in F32 (its ends, the smallest normals, zeros): xdna2's neg,
#: which its min and abs rules compute through, refuses a subnormal result in the graph
F32_EDGES = np.array(
    [-_BIG, -1e30, -1.0, -1.1754944e-38, -0.0, 0.0, 1.1754944e-38, 1.0, 1e30, _BIG],
    dtype=np.float32,
)

#: where float32's sigmoid saturates (1 from 17.34 on) and the kernel's exp flushes (below
#: -87.34), the rule's clamps (-104, 88) and around them
SIGMOID_EDGES = np.array(
    [-110.0, -104.0, -103.97, -88.0, -87.34, -87.0, -20.0, 16.6, 17.34, 20.0, 87.0, 88.0, 100.0],
    dtype=np.float32,
)


@dataclass(frozen=True, slots=True)
class Probe:
    """``program`` on ``inputs``, planned for ``target``, applies exactly the rules named in
    ``rules``; ``odd``: its output ``y`` has the sign of its input ``x`` (erf, tanh)."""

    target: str
    rules: frozenset[str]
    program: Program
    inputs: Mapping[str, Array]
    odd: bool = False


def _values(*parts: Array) -> Array:
    return np.concatenate(parts).astype(np.float32)


def _pairs(values: Array) -> dict[str, Array]:
    """Every pair of ``values``, and each against its FP16 neighbours below 65504."""
    xs, zs = np.meshgrid(values, values)
    v16 = values.astype(np.float16)
    with np.errstate(over="ignore"):
        up = np.nextafter(v16, np.float16(np.inf)).astype(np.float32)
        down = np.nextafter(v16, np.float16(-np.inf)).astype(np.float32)
    x = np.concatenate([xs.ravel(), values, values])
    z = np.concatenate([zs.ravel(), up, down])
    keep = (np.abs(x) < 65504) & (np.abs(z) < 65504)
    return {"x": x[keep], "z": z[keep]}


def _unary(
    name: str, op: Callable[[Builder, Var], Var], x: Array
) -> tuple[Program, dict[str, Array]]:
    b = Builder(f"probe_{name}")
    b.output("y", op(b, b.slot("x", F32, (x.size,))))
    return b.build(), {"x": x}


def _binary(
    name: str, op: Callable[[Builder, Var, Var], Var], pairs: dict[str, Array]
) -> tuple[Program, dict[str, Array]]:
    b = Builder(f"probe_{name}")
    n = pairs["x"].size
    b.output("y", op(b, b.slot("x", F32, (n,)), b.slot("z", F32, (n,))))
    return b.build(), pairs


def _comparisons(pairs: dict[str, Array]) -> tuple[Program, dict[str, Array]]:
    """A select on a gt mask, the mask as 0/1, and a predicate compared with ``True``."""
    b = Builder("probe_comparisons")
    n = pairs["x"].size
    x, z = b.slot("x", F32, (n,)), b.slot("z", F32, (n,))
    b.output("y", b.select(b.gt(x, z), x, z))
    b.output("m", b.convert(b.gt(z, x), F32))
    b.output("p", b.eq(b.ge(x, z), True))
    return b.build(), pairs


def counters(n: int) -> Program:
    """A causal mask and a position ramp from counters, as a decoder's graph builds them, and
    the mask scaled past FP16 and added (a mask read only additively): ``x`` is ``[n, n]``."""
    b = Builder("probe_counters")
    x = b.slot("x", F32, (n, n))
    i, j = b.iota((n, n), DType.I32, 0), b.iota((n, n), DType.I32, 1)
    b.output("ge", b.select(b.ge(i, j), x, -1e4))
    b.output("gt", b.gt(i, j))
    b.output("eq", b.eq(i, b.literal(3, DType.I32)))
    b.output("pos", b.mul(b.convert(j, F32), x))
    b.output("y", b.add(x, b.mul(b.convert(b.gt(j, i), F32), -1e9)))
    return b.build()


def _counters(n: int) -> tuple[Program, dict[str, Array]]:
    rng = np.random.default_rng(n)
    sample = rng.normal(0, 2, (n, n)).astype(np.float16).astype(np.float32)
    sample.reshape(-1)[: NEAR_ZERO.size] = NEAR_ZERO
    return counters(n), {"x": sample}


def _mean(x: Array) -> tuple[Program, dict[str, Array]]:
    """``x + sum(x) / 8``: the sum's power-of-two scale moved into it."""
    b = Builder("probe_mean")
    v = b.slot("x", F32, (x.size,))
    mean = b.broadcast_in_dim(b.mul(b.reduce_sum(v, 0), 0.125), (x.size,), ())
    b.output("y", b.add(v, mean))
    return b.build(), {"x": x}


def _intel() -> tuple[Probe, ...]:
    small = _values(NEAR_ZERO, FP16_EDGES)
    positive = small[small > 0]
    pairs = _pairs(_values(FP16_EDGES, NEAR_ZERO[::4]))
    recip = small[np.abs(small) >= 2**-15]
    softplus = small[small <= 11.0]  # exp past 11.09 overflows FP16: flagged, not measured
    probe = _probe_maker(INTEL)
    counters = _counters(33)
    return (
        probe({"tanh by a series near zero and exp"}, *_unary("tanh", Builder.tanh, small), odd=True),
        probe({"erf by a series near zero and Abramowitz-Stegun 7.1.26"},
              *_unary("erf", Builder.erf, small), odd=True),
        probe({"softplus as ONNX writes it, stably"},
              *_unary("softplus", lambda b, x: b.log(b.add(b.exp(x), 1.0)), softplus)),
        probe({"log by exact range reduction"}, *_unary("log", Builder.log, positive)),
        probe({"recip as a division"}, *_unary("recip", Builder.recip, recip)),
        probe({"abs via max"}, *_unary("abs", Builder.abs, small)),
        probe({"min via max"}, *_binary("min", Builder.min, pairs)),
        probe({"eq via ge"}, *_binary("eq", Builder.eq, pairs)),
        probe({"gt via ge"}, *_binary("gt", Builder.gt, pairs)),
        probe({"gt via ge", "select on a comparison's mask", "a comparison's predicate to float",
               "a comparison's predicate against a literal"}, *_comparisons(pairs)),
        probe({"a counter to float", "mask scale saturates", "integer ge of counters",
               "integer gt of counters", "integer eq of counters", "select on a comparison's mask",
               "a comparison's predicate to float"}, *counters),
        probe({"power-of-two scale into the sum"}, *_mean(_values(NEAR_ZERO, FP16_EDGES[:-2]))),
        *_channels_last_probes(probe, small[np.abs(small) <= 1000.0], small),
    )  # fmt: skip


def _host() -> tuple[Probe, ...]:
    line = _values(NEAR_ZERO, F32_EDGES)
    return _channels_last_probes(_probe_maker(HOST), line[np.abs(line) <= 1e30], line)


def _channels_last_probes(
    probe: Callable[..., Probe], summed: Array, maxed: Array
) -> tuple[Probe, ...]:
    """The graph targets' pools of a channels-last value: the line as ``[1, n, 1]`` (N, W, C),
    a 3-wide window at stride 2 padded by one over W. A sum's values kept small enough that
    three of them stay in range (FP16's on intel-npu4: an overflow there is refused, typed)."""
    name = "a channels-last window, transposed to channels-first"

    def channels_last(reduce: Callable[..., Var]) -> Callable[[Builder, Var], Var]:
        def pooled(b: Builder, x: Var) -> Var:
            nwc = b.reshape(x, (1, x.type.shape[0], 1))
            return reduce(b, nwc, (1, 3, 1), (1, 2, 1), ((0, 0), (1, 1), (0, 0)))

        return pooled

    return (
        probe({name}, *_unary("nwc_sum", channels_last(Builder.reduce_window_sum), summed)),
        probe({name}, *_unary("nwc_max", channels_last(Builder.reduce_window_max), maxed)),
    )


def _xdna2() -> tuple[Probe, ...]:
    line = _values(NEAR_ZERO, F32_EDGES, SIGMOID_EDGES)
    probe = _probe_maker(XDNA)
    return (
        probe(
            {"sigmoid's select through exp and div", "abs via max"},
            *_unary("sigmoid", ops.sigmoid, line),
        ),
        probe({"abs via max"}, *_unary("abs", Builder.abs, line)),
        probe({"min via max"}, *_binary("min", Builder.min, {"x": line, "z": line[::-1].copy()})),
        probe(
            {"a NaN guard on a value the device proves not NaN"},
            *_unary("nan_guard", _nan_guard, line),
        ),
        probe({"a convolution as a matmul of its windows"}, *_convolution(line)),
        probe(
            {"a window sum as a sum of its windows"},
            *_unary("window_sum", _pooled(Builder.reduce_window_sum), line[np.abs(line) <= 1e30]),
        ),
        probe(
            {"a window maximum as a maximum of its windows"},
            *_unary("window_max", _pooled(Builder.reduce_window_max), line),
        ),
    )


def _pooled(reduce: Callable[..., Var]) -> Callable[[Builder, Var], Var]:
    """A 3-wide window at stride 2 over the line, padded by one on each side (the padding's
    zeros, or the edge element standing in for -inf, in the end windows). A sum up to 1e30:
    three terms near F32's largest value may overflow, where nothing is promised."""

    def pooled(b: Builder, x: Var) -> Var:
        return reduce(b, x, (3,), (2,), ((1, 1),))

    return pooled


def _convolution(line: Array) -> tuple[Program, dict[str, Array]]:
    """A 3-tap convolution of two channels (the line and bf16's subnormals, and their reverse)
    into three, padded by one on each side (so the end taps read the padding's zeros), by a
    kernel of mixed signs and scales, so each output sums terms that cancel. Up to 1e30: a
    sum of terms near F32's largest value may overflow, where nothing is promised, and bf16
    rounds F32's largest value itself to infinity (outside the domain)."""
    line = _values(line[np.abs(line) <= 1e30], np.array([9.2e-41, -9.2e-41, 1e-40]))
    b = Builder("probe_conv")
    x, w = b.slot("x", F32, (1, 2, line.size)), b.slot("w", F32, (3, 2, 3))
    b.output("y", b.conv(x, w, padding=((1, 1),)))
    taps = np.array([[1.0, -1.0], [0.5, 2.0], [1e-3, 1.0]], np.float32)
    kernel = np.stack([taps, -0.25 * taps, taps[::-1]], axis=-1)  # [3, 2, 3]: o, c, tap
    return b.build(), {"x": np.stack([line, line[::-1]])[None].copy(), "w": kernel}


def _nan_guard(b: Builder, x: Var) -> Var:
    """torch's NaN guard after a softmax, ``select((x == x) == False, 0, x)``, on ``x * 1``: the
    guarded value made on the device (an argument's NaN is refused on the host first)."""
    y = b.mul(x, 1.0)
    isnan = b.eq(b.eq(y, y), b.literal(False, DType.BOOL))
    return b.select(isnan, b.literal(0.0, DType.F32), y)


def _probe_maker(target: str) -> Callable[..., Probe]:
    def make(
        rules: set[str], program: Program, inputs: dict[str, Array], odd: bool = False
    ) -> Probe:
        return Probe(target, frozenset(rules), program, inputs, odd)

    return make


def probes(target: str) -> tuple[Probe, ...]:
    """Every probe of ``target``'s rules (none for a target without rules)."""
    if not any(r.target == target for r in RULES):
        return ()
    return {INTEL: _intel, XDNA: _xdna2, HOST: _host}[target]()
