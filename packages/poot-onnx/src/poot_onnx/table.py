"""The ONNX op table (``OPS``: the rules of every family module) and ``lower``, which runs them
over a graph.

A node whose inputs are all known at import (initializers, constants, bound inputs, shapes) is
evaluated there by onnx's reference evaluator (``poot_onnx.folding``), whatever its dtype, so
shape chains never reach the program. Any other node is lowered by the rule for its op type: a
rule names the attributes it reads (any other attribute is refused) and lowers one node through
a ``Lowering``, to poot primitives or a composite of ``poot_ir.ops``. Inputs that must be known
at import (shapes, axes, slice bounds, ``Range`` bounds) are listed in ``STATIC_INPUTS``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
from poot_ir.core import Var
from poot_ir.dtypes import DType
from poot_ir.errors import EvaluationError, TypeCheckError, UnsupportedOnnx

from poot_onnx import compute, functions, indexing, layout, logic, ml, nn, norms, recurrent, select
from poot_onnx.context import Array, Blocked, Const, Graph, Lowering, LoweringRule, Node
from poot_onnx.folding import NEVER_FOLDED, evaluate_node

__all__ = ["ML_DOMAIN", "ML_OPS", "OPS", "STATIC_INPUTS", "LoweringRule", "lower"]

#: Input positions whose values must be known at import time, per op type.
STATIC_INPUTS: Mapping[str, tuple[int, ...]] = {
    "ConstantOfShape": (0,),
    "Expand": (1,),
    "GRU": (4,),
    "LSTM": (4,),
    "OneHot": (1,),
    "Pow": (1,),
    "Range": (0, 1, 2),
    "RNN": (4,),
    "ReduceL1": (1,),
    "ReduceL2": (1,),
    "ReduceLogSumExp": (1,),
    "ReduceMax": (1,),
    "ReduceMean": (1,),
    "ReduceProd": (1,),
    "ReduceSum": (1,),
    "ReduceSumSquare": (1,),
    "Reshape": (1,),
    "Resize": (1, 2, 3),
    "Slice": (1, 2, 3, 4),
    "Split": (1,),
    "Squeeze": (1,),
    "TopK": (1,),
    "Unsqueeze": (1,),
    "Upsample": (1,),
}


#: Ops that may read an ONNX int64 value held as I32 at run time (``Lowering.wide``): they move,
#: select or compare values, so each result fits wherever its inputs did. Any other op on such
#: a value (arithmetic) is refused, since poot cannot show its result stays within I32.
WIDE_OK = frozenset(
    {
        "Identity", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Transpose", "Slice",
        "Concat", "Split", "Gather", "GatherElements", "GatherND", "Expand", "Tile", "Where",
        "Cast", "CastLike", "Equal", "Greater", "GreaterOrEqual", "Less", "LessOrEqual", "Max",
        "Min", "ReduceMax", "ReduceMin", "ArgMax", "ArgMin", "Shape", "Size", "Dropout",
        "OneHot", "TopK", "ArrayFeatureExtractor",
    }
)  # fmt: skip


def lower(lo: Lowering, nodes: Sequence[Node]) -> None:
    """Lower ``nodes`` (in graph order) into ``lo``. Raises ``UnsupportedOnnx`` naming the
    first node poot cannot express; with ``lo.collect``, records each such node's refusal in
    ``lo.blockers`` and goes on (a node that reads a refused node's output is skipped, unless
    its own op type is a blocker too). Nothing else escapes for a malformed model."""
    for node in nodes:
        lo.enter(node)
        start = lo.b.eqn_count
        try:
            _lower_node(lo, node)
        except Blocked:
            lo.poisoned.update(o for o in node.outputs if o)
        except UnsupportedOnnx as err:
            if not lo.collect:
                raise
            lo.blockers.append(err)
            lo.poisoned.update(o for o in node.outputs if o)
        for k in range(start, lo.b.eqn_count):
            lo.origins.setdefault(k, (node.label, node.op_type))  # an inlined branch's own
    lo.enter(None)


def _lower_node(lo: Lowering, node: Node) -> None:
    if node.domain == ML_DOMAIN:
        rule = ML_OPS.get(node.op_type)
        if rule is None:
            why = ml.REFUSED.get(node.op_type)
            raise lo.fail(
                "op", why or f"poot has no lowering for the {ML_DOMAIN} op {node.op_type!r}"
            )
    elif node.domain not in ("", "ai.onnx"):
        raise lo.fail("op", f"op type {node.op_type!r} of domain {node.domain!r}")
    elif lo.opset == 0:
        raise lo.fail("model", "the model imports no opset of the default domain")
    else:
        rule = OPS.get(node.op_type)
    inputs = [name for name in node.inputs if name]
    if any(name in lo.poisoned for name in inputs):
        if rule is None:
            raise lo.fail("op", f"poot has no lowering for the ONNX op {node.op_type!r}")
        raise Blocked(node.label)
    try:
        with np.errstate(all="ignore"):
            if _fold(lo, node, rule):
                return
            if rule is None:
                _inline_function(lo, node)
                return
            unknown = sorted(set(node.attrs) - rule.attrs)
            if unknown:
                raise lo.fail("attribute", f"unknown attribute(s) {', '.join(unknown)}")
            wide = [
                v for name in inputs if isinstance(v := lo.env.get(name), Var) and v.id in lo.wide
            ]
            if wide and node.op_type not in WIDE_OK:
                raise lo.fail(
                    "dtype",
                    f"int64 arithmetic at run time: poot holds int64 as i32 and cannot show "
                    f"that {node.op_type} of {wide[0].name or 'an int64 value'} stays within i32",
                )
            rule.handler(lo, node)
            if wide or any(name in lo.narrowed_names for name in inputs):
                for out in node.outputs:
                    v = lo.env.get(out) if out else None
                    if isinstance(v, Var) and v.dtype is DType.I32:
                        lo.wide.add(v.id)
    except (UnsupportedOnnx, Blocked):
        raise
    except EvaluationError as err:
        raise lo.fail("value", f"computing it from its constant inputs: {err}") from err
    except (TypeCheckError, ValueError, IndexError, ZeroDivisionError, OverflowError) as err:
        raise lo.fail("model", f"{type(err).__name__}: {err}") from err


#: Ops whose constant results stay in the program when their dtype is poot's: an iota costs
#: nothing, a weight costs memory.
_GENERATORS = frozenset({"Range"})


def _fold(lo: Lowering, node: Node, rule: LoweringRule | None) -> bool:
    """Evaluate a node whose inputs are all known at import (``folding``). Returns False, and
    does nothing, for any other node, for ``NEVER_FOLDED`` ops, and for a ``_GENERATORS`` op
    whose result has a poot dtype."""
    present = [name for name in node.inputs if name]
    if not present or node.op_type in NEVER_FOLDED or node.proto is None:
        return False
    if node.domain == ML_DOMAIN:
        return False  # the evaluator is given the default domain only; the rule lowers it
    consts: dict[str, Array] = {}
    for name in present:
        c = lo.env.get(name)
        if not isinstance(c, Const):
            return False
        consts[name] = c.value
    if node.op_type in _GENERATORS and rule is not None:
        first = consts[present[0]]
        if first.dtype != np.int64 and DType.from_numpy(first.dtype) is not None:
            return False
    for out, value in zip(
        [o for o in node.outputs if o], evaluate_node(lo, node, consts), strict=True
    ):
        lo.env[out] = Const(out, value)
    return True


def _inline_function(lo: Lowering, node: Node) -> None:
    """A node with no rule whose op ONNX defines as a function: its body, lowered in place (in
    the opset the body is written in)."""
    found = functions.expand(lo, node) if node.domain in ("", "ai.onnx") else None
    if found is None:
        raise lo.fail("op", f"poot has no lowering for the ONNX op {node.op_type!r}")
    body, opset = found
    outer = lo.opset
    lo.opset = opset
    try:
        lower(lo, body)
    finally:
        lo.opset = outer
        lo.enter(node)
    missing = [o for o in node.outputs if o and o not in lo.env]
    if missing:
        if any(o in lo.poisoned for o in missing):
            raise Blocked(node.label)
        raise lo.fail("model", f"its function body never computes {missing[0]!r}")


def _if(lo: Lowering, n: Node) -> None:
    """An ``If`` whose condition is known at import: its branch is inlined (its nodes lowered
    in place, its outputs the node's). A condition known only at run time is refused."""
    cond = lo.const(0, "condition")
    if cond.size != 1:
        raise lo.fail("value", f"the condition has {cond.size} elements, not one")
    key = "then_branch" if bool(cond.reshape(-1)[0]) else "else_branch"
    branch = lo.attr(key)
    if not isinstance(branch, Graph):
        raise lo.fail("attribute", f"{key} is not a graph")
    if len(branch.outputs) != len(n.outputs):
        raise lo.fail(
            "model", f"{key} has {len(branch.outputs)} outputs, the node {len(n.outputs)}"
        )
    for name, arr in branch.initializers.items():
        lo.env[name] = Const(name, arr, initializer=True)
    lower(lo, branch.nodes)
    lo.enter(n)
    for k, out in enumerate(branch.outputs):
        value = lo.env.get(out)
        if value is None:
            raise (
                Blocked(out)
                if out in lo.poisoned
                else lo.fail("model", f"{key} never computes {out!r}")
            )
        lo.set(k, value)


#: Every op type the importer lowers (default domain), with its rule.
OPS: Mapping[str, LoweringRule] = {
    **compute.RULES,
    **layout.RULES,
    **logic.RULES,
    **norms.RULES,
    **indexing.RULES,
    **nn.RULES,
    **recurrent.RULES,
    **select.RULES,
    "If": LoweringRule(_if, frozenset({"then_branch", "else_branch"})),
}

#: The domain of the classic-ML operators (skl2onnx's), and the op types of it the importer
#: lowers (``poot_onnx.ml``).
ML_DOMAIN = "ai.onnx.ml"
ML_OPS: Mapping[str, LoweringRule] = ml.RULES
