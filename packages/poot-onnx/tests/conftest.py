"""pytest runs with ``--import-mode=importlib``, which does not put a test's directory on
``sys.path``: put this one there so tests can ``import strategies`` as a sibling module."""

import sys
from pathlib import Path

_HERE = str(Path(__file__).resolve().parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
