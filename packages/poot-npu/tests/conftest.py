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


from collections.abc import Iterator  # noqa: E402
from types import ModuleType  # noqa: E402

import fake_pyxrt  # noqa: E402
import pytest  # noqa: E402
from poot_npu import xdna as xdna_module  # noqa: E402
from poot_npu import xdna_contexts  # noqa: E402


@pytest.fixture(autouse=True)
def _fresh_contexts(
    monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Each test starts with no hardware context held in the process, no allowance from the
    environment, and an acceptance record of its own (none): the default is what is tested."""
    monkeypatch.setattr(xdna_contexts, "_held", {})
    monkeypatch.setattr(xdna_contexts, "_lifted", {})
    monkeypatch.delenv(xdna_contexts.ALLOW_ENV, raising=False)
    record = tmp_path_factory.mktemp("contexts") / "xdna-contexts.json"
    monkeypatch.setenv(xdna_contexts.RECORD_ENV, str(record))


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    """The fake ``pyxrt`` (``fake_pyxrt``) in place of the real module, reset, with no context
    abandoned by an earlier test: the XdnaDevice tests run against it."""
    fake_pyxrt.reset()
    monkeypatch.setitem(sys.modules, "pyxrt", fake_pyxrt)
    monkeypatch.setattr(xdna_module, "_abandoned", [])
    yield fake_pyxrt


def _vpu_param(device: str) -> object:
    return pytest.param(device, marks=pytest.mark.npu_intel) if device == "NPU" else device


@pytest.fixture(params=[_vpu_param("CPU"), _vpu_param("NPU")])
def vpu_engine(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[object]:
    """An engine on the Intel NPU's CPU stand-in and, marked ``npu_intel``, on the NPU itself
    (skipped with "hardware unavailable" without one): the same cases on both."""
    from poot_engine import Engine
    from poot_npu import VpuDevice

    why = VpuDevice.probe(request.param)
    if why is not None:
        pytest.skip(f"hardware unavailable: {why}")
    with Engine(VpuDevice(request.param), tmp_path / "cache") as e:
        yield e
