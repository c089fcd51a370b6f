"""A Python reference ``module:function`` as a program: what ``poot import|plan|run`` do with a
JAX function where they take an ``.onnx`` file.

The function's positional parameters are its slots, each given by ``--shape NAME=2x8`` (float32)
or ``--shape NAME=2x8:int32`` (float32, float16, bfloat16, int32, bool); arrays it closes over
(Flax ``variables`` held in a closure) are its weights. ``poot_jax`` is loaded only here: the CLI
runs on Python 3.11 where jax (0.12, Python 3.12+) is absent, and then a reference is refused
with an ``InputError`` naming the missing extra and how to get it.
"""

from __future__ import annotations

import importlib
import inspect
import os
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from poot_ir import InputError

if TYPE_CHECKING:
    from poot_jax import ImportedFunction, JaxBlocker

__all__ = ["DTYPES", "blockers", "import_reference", "is_reference", "split_dtypes"]

_REFERENCE = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*")

#: The element types ``--shape NAME=...:DTYPE`` names (poot's, as JAX spells them).
DTYPES = ("float32", "float16", "bfloat16", "int32", "bool")

MISSING_JAX = (
    "importing a JAX function needs jax 0.12 (Python 3.12 or newer), absent here: install "
    "poot-jax with its `jax` extra on Python 3.12 (`pip install 'poot-jax[jax]'`), or use the "
    "project's .venv-jax (`uv run nox -s jax` makes it)"
)


def is_reference(path: str) -> bool:
    """``module:function`` (dotted module, one function name), and no file of that name."""
    return _REFERENCE.fullmatch(path) is not None and not os.path.exists(path)


def split_dtypes(specs: Sequence[str] | None) -> tuple[list[str], dict[str, str]]:
    """``--shape`` specs without their ``:DTYPE`` suffixes, and each suffix by name."""
    plain: list[str] = []
    dtypes: dict[str, str] = {}
    for spec in specs or ():
        head, sep, dtype = spec.rpartition(":")
        if not sep:
            plain.append(spec)
            continue
        if dtype not in DTYPES:
            raise InputError(f"--shape {spec!r}", f"element type {dtype!r} is not one of {DTYPES}")
        plain.append(head)
        dtypes[head.partition("=")[0]] = dtype
    return plain, dtypes


def import_reference(
    ref: str, shapes: Mapping[str, tuple[int, ...]], dtypes: Mapping[str, str]
) -> ImportedFunction:
    """The function ``ref`` names, traced on ``shapes`` and imported (``UnsupportedJax`` for
    the first blocker; ``blockers`` lists them all)."""
    _need_jax(ref)
    from poot_jax import import_function

    fn, args = _resolve(ref, shapes, dtypes)
    return import_function(fn, *args, name=ref.rpartition(":")[2])


def blockers(
    ref: str, shapes: Mapping[str, tuple[int, ...]], dtypes: Mapping[str, str]
) -> tuple[JaxBlocker, ...]:
    """Every blocker of ``ref`` on ``shapes``, each with every source line it affects."""
    _need_jax(ref)
    from poot_jax import check_function

    fn, args = _resolve(ref, shapes, dtypes)
    return check_function(fn, *args)


def _need_jax(ref: str) -> None:
    try:
        import jax  # noqa: F401  (the extra's own package: its absence is the user's to fix)
        import poot_jax  # noqa: F401
    except ImportError:
        raise InputError(ref, MISSING_JAX) from None


def _resolve(
    ref: str, shapes: Mapping[str, tuple[int, ...]], dtypes: Mapping[str, str]
) -> tuple[Callable[..., Any], list[Any]]:
    import jax

    module_name, _, attr = ref.partition(":")
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())  # as `python -m` would: the user's own module
    try:
        module = importlib.import_module(module_name)
    except Exception as err:  # the user's module: any error it raises is its own
        raise InputError(ref, f"cannot import module {module_name!r}: {err}") from None
    fn = getattr(module, attr, None)
    if not callable(fn):
        raise InputError(ref, f"module {module_name!r} has no function {attr!r}")
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError) as err:
        raise InputError(ref, f"cannot read the parameters of {attr!r}: {err}") from None
    names = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    needed = [p.name for p in params if p.name in names and p.default is p.empty]
    unknown = sorted(set(shapes) - set(names))
    if unknown:
        raise InputError(f"--shape {unknown[0]}", f"{attr!r} has no parameter {unknown[0]!r}")
    missing = [n for n in needed if n not in shapes]
    if missing:
        raise InputError(ref, f"give every parameter a shape: --shape {missing[0]}=AxB[:DTYPE]")
    given = [n for n in names if n in shapes]
    args = [jax.ShapeDtypeStruct(shapes[n], dtypes.get(n, "float32")) for n in given]
    return fn, args
