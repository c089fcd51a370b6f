"""Puts two test folders on the import path, imported by the same names as their own packages'
tests import them, so one run collects each module once: ``packages/poot-onnx/tests`` (the ONNX
node cases, ``onnx_cases``) and ``packages/poot-ir/tests`` (the random programs,
``strategies``; without it ``nox -s conformance``, which collects this folder alone, failed)."""

import sys
from pathlib import Path

_PACKAGES = Path(__file__).resolve().parents[2] / "packages"
for _tests in (_PACKAGES / "poot-onnx" / "tests", _PACKAGES / "poot-ir" / "tests"):
    if str(_tests) not in sys.path:
        sys.path.append(str(_tests))
