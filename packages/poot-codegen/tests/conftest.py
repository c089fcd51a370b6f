"""poot-codegen tests: sibling helper modules, and the golden-file regeneration flag.

pytest runs with ``--import-mode=importlib``, which does not put a test's directory on
``sys.path``: put this one there so tests can ``import xdna_programs``. Golden files are
rewritten instead of compared with ``--regen-golden`` or ``POOT_REGEN_GOLDEN=1``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

_HERE = str(Path(__file__).resolve().parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--regen-golden",
        action="store_true",
        default=False,
        help="rewrite poot-codegen golden files instead of comparing against them",
    )


@pytest.fixture(scope="session")
def regen_golden(request: pytest.FixtureRequest) -> bool:
    return bool(request.config.getoption("--regen-golden")) or os.environ.get(
        "POOT_REGEN_GOLDEN", ""
    ) not in ("", "0")
