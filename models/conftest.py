"""The real-model suite imports ``models.catalog``: put the repository root on ``sys.path``
(pytest's importlib mode adds nothing)."""

import sys
from pathlib import Path

_ROOT = str(Path(__file__).resolve().parents[1])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)
