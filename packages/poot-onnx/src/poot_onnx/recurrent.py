"""ONNX lowering rules for the recurrent layers ``LSTM``, ``GRU`` and ``RNN``, unrolled over their
static sequence.

The input projection of every step is one matrix product over the whole sequence (``X W^T``,
the sequence and batch flattened); each step then adds its recurrent product ``H R^T`` and
applies the gates, following the equations of the ONNX operator specification (the same as
onnx's reference evaluator, ``onnx/reference/ops/op_lstm.py``, ``op_gru.py``, ``op_rnn.py``):

- LSTM, gates ``i o f c``: ``i = f(.. + P_i C)``, ``f = f(.. + P_f C)``, ``c~ = g(..)``,
  ``C' = f C + i c~``, ``o = f(.. + P_o C')``, ``H' = o h(C')``; ``input_forget`` couples
  ``f = 1 - i``.
- GRU, gates ``z r h``: ``h~ = g(X W_h + (r H) R_h + Rb_h + Wb_h)``, or with
  ``linear_before_reset`` ``g(X W_h + r (H R_h + Rb_h) + Wb_h)``; ``H' = (1 - z) h~ + z H``.
- RNN: ``H' = f(X W + H R + Wb + Rb)``.

``clip`` bounds every gate's input to its activation. ``sequence_lens`` must be known at import
and equal the sequence length for every batch entry (shorter sequences are refused: the masking
they need is not built). Without ``initial_h`` (``initial_c``) the first step's recurrent terms
are zero and are left out, which is exact.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np
from poot_ir.builder import Builder
from poot_ir.core import Var
from poot_ir.ops import sigmoid

from poot_onnx.context import FLOATS, Lowering, LoweringRule, Node, check_dtype, check_unrolled

__all__ = ["RULES"]

Act = Callable[[Var], Var]

#: Activation name -> (how many of activation_alpha / activation_beta it reads, defaults).
_PARAMS: Mapping[str, tuple[float, ...]] = {
    "Sigmoid": (),
    "Tanh": (),
    "Relu": (),
    "Softsign": (),
    "Softplus": (),
    "Affine": (1.0, 0.0),
    "LeakyRelu": (0.01,),
    "ThresholdedRelu": (1.0,),
    "ScaledTanh": (1.0, 1.0),
    "HardSigmoid": (0.2, 0.5),
    "Elu": (1.0,),
}


def _activation(b: Builder, name: str, p: Sequence[float]) -> Act:
    match name:
        case "Sigmoid":
            return lambda x: sigmoid(b, x)
        case "Tanh":
            return b.tanh
        case "Relu":
            return lambda x: b.max(x, 0.0)
        case "Softsign":
            return lambda x: b.div(x, b.add(b.abs(x), 1.0))
        case "Softplus":
            # max(x, 0) + log(1 + e^-|x|): no exp of a large x
            return lambda x: b.add(b.max(x, 0.0), b.log(b.add(b.exp(b.neg(b.abs(x))), 1.0)))
        case "Affine":
            return lambda x: b.add(b.mul(x, p[0]), p[1])
        case "LeakyRelu":
            return lambda x: b.select(b.ge(x, 0.0), x, b.mul(x, p[0]))
        case "ThresholdedRelu":
            return lambda x: b.select(b.gt(x, p[0]), x, 0.0)
        case "ScaledTanh":
            return lambda x: b.mul(b.tanh(b.mul(x, p[1])), p[0])
        case "HardSigmoid":
            return lambda x: b.max(b.min(b.add(b.mul(x, p[0]), p[1]), 1.0), 0.0)
        case "Elu":
            # exp of min(x, 0) only: the branch not taken cannot overflow
            return lambda x: b.select(
                b.ge(x, 0.0), x, b.mul(b.sub(b.exp(b.min(x, 0.0)), 1.0), p[0])
            )
    raise AssertionError(name)  # _activations checked the name


def _activations(lo: Lowering, defaults: Sequence[str], dirs: int) -> list[list[Act]]:
    """The activations of each direction: the ``activations`` attribute (one list per
    direction, in order), each taking its parameters from ``activation_alpha`` /
    ``activation_beta`` in order, else its defaults."""
    names = lo.attr("activations")
    if names is None:
        names = tuple(defaults) * dirs
    if not isinstance(names, tuple) or not all(isinstance(s, str) for s in names):
        raise lo.fail("attribute", f"activations must be a list of names, got {names!r}")
    if len(names) != len(defaults) * dirs:
        raise lo.fail(
            "attribute", f"{len(names)} activations; this node takes {len(defaults) * dirs}"
        )
    alphas = list(_floats(lo, "activation_alpha"))
    betas = list(_floats(lo, "activation_beta"))
    acts: list[Act] = []
    for name in names:
        key = next((k for k in _PARAMS if k.lower() == str(name).lower()), None)
        if key is None:
            raise lo.fail("attribute", f"activation {name!r} is not an ONNX RNN activation")
        params = list(_PARAMS[key])
        if params:
            params[0] = alphas.pop(0) if alphas else params[0]
        if len(params) > 1:
            params[1] = betas.pop(0) if betas else params[1]
        acts.append(_activation(lo.b, key, params))
    k = len(defaults)
    return [acts[d * k : (d + 1) * k] for d in range(dirs)]


def _floats(lo: Lowering, name: str) -> tuple[float, ...]:
    v = lo.attr(name)
    if v is None:
        return ()
    if isinstance(v, float | int):
        return (float(v),)
    if not isinstance(v, tuple) or not all(isinstance(x, float | int) for x in v):
        raise lo.fail("attribute", f"{name!r} must be a list of floats, got {v!r}")
    return tuple(float(x) for x in v)


class _Cell:
    """What every recurrent op shares: its inputs, laid out as ``[seq, batch, ...]``, per
    direction, and how its outputs are assembled."""

    def __init__(self, lo: Lowering, gates: int) -> None:
        self.lo = lo
        b = self.b = lo.b
        self.ys: list[list[Var]] = []  # each direction's per-step H, in sequence order
        self.finals: list[tuple[Var, ...]] = []  # each direction's last H (and C)
        direction = lo.attr("direction") or "forward"
        if direction not in ("forward", "reverse", "bidirectional"):
            raise lo.fail("attribute", f"direction {direction!r}")
        self.direction = str(direction)
        self.dirs = 2 if direction == "bidirectional" else 1
        self.layout = lo.attr_int("layout", 0)
        if self.layout not in (0, 1):
            raise lo.fail("attribute", f"layout {self.layout}")
        x = lo.var(0)
        check_dtype(lo, x, FLOATS, "X")
        if x.type.rank != 3:
            raise lo.fail("model", f"X must have rank 3, got {x.type}")
        self.x = b.transpose(x, (1, 0, 2)) if self.layout else x
        self.seq, self.batch, self.input = self.x.shape
        check_unrolled(lo, "sequence length", self.seq)
        self.hidden = lo.attr_int("hidden_size", 0)
        w, r = lo.var(1), lo.var(2)
        if self.hidden <= 0:
            self.hidden = r.shape[-1] if r.type.rank == 3 else 0
        h, g = self.hidden, gates
        for name, v, want in (
            ("W", w, (self.dirs, g * h, self.input)),
            ("R", r, (self.dirs, g * h, h)),
        ):
            if v.shape != want or v.dtype is not x.dtype:
                raise lo.fail("model", f"{name} is {v.type}, expected {want} of {x.dtype.value}")
        self.w, self.r = w, r
        self.clip = lo.attr_float("clip", 0.0) if lo.attr("clip") is not None else None
        if self.clip is not None and not self.clip > 0:
            raise lo.fail("attribute", f"clip {self.clip} must be positive")
        if lo.has(4):
            lens = lo.const(4, "sequence_lens")
            if lens.shape != (self.batch,) or np.any(lens != self.seq):
                raise lo.fail(
                    "value",
                    f"sequence_lens {lens.reshape(-1).tolist()}: poot unrolls only sequences "
                    f"of the full length {self.seq}",
                )

    def direction_param(self, v: Var, d: int) -> Var:
        """Direction ``d``'s slice of a ``[dirs, ...]`` parameter, without that axis."""
        b = self.b
        one = b.slice(v, (d, *(0,) * (v.type.rank - 1)), (d + 1, *v.shape[1:]))
        return b.reshape(one, v.shape[1:])

    def state(self, i: int, d: int) -> Var | None:
        """Input ``i`` (an initial state, ``[dirs, batch, hidden]``, or batch-first with
        ``layout``) for direction ``d``, or None when omitted."""
        if not self.lo.has(i):
            return None
        v = self.lo.var(i)
        if self.layout:
            v = self.b.transpose(v, (1, 0, 2))
        want = (self.dirs, self.batch, self.hidden)
        if v.shape != want:
            raise self.lo.fail("model", f"input {i} is {v.type}, expected {want}")
        return self.direction_param(v, d)

    def bias(self, i: int, width: int, d: int) -> Var | None:
        """Input ``i`` (``[dirs, width]``) for direction ``d``, or None when omitted."""
        if not self.lo.has(i):
            return None
        v = self.lo.var(i)
        if v.shape != (self.dirs, width):
            raise self.lo.fail("model", f"input {i} is {v.type}, expected {(self.dirs, width)}")
        return self.direction_param(v, d)

    def projected(self, d: int, bias: Var | None) -> Var:
        """``X W^T (+ bias)`` for every step of direction ``d``: ``[seq, batch, gates*h]``."""
        b = self.b
        wt = b.transpose(self.direction_param(self.w, d), (1, 0))
        flat = b.reshape(self.x, (self.seq * self.batch, self.input))
        y = b.matmul(flat, wt)
        if bias is not None:
            y = b.add(y, b.broadcast_in_dim(bias, y.shape, (1,)))
        return b.reshape(y, (self.seq, self.batch, wt.shape[1]))

    def recurrent(self, d: int) -> Var:
        """``R^T`` of direction ``d``: ``[hidden, gates*h]``."""
        return self.b.transpose(self.direction_param(self.r, d), (1, 0))

    def step_input(self, xw: Var, t: int) -> Var:
        b = self.b
        width = xw.shape[2]
        return b.reshape(b.slice(xw, (t, 0, 0), (t + 1, self.batch, width)), (self.batch, width))

    def gate(self, v: Var, k: int) -> Var:
        """Gate ``k`` of a ``[batch, gates*h]`` value."""
        h = self.hidden
        return self.b.slice(v, (0, k * h), (self.batch, (k + 1) * h))

    def clipped(self, v: Var) -> Var:
        if self.clip is None:
            return v
        return self.b.max(self.b.min(v, self.clip), -self.clip)

    def vec(self, v: Var) -> Var:
        """A ``[width]`` parameter broadcast over the batch."""
        return self.b.broadcast_in_dim(v, (self.batch, v.shape[0]), (1,))

    def order(self, d: int) -> list[int]:
        forward = self.direction == "forward" or (self.direction == "bidirectional" and d == 0)
        return list(range(self.seq)) if forward else list(range(self.seq - 1, -1, -1))

    def finish(self, d: int, steps: list[Var], *finals: Var | None) -> None:
        """Record direction ``d``'s run: its per-step ``H`` in the order it ran (``order``) and
        its last states (``H``, then ``C``), which are None only when no step ran."""
        if any(v is None for v in finals):
            raise self.lo.fail("model", "a sequence of length 0")
        self.ys.append(steps if self.order(d)[:1] == [0] else steps[::-1])
        self.finals.append(tuple(v for v in finals if v is not None))

    def emit(self) -> None:
        """Set the outputs: ``Y`` from each direction's per-step ``H`` (in sequence order), and
        the last states of every direction as ``Y_h``, ``Y_c`` (``finish``)."""
        b, lo = self.b, self.lo
        h, n = self.hidden, self.batch
        ys, finals = self.ys, list(zip(*self.finals, strict=True))
        if lo.wants(0):
            per_dir = [
                b.concat([b.reshape(y, (1, 1, n, h)) for y in steps], 0) if self.seq else None
                for steps in ys
            ]
            if any(p is None for p in per_dir):
                raise lo.fail("model", "a sequence of length 0")
            y = b.concat([p for p in per_dir if p is not None], 1)
            lo.set(0, b.transpose(y, (2, 0, 1, 3)) if self.layout else y)
        for k, vals in enumerate(finals, start=1):
            if not lo.wants(k):
                continue
            out = b.concat([b.reshape(v, (1, n, h)) for v in vals], 0)
            lo.set(k, b.transpose(out, (1, 0, 2)) if self.layout else out)


