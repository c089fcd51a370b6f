"""Puts ``packages/poot-onnx/tests`` on the import path: the ONNX node cases come from its
``onnx_cases`` module, imported by the same name as the frontend's own tests import it, so one
run collects the cases once."""

import sys
from pathlib import Path

_ONNX_CASES = str(Path(__file__).resolve().parents[2] / "packages" / "poot-onnx" / "tests")
if _ONNX_CASES not in sys.path:
    sys.path.append(_ONNX_CASES)
