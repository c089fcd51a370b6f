"""The rule table and the loop over a jaxpr's equations, nested jaxprs inlined.

Each equation is lowered by its primitive's rule. ``jit``, ``closed_call``/``eval_jaxpr``,
``custom_jvp_call``, ``custom_vjp_call`` and ``remat`` (``checkpoint``) are inlined: their body
is lowered in place, operands bound to its inputs and its own captured constants made weights
(a custom rule's derivative is not needed for a forward program). An equation no rule expresses
whose operands are all literals and whose results are scalars is computed by JAX at import
(``fold``). An equation no rule expresses becomes an ``UnsupportedJax`` naming the primitive and the user's line; its results are
poisoned, so what reads them is skipped instead of adding a blocker of its own, except an
equation whose primitive has no rule at all (every primitive to replace is listed at once).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from jax.extend import core as jcore
from poot_ir.core import Literal as PootLiteral
from poot_ir.errors import PootError, UnsupportedJax

from poot_jax.context import Ctx, Refuse, Value, poot_dtype
from poot_jax.elementwise import RULES as ELEMENTWISE
from poot_jax.elementwise import Rule
from poot_jax.reductions import RULES as REDUCTIONS
from poot_jax.rounding import RULES as ROUNDING
from poot_jax.shapes import RULES as SHAPES
from poot_jax.windows import RULES as WINDOWS

__all__ = ["CALLS", "POISON", "RULES", "JaxLowering", "is_poison", "where"]

RULES: dict[str, Rule] = {**ELEMENTWISE, **ROUNDING, **SHAPES, **REDUCTIONS, **WINDOWS}

#: The nesting primitives that are inlined, and the param holding the body.
CALLS: dict[str, str] = {
    "jit": "jaxpr",
    "pjit": "jaxpr",
    "closed_call": "call_jaxpr",
    "core_call": "call_jaxpr",
    "eval_jaxpr": "call_jaxpr",
    "custom_jvp_call": "call_jaxpr",
    "custom_vjp_call": "call_jaxpr",
    "remat2": "jaxpr",
    "checkpoint": "jaxpr",
}

#: Folders whose frames are not the user's line (jax's own are skipped by JAX already).
#: Library folders whose frames are not the user's line (JAX skips its own); flax's where it
#: was imported (by the user: this package does not import it).
_LIBRARIES = ("poot_jax", "flax", "optax")


def _libraries() -> tuple[str, ...]:
    found = []
    for name in _LIBRARIES:
        module = sys.modules.get(name)
        path = getattr(module, "__file__", None)
        if path:
            found.append(os.path.dirname(path) + os.sep)
    return tuple(found)


def where(source_info: Any) -> str:
    """The user's ``file:line (function)`` of an equation, skipping library frames."""
    from jax._src import source_info_util as siu

    tb = getattr(source_info, "traceback", None)
    if tb is None:
        return ""
    skip = _libraries()
    for frame in siu.user_frames(tb):
        if not frame.file_name.startswith(skip):
            return f"{frame.file_name}:{frame.start_line} ({frame.function_name})"
    return ""


#: The value of a JAX variable whose equation was refused: what reads it adds no blocker of its
#: own, unless its primitive has no rule at all (every primitive to replace is listed at once).
POISON = object()

NO_RULE = "poot has no lowering for this primitive"