def _add(b: Builder, a: Var, v: Var | None) -> Var:
    return a if v is None else b.add(a, v)


def _lstm(lo: Lowering, n: Node) -> None:
    c = _Cell(lo, 4)
    b, hsz = c.b, c.hidden
    acts = _activations(lo, ("Sigmoid", "Tanh", "Tanh"), c.dirs)
    coupled = lo.attr_int("input_forget", 0) != 0
    for d in range(c.dirs):
        f, g, hact = acts[d]
        bias = c.bias(3, 8 * hsz, d)
        wb = None
        if bias is not None:
            wb = b.add(b.slice(bias, (0,), (4 * hsz,)), b.slice(bias, (4 * hsz,), (8 * hsz,)))
        xw = c.projected(d, wb)
        rt = c.recurrent(d)
        peep = c.bias(7, 3 * hsz, d)
        pi, po, pf = (
            [c.vec(b.slice(peep, (k * hsz,), ((k + 1) * hsz,))) for k in range(3)]
            if peep is not None
            else (None, None, None)
        )
        h_t, c_t = c.state(5, d), c.state(6, d)
        steps: list[Var] = []
        for t in c.order(d):
            gates = c.step_input(xw, t)
            if h_t is not None:
                gates = b.add(gates, b.matmul(h_t, rt))
            gi, go, gf, gc = (c.gate(gates, k) for k in range(4))
            if c_t is not None and pi is not None and pf is not None:
                gi, gf = b.add(gi, b.mul(pi, c_t)), b.add(gf, b.mul(pf, c_t))
            i = f(c.clipped(gi))
            fg = b.sub(1.0, i) if coupled else f(c.clipped(gf))
            cell = b.mul(i, g(c.clipped(gc)))
            c_new = cell if c_t is None else b.add(b.mul(fg, c_t), cell)
            if po is not None:
                go = b.add(go, b.mul(po, c_new))
            o = f(c.clipped(go))
            h_t, c_t = b.mul(o, hact(c_new)), c_new
            steps.append(h_t)
        c.finish(d, steps, h_t, c_t)
    c.emit()


