"""The ONNX op table (``OPS``: the rules of ``onnx_compute`` and ``onnx_layout``) and ``lower``,
which runs them over a graph.

A rule names the attributes it reads (any other attribute is refused) and lowers one node
through a ``Lowering``: to poot primitives, to a composite of ``poot_ir.ops``, or to a constant
computed at import time. A node whose inputs are all constants (not initializers) is computed
by the oracle on a scratch program, so folding never changes a result; int64 arithmetic, which
poot cannot run, is folded by the rules in numpy. Inputs that must be constants (shapes, axes,
slice bounds, ``Range`` bounds) are listed in ``STATIC_INPUTS``. Nothing here imports onnx.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from poot_ir import onnx_compute, onnx_layout
from poot_ir.builder import Builder
from poot_ir.core import Var
from poot_ir.errors import EvaluationError, TypeCheckError, UnsupportedOnnx
from poot_ir.onnx_lowering import Array, Const, Lowering, Node, Rule, identifier
from poot_ir.oracle import evaluate

__all__ = ["OPS", "STATIC_INPUTS", "Rule", "lower"]

#: Input positions whose values must be known at import time, per op type.
STATIC_INPUTS: Mapping[str, tuple[int, ...]] = {
    "ConstantOfShape": (0,),
    "Expand": (1,),
    "Pow": (1,),
    "Range": (0, 1, 2),
    "ReduceMax": (1,),
    "ReduceMean": (1,),
    "ReduceSum": (1,),
    "Reshape": (1,),
    "Slice": (1, 2, 3, 4),
    "Split": (1,),
    "Squeeze": (1,),
    "Unsqueeze": (1,),
}


def lower(lo: Lowering, nodes: Sequence[Node]) -> None:
    """Lower ``nodes`` (in graph order) into ``lo``. Raises ``UnsupportedOnnx`` naming the
    first node poot cannot express; nothing else escapes for a malformed model."""
    for node in nodes:
        lo.enter(node)
        if node.domain not in ("", "ai.onnx"):
            raise lo.fail("op", f"op type {node.op_type!r} of domain {node.domain!r}")
        rule = OPS.get(node.op_type)
        if rule is None:
            raise lo.fail("op", f"poot has no lowering for the ONNX op {node.op_type!r}")
        unknown = sorted(set(node.attrs) - rule.attrs)
        if unknown:
            raise lo.fail("attribute", f"unknown attribute(s) {', '.join(unknown)}")
        try:
            with np.errstate(all="ignore"):
                if not _fold_by_oracle(lo, node, rule):
                    rule.handler(lo, node)
        except UnsupportedOnnx:
            raise
        except EvaluationError as err:
            raise lo.fail("value", f"computing it from its constant inputs: {err}") from err
        except (TypeCheckError, ValueError, IndexError, ZeroDivisionError, OverflowError) as err:
            raise lo.fail("model", f"{type(err).__name__}: {err}") from err
    lo.enter(None)


#: Ops whose constant results stay in the program: an iota costs nothing, a weight costs memory.
_GENERATORS = frozenset({"Range"})


def _fold_by_oracle(lo: Lowering, node: Node, rule: Rule) -> bool:
    """Compute a node whose inputs are all constants (not initializers, of poot dtypes except
    where static) at import time: lower it alone into a scratch program and run the oracle, so
    the constant is exactly what the program would have computed. Returns False, and does
    nothing, for any other node (and for ``_GENERATORS``)."""
    static = STATIC_INPUTS.get(node.op_type, ())
    present = [(i, name) for i, name in enumerate(node.inputs) if name]
    if not present or node.op_type in _GENERATORS:
        return False
    consts: list[tuple[int, str, Const]] = []
    for i, name in present:
        c = lo.env.get(name)
        if not isinstance(c, Const) or c.initializer or (c.dtype is None and i not in static):
            return False
        consts.append((i, name, c))
    scratch = Lowering(Builder(f"fold_{identifier(node.op_type)}"), lo.opset, lo.elem_types)
    feed: dict[str, Array] = {}
    for i, name, c in consts:
        if name in scratch.env:
            continue
        if i in static or c.dtype is None:
            scratch.env[name] = c
        else:
            arg, v = scratch.slot(name, c.dtype, c.shape)
            scratch.env[name] = v
            feed[arg] = c.value
    scratch.enter(node)
    rule.handler(scratch, node)
    computed: list[tuple[str, str]] = []
    for k, out in enumerate(node.outputs):
        value = scratch.env.get(out) if out else None
        if isinstance(value, Const):
            lo.env[out] = Const(out, value.value)
        elif isinstance(value, Var):
            scratch.b.output(f"out{k}", value)
            computed.append((out, f"out{k}"))
    if computed:
        results = evaluate(scratch.b.build(), {**feed, **scratch.weights})
        for out, key in computed:
            lo.env[out] = Const(out, results[key])
    return True


#: Every op type the importer lowers (default domain), with its rule.
OPS: Mapping[str, Rule] = {**onnx_compute.RULES, **onnx_layout.RULES}