@dataclass(slots=True)
class JaxLowering:
    """One import: the context, the blockers found, and each equation's origin."""

    cx: Ctx
    blockers: list[UnsupportedJax] = field(default_factory=list)
    origins: dict[int, str] = field(default_factory=dict)

    def run(
        self, jaxpr: Any, consts: Sequence[Any], args: Sequence[Any], call: str = ""
    ) -> list[Any]:
        """Lower ``jaxpr`` with ``args`` (``Value``s or poison) bound to its inputs; its
        constvars become weights. Returns its outputs (``Value``s or poison).

        ``call`` is the user's line of the outermost call when ``jaxpr`` is a nested body: a
        blocker inside it names that line (JAX caches a jitted body's trace, so the body's own
        source lines can be those of whichever call traced it first)."""
        env: dict[Any, Any] = {}
        for v, c in zip(jaxpr.constvars, consts, strict=True):
            env[v] = self.constant(np.asarray(c), v.aval.dtype)
        for v, a in zip(jaxpr.invars, args, strict=True):
            env[v] = a
        for eqn in jaxpr.eqns:
            name = eqn.primitive.name
            blocked = False
            try:
                ins = [self.read(env, v) for v in eqn.invars]
            except Refuse as err:  # a literal operand of a type poot lacks
                at = call or where(eqn.source_info)
                self.blockers.append(UnsupportedJax(name, at, err.kind, err.detail))
                ins, blocked = [POISON], True
            poisoned = any(x is POISON for x in ins)
            if poisoned and name not in CALLS:
                outs: list[Any] = [POISON] * len(eqn.outvars)
                if name not in RULES and not blocked:  # a primitive to replace: listed too
                    at = call or where(eqn.source_info)
                    self.blockers.append(UnsupportedJax(name, at, "primitive", NO_RULE))
            elif name in RULES and (folded := self.fold(eqn, ins)) is not None:
                outs = folded
            elif name in CALLS:  # a body whose operands are poisoned: its own blockers listed
                sub = eqn.params[CALLS[name]]
                at = call or where(eqn.source_info)
                outs = self.run(sub, getattr(sub, "consts", ()), ins, at)
            else:
                outs = self.lower(eqn, ins, call)
            for v, o in zip(eqn.outvars, outs, strict=True):
                env[v] = o
        results = []
        for v in jaxpr.outvars:
            try:
                results.append(self.read(env, v))
            except Refuse as err:
                self.blockers.append(UnsupportedJax("output", call, err.kind, err.detail))
                results.append(POISON)
        return results

    def fold(self, eqn: Any, ins: list[Any]) -> list[Any] | None:
        """The scalar results of an equation whose operands are all literals, computed by JAX
        itself (``primitive.bind``, so with JAX's semantics) as literals; None to lower it.
        ``jnp.var``'s ``ddof`` arithmetic folds so, and the ``where`` it guards with a NaN picks
        its case at import (``select_n`` on a literal predicate)."""
        if not ins or not all(isinstance(x, PootLiteral) for x in ins):
            return None
        if any(getattr(o.aval, "shape", None) != () for o in eqn.outvars):
            return None
        try:
            dtypes = [poot_dtype(o.aval.dtype) for o in eqn.outvars]
            args = [np.asarray(x.value, dtype=x.dtype.numpy) for x in ins]
            got = eqn.primitive.bind(*args, **eqn.params)
        except Exception:  # Refuse (a dtype poot lacks), or JAX's own error: lower it instead
            return None
        values = got if eqn.primitive.multiple_results else [got]
        return [self.cx.lit(np.asarray(v).item(), d) for v, d in zip(values, dtypes, strict=True)]

    def read(self, env: dict[Any, Any], v: Any) -> Any:
        """A variable's value, or a literal's (``Refuse`` for a literal of a type poot lacks)."""
        if isinstance(v, jcore.Literal):
            aval: Any = v.aval  # a ShapedArray (typed as the abstract base)
            dtype = poot_dtype(aval.dtype)
            value = np.asarray(v.val, dtype=aval.dtype)
            if value.shape:
                return self.cx.const(value, dtype)
            return self.cx.lit(value.item(), dtype)
        return env[v]

    def constant(self, value: np.ndarray, dtype: Any) -> Any:
        """A captured array: a weight, except a 0-d one, which is a literal as JAX's own scalars
        are (a weight would be uploaded, and range-checked on a narrowing target, for nothing:
        ``jnp.var`` captures a NaN it selects only for an empty reduction)."""
        try:
            if value.shape == ():
                return self.cx.lit(value.astype(dtype).item(), poot_dtype(dtype))
            return self.cx.const(value, poot_dtype(dtype))
        except Refuse as err:
            self.blockers.append(UnsupportedJax("constant", "", err.kind, err.detail))
            return POISON

    def lower(self, eqn: Any, ins: list[Value], call: str = "") -> list[Any]:
        name = eqn.primitive.name
        at = call or where(eqn.source_info)
        rule = RULES.get(name)
        start = self.cx.b.eqn_count
        try:
            if rule is None:
                raise Refuse("primitive", NO_RULE)
            for out in eqn.outvars:
                poot_dtype(out.aval.dtype)
            outs = rule(self.cx, ins, dict(eqn.params), [o.aval for o in eqn.outvars])
            for got, out in zip(outs, eqn.outvars, strict=True):
                want = (tuple(out.aval.shape), poot_dtype(out.aval.dtype))
                if (got.shape, got.dtype) != want:  # a rule's bug, never the user's
                    raise AssertionError(f"{name} lowered to {got.type}, JAX has {want}")
        except Refuse as err:
            self.blockers.append(UnsupportedJax(name, at, err.kind, err.detail))
            return [POISON] * len(eqn.outvars)
        except PootError as err:  # a type rule refused what the rule built (a dtype, a shape)
            self.blockers.append(UnsupportedJax(name, at, "params", str(err)))
            return [POISON] * len(eqn.outvars)
        for i in range(start, self.cx.b.eqn_count):
            self.origins[i] = f"{name} at {at}" if at else name
        return list(outs)


def is_poison(x: object) -> bool:
    return x is POISON