def _gru(lo: Lowering, n: Node) -> None:
    c = _Cell(lo, 3)
    b, hsz = c.b, c.hidden
    acts = _activations(lo, ("Sigmoid", "Tanh"), c.dirs)
    before = lo.attr_int("linear_before_reset", 0) != 0
    for d in range(c.dirs):
        f, g = acts[d]
        bias = c.bias(3, 6 * hsz, d)
        wb = rb_h = None
        if bias is not None:
            wbias = b.slice(bias, (0,), (3 * hsz,))
            rbias = b.slice(bias, (3 * hsz,), (6 * hsz,))
            # z and r take both biases at once; h's recurrent bias sits inside the reset
            zr = b.add(b.slice(wbias, (0,), (2 * hsz,)), b.slice(rbias, (0,), (2 * hsz,)))
            wb = b.concat([zr, b.slice(wbias, (2 * hsz,), (3 * hsz,))], 0)
            rb_h = c.vec(b.slice(rbias, (2 * hsz,), (3 * hsz,)))
        xw = c.projected(d, wb)
        rt = c.recurrent(d)
        rt_zr = b.slice(rt, (0, 0), (hsz, 2 * hsz))
        rt_h = b.slice(rt, (0, 2 * hsz), (hsz, 3 * hsz))
        h_t = c.state(5, d)
        steps: list[Var] = []
        for t in c.order(d):
            x_t = c.step_input(xw, t)
            zr_in = c.gate(x_t, 0), c.gate(x_t, 1)
            xh = c.gate(x_t, 2)
            if h_t is None:
                z, r = (f(c.clipped(v)) for v in zr_in)
                rec = rb_h  # H = 0: its products vanish, the recurrent bias stays
                pre = xh if rec is None else b.add(xh, b.mul(r, rec) if before else rec)
                cand = g(c.clipped(pre))
                h_t = b.sub(cand, b.mul(z, cand))
            else:
                hr = b.matmul(h_t, rt_zr)
                z = f(c.clipped(b.add(zr_in[0], c.gate(hr, 0))))
                r = f(c.clipped(b.add(zr_in[1], c.gate(hr, 1))))
                if before:
                    pre = b.add(xh, b.mul(r, _add(b, b.matmul(h_t, rt_h), rb_h)))
                else:
                    pre = _add(b, b.add(xh, b.matmul(b.mul(r, h_t), rt_h)), rb_h)
                cand = g(c.clipped(pre))
                h_t = b.add(b.sub(cand, b.mul(z, cand)), b.mul(z, h_t))
            steps.append(h_t)
        c.finish(d, steps, h_t)
    c.emit()


