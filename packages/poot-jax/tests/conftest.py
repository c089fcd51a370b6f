"""pytest runs with ``--import-mode=importlib``, which does not put a test's directory on
``sys.path``: put this one there so tests can ``import jax_cases`` as a sibling module.

Every test module here starts with ``pytest.importorskip("jax")``: jax 0.12 needs Python 3.12+,
so the workspace's 3.11 run skips them with that reason and ``nox -s jax`` runs them."""

import sys
from pathlib import Path

_HERE = str(Path(__file__).resolve().parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
