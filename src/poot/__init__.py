"""poot: the command line, and ``poot.InferenceSession`` (``poot.session``), an ONNX model on a
poot device used the way ONNX Runtime's session is; ``poot.PootError`` is what every error
poot raises derives from (``poot_ir.errors``), for a script that catches them.

``import poot`` stays light (the command line imports this package first): the session, and
the frontend, planner and engine it needs, are imported on first use of ``poot.InferenceSession``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from poot_ir.errors import PootError

    from poot.session import InferenceSession, NodeArg, SessionPlan

__all__ = ["InferenceSession", "NodeArg", "PootError", "SessionPlan"]


def __getattr__(name: str) -> Any:
    if name == "PootError":
        from poot_ir.errors import PootError

        return PootError
    if name in __all__:
        from poot import session

        return getattr(session, name)
    raise AttributeError(f"module 'poot' has no attribute {name!r}")