def _rnn(lo: Lowering, n: Node) -> None:
    c = _Cell(lo, 1)
    b, hsz = c.b, c.hidden
    acts = _activations(lo, ("Tanh",), c.dirs)
    for d in range(c.dirs):
        (f,) = acts[d]
        bias = c.bias(3, 2 * hsz, d)
        wb = None
        if bias is not None:
            wb = b.add(b.slice(bias, (0,), (hsz,)), b.slice(bias, (hsz,), (2 * hsz,)))
        xw = c.projected(d, wb)
        rt = c.recurrent(d)
        h_t = c.state(5, d)
        steps: list[Var] = []
        for t in c.order(d):
            pre = c.step_input(xw, t)
            if h_t is not None:
                pre = b.add(pre, b.matmul(h_t, rt))
            h_t = f(c.clipped(pre))
            steps.append(h_t)
        c.finish(d, steps, h_t)
    c.emit()


_COMMON = frozenset(
    {
        "activation_alpha",
        "activation_beta",
        "activations",
        "clip",
        "direction",
        "hidden_size",
        "layout",
    }
)

RULES: Mapping[str, LoweringRule] = {
    "LSTM": LoweringRule(_lstm, _COMMON | {"input_forget"}),
    "GRU": LoweringRule(_gru, _COMMON | {"linear_before_reset"}),
    "RNN": LoweringRule(_rnn, _COMMON),
}
