"""Lazy module exports: a package's names that live in a module it imports on first use.

``poot_npu`` and ``poot_codegen`` export their public API from ``__init__`` without loading
OpenVINO or XRT when they are imported: each lazy name maps to the module that defines it (and
the name it has there), and the package's module-level ``__getattr__`` is ``lazy_exports``::

    __getattr__ = lazy_exports(__name__, {"VpuDevice": ("poot_npu.vpu", "VpuDevice")})
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(package: str, names: Mapping[str, tuple[str, str]]) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``package``: ``names[name]`` is ``(module, attribute)``,
    imported when ``name`` is first read; any other name is ``AttributeError`` as usual."""
    table = dict(names)

    def __getattr__(name: str) -> Any:
        where = table.get(name)
        if where is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module, attr = where
        return getattr(importlib.import_module(module), attr)

    return __getattr__
