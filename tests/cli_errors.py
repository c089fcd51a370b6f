"""Every ``error:`` line of the command line names a public ``PootError`` subclass: the CLI
tests pass each line they see through ``check_error_lines``."""

from __future__ import annotations

import importlib
import re

from poot_ir import PootError

_LINE = re.compile(r"^error: ([A-Za-z_][A-Za-z0-9_]*): ", re.MULTILINE)


def public_errors() -> dict[str, type[PootError]]:
    """Every ``PootError`` subclass the library defines, by name (the package imported so far
    decides which are loaded; the CLI's modules are, by the time it printed a line)."""
    found: dict[str, type[PootError]] = {}
    todo: list[type[PootError]] = [PootError]
    while todo:
        cls = todo.pop()
        if cls.__module__.startswith("poot"):
            found.setdefault(cls.__name__, cls)
        todo.extend(cls.__subclasses__())
    return found


def is_public(cls: type[BaseException]) -> bool:
    """Named without a leading underscore, in a module path without one, exported by it (in
    its ``__all__``), and a ``PootError``."""
    module = importlib.import_module(cls.__module__)
    return (
        issubclass(cls, PootError)
        and not cls.__name__.startswith("_")
        and not any(part.startswith("_") for part in cls.__module__.split("."))
        and getattr(module, cls.__name__, None) is cls
        and cls.__name__ in getattr(module, "__all__", (cls.__name__,))
    )


def check_error_lines(stderr: str) -> list[str]:
    """The class names on ``stderr``'s ``error:`` lines, each asserted to be a public
    ``PootError`` subclass of the library."""
    names = _LINE.findall(stderr)
    known = public_errors()
    for name in names:
        assert name in known, f"error line names {name!r}, no PootError subclass of poot"
        assert is_public(known[name]), f"error line names {name!r}, which is not public"
    return names
