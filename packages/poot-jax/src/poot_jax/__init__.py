"""The JAX frontend (package ``poot-jax``): ``import_function`` traces a JAX function into a poot
``Program`` and the values of its weights; ``check_function`` lists every blocker at once.

It builds through ``poot_ir`` only and needs jax (0.12, Python 3.12 or newer: the package's
``jax`` extra). Modules: ``context`` (the lowering context), ``table`` (the rule table and the
loop that inlines nested jaxprs), rules by family: ``elementwise``, ``rounding``, ``shapes``, ``reductions``,
``windows``; ``runner`` (``jit``).

- ``fn`` is traced with ``jax.make_jaxpr`` on the example arguments (arrays, or
  ``jax.ShapeDtypeStruct``s); every array leaf of them is a slot, named after ``fn``'s parameter
  and its path in the pytree (``x``, ``batch.tokens``), or by ``names=``.
- ``params=`` (a pytree of arrays, e.g. Flax ``variables``) is passed as ``fn``'s first argument
  and bound as weights with their values, named by their path in it (Flax ``variables``:
  ``params.Dense_0.kernel``); arrays
  ``fn`` closes over become weights ``const0``, ``const1``, ...
- Outputs are named ``out`` (one) or ``out`` plus the output pytree's path (``out.0``, ...).
- Element types: float32, float16, bfloat16, int32 and bool (JAX's default, x64 off).
- ``jit(fn, device=..., verify=...)`` (a ``Runner``, module ``runner``) runs ``fn`` on a device:
  traced, planned and added once per shape/dtype signature, replayed on later calls.
- Anything poot cannot express raises ``UnsupportedJax`` naming the JAX primitive, the user's
  source line of its equation and what is unsupported, and how many more blockers there are.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import jax
import numpy as np
from poot_ir.builder import Builder
from poot_ir.core import Program, Var
from poot_ir.errors import UnsupportedJax

from poot_jax.context import Ctx, Refuse, poot_dtype
from poot_jax.table import CALLS, POISON, RULES, JaxLowering, is_poison

__all__ = [
    "SUPPORTED_PRIMITIVES",
    "ImportedFunction",
    "JaxBlocker",
    "Runner",
    "check_function",
    "import_function",
    "jit",
]

#: The JAX primitives the importer lowers, and the nesting ones it inlines.
SUPPORTED_PRIMITIVES: tuple[str, ...] = tuple(sorted({*RULES, *CALLS}))


@dataclass(frozen=True, slots=True)
class JaxBlocker:
    """One reason a function does not import, and every source line it affects."""

    kind: str
    primitive: str
    detail: str
    lines: tuple[str, ...]

    def __str__(self) -> str:
        shown = ", ".join(self.lines[:5]) + (", ..." if len(self.lines) > 5 else "")
        return f"{self.primitive} ({self.kind}): {self.detail} [{shown or 'no source line'}]"


@dataclass(frozen=True, slots=True)
class ImportedFunction:
    """An imported function: the program, each weight's value by argument name, the slot name
    of each argument leaf (by its path, ``jax.tree_util.keystr``), the output names in the order
    of the flattened results, the results' pytree structure (``out_tree``: unflatten the outputs
    with it), and the JAX equation each poot equation came from (by index)."""

    program: Program
    weights: dict[str, np.ndarray]
    inputs: dict[str, str]
    outputs: tuple[str, ...]
    origins: dict[int, str]
    out_tree: Any

    def origin(self, eqn: int) -> str:
        return self.origins.get(eqn, "")


def import_function(
    fn: Callable[..., Any],
    *args: Any,
    params: Any = None,
    names: Sequence[str] | None = None,
    name: str | None = None,
) -> ImportedFunction:
    """Trace ``fn(*args)`` (``fn(params, *args)`` when ``params`` is given) and import it.

    Raises ``UnsupportedJax`` for the first blocker, saying how many more ``check_function``
    lists; nothing is built or run past tracing.
    """
    lo, imported = _import(fn, args, params, names, name)
    if lo.blockers:
        first, more = lo.blockers[0], len(lo.blockers) - 1
        if more:
            raise UnsupportedJax(
                first.primitive,
                first.where,
                first.kind,
                f"{first.detail} (and {more} more blocker(s): check_function lists them)",
            )
        raise first
    assert imported is not None
    return imported


def check_function(
    fn: Callable[..., Any], *args: Any, params: Any = None
) -> tuple[JaxBlocker, ...]:
    """Every blocker of ``fn`` on these arguments (empty when it imports): each reason once,
    with every source line it affects."""
    lo, _ = _import(fn, args, params, None, None)
    grouped: dict[tuple[str, str, str], list[str]] = {}
    for err in lo.blockers:
        lines = grouped.setdefault((err.kind, err.primitive, err.detail), [])
        if err.where and err.where not in lines:
            lines.append(err.where)
    return tuple(JaxBlocker(k, p, d, tuple(lines)) for (k, p, d), lines in grouped.items())


def __getattr__(name: str) -> Any:
    # ``Runner`` and ``jit`` load the planner, the engine and the devices: only when asked for,
    # so ``import poot_jax`` (the importer) stays jax plus poot_ir
    if name in ("Runner", "jit"):
        from poot_jax import runner

        return getattr(runner, name)
    raise AttributeError(f"module 'poot_jax' has no attribute {name!r}")


def identifier(text: str) -> str:
    """``text`` as a poot name: characters outside ``[A-Za-z0-9_.]`` become ``_``."""
    out = re.sub(r"[^A-Za-z0-9_.]", "_", text).strip(".")
    return out if re.match(r"[A-Za-z_]", out) else f"_{out}"


def _path_name(path: Sequence[Any]) -> str:
    parts = []
    for key in path:
        for attr in ("key", "idx", "name"):
            if hasattr(key, attr):
                parts.append(str(getattr(key, attr)))
                break
        else:
            parts.append(str(key))
    return ".".join(parts)


def _arg_bases(fn: Callable[..., Any], n: int, skip: int) -> list[str]:
    try:
        ps = list(inspect.signature(fn).parameters.values())[skip:]
    except (TypeError, ValueError):
        ps = []
    positional = [p.name for p in ps if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return [positional[i] if i < len(positional) else f"arg{i}" for i in range(n)]


def _import(
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    params: Any,
    names: Sequence[str] | None,
    name: str | None,
) -> tuple[JaxLowering, ImportedFunction | None]:
    has_params = params is not None
    traced_args = (params, *args) if has_params else args
    cj, out_shapes = jax.make_jaxpr(fn, return_shape=True)(*traced_args)
    prog_name = identifier(name or getattr(fn, "__name__", "jax") or "jax")
    b = Builder(prog_name if prog_name != "_lambda_" else "jax")
    lo = JaxLowering(Ctx(b))

    leaves = jax.tree_util.tree_flatten_with_path(traced_args)[0]
    bases = _arg_bases(fn, len(traced_args), 0)
    if has_params:
        bases[0] = ""  # a parameter is named by its path alone (Flax: params.Dense_0.kernel)
    if names is not None and len(names) != len(leaves) - _count(params):
        raise UnsupportedJax(
            "argument", "", "value", f"names= gives {len(names)} names for {len(leaves)} leaves"
        )
    inputs: dict[str, str] = {}
    values: list[Any] = []
    n_params = _count(params)
    for i, ((path, leaf), v) in enumerate(zip(leaves, cj.invars, strict=True)):
        base = bases[int(getattr(path[0], "idx", 0))]
        label = identifier(".".join(filter(None, (base, _path_name(path[1:])))))
        aval: Any = v.aval  # a ShapedArray (typed as the abstract base)
        try:
            dtype = poot_dtype(aval.dtype)
        except Refuse as err:
            lo.blockers.append(UnsupportedJax("argument", "", "dtype", f"{label}: {err.detail}"))
            values.append(None)
            continue
        if i < n_params:
            value = np.asarray(leaf).astype(dtype.numpy)
            values.append(b.weight(label, dtype, aval.shape))
            lo.cx.weights[label] = value
        else:
            slot = names[i - n_params] if names is not None else label
            values.append(b.slot(slot, dtype, aval.shape))
            inputs[jax.tree_util.keystr(path)] = slot
    outs = lo.run(cj, cj.consts, [POISON if x is None else x for x in values])
    out_names: list[str] = []
    taken: set[int] = {v.id for v in values if isinstance(v, Var)}
    for i, out in enumerate(outs):
        oname = "out" if len(outs) == 1 else f"out{i}"
        out_names.append(oname)
        if is_poison(out):  # poison comes only from a refused equation, which is a blocker
            assert lo.blockers, f"output {oname} was lost without a blocker"
            continue
        var = out if isinstance(out, Var) else lo.cx.var(out)
        if var.id in taken or var.name is not None:  # an argument or another output
            # (a result of its own, so a plan never aliases an argument with a result)
            var = b.reshape(var, var.shape)
        taken.add(var.id)
        b.output(oname, var)
    if lo.blockers:
        return lo, None
    # a ``where`` decided at import leaves its other case behind: a NaN the planner would see
    program, kept = b.build_live()
    origins = {new: lo.origins[old] for new, old in enumerate(kept) if old in lo.origins}
    return lo, ImportedFunction(
        program,
        dict(lo.cx.weights),
        inputs,
        tuple(out_names),
        origins,
        jax.tree_util.tree_structure(out_shapes),
    )


def _count(tree: Any) -> int:
    return 0 if tree is None else len(jax.tree_util.tree_leaves(tree))
