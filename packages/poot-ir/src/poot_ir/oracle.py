"""The numpy oracle (placeholder while it is written)."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from poot_ir.core import Program

__all__ = ["evaluate"]


def evaluate(program: Program, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    raise NotImplementedError
