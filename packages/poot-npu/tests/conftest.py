"""poot-npu tests: sibling helper modules (``xdna_cases``, ``fake_pyxrt``).

pytest runs with ``--import-mode=importlib``, which does not put a test's directory on
``sys.path``: put this one there so tests can import them.
"""

from __future__ import annotations

import sys
from pathlib import Path

_HERE = str(Path(__file__).resolve().parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
