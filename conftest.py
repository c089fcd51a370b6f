"""The whole test run writes nothing outside the checkout and the system temp directory.

Before any test module is imported, ``HOME`` and the XDG base directories point into a fresh,
empty directory under the system temp dir (``XDG_CACHE_HOME`` into a temporary directory of
its own, so a test that uses the default cache location gets a temporary cache), so nothing a test runs (poot's blob cache and host
kernel cache default to ``$XDG_CACHE_HOME/poot``; tools that write under ``~``) can reach the
contributor's home; subprocesses inherit it. At the end of the session that directory must be
as it was: a new or changed file there means some test relied on a default cache location
instead of its own ``tmp_path``, and the run fails naming the file.

It starts holding one file: OpenVINO's telemetry opt-out (``~/intel/openvino_telemetry``
containing ``0``, what its ``opt_in_out --opt_out`` writes). ``import openvino`` initialises
its telemetry, which otherwise writes ``~/intel/openvino_ga_cid`` and ``~/intel/stats``.
Hypothesis runs derandomized with no example database, so it writes no ``.hypothesis``.

Under pytest-xdist (the nox ``tests`` session runs two workers) every worker has its own fake
home and sends what was written there to the controller, which fails the run.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

# Shared test helpers live in ``tests/`` (``filetree``, ``conformance.devices``). The run uses
# ``--import-mode=importlib``, which puts no test directory on ``sys.path``; this conftest is
# loaded for every test under the checkout, the packages' own tests included.
_TESTS = str(Path(__file__).resolve().parent / "tests")
if _TESTS not in sys.path:
    sys.path.insert(0, _TESTS)

from filetree import tree  # noqa: E402  (needs the path above)

_XDG = ("XDG_CACHE_HOME", "XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME")
# The real-model suite reads the models ``tools/export_minilm.py`` exported into the user's
# cache (``models.catalog.models_dir``), and never writes there: where, fixed before HOME is
# faked.
if not os.environ.get("POOT_MODELS_DIR"):
    _cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    os.environ["POOT_MODELS_DIR"] = str(Path(_cache) / "poot" / "models")
FAKE_HOME = Path(tempfile.mkdtemp(prefix="poot-test-home-"))
_SAVED = {name: os.environ.get(name) for name in ("HOME", *_XDG)}
os.environ["HOME"] = str(FAKE_HOME)
for _name in _XDG:
    os.environ[_name] = str(FAKE_HOME / _name.removeprefix("XDG_").removesuffix("_HOME").lower())
# caches the tests do not name themselves go to their own temporary directory, outside HOME
os.environ["XDG_CACHE_HOME"] = tempfile.mkdtemp(prefix="poot-test-cache-")
(FAKE_HOME / "intel").mkdir()
(FAKE_HOME / "intel" / "openvino_telemetry").write_text("0")

# derandomized (the same examples on every run) and free of timing: no deadline, and no
# "too slow" health check, which a loaded two-core machine trips on a test that passes quiet
settings.register_profile(
    "poot",
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile("poot")


_AT_START = tree(FAKE_HOME)


def written_under_home() -> list[str]:
    """Every path under the fake home created, changed or removed since the session began (not
    the home itself, whose mtime moves with any child created or removed, which is listed)."""
    now = tree(FAKE_HOME)
    changed = (k for k in now.keys() | _AT_START.keys() if now.get(k) != _AT_START.get(k))
    return sorted(k for k in changed if k != ".")


_WORKERS_WROTE: list[str] = []  # under xdist: what each worker's own fake home gained


def pytest_testnodedown(node: object, error: object) -> None:
    """The controller collects each xdist worker's list (a worker's exit status is not the
    run's), so a write under any worker's fake home fails the whole run."""
    _WORKERS_WROTE.extend(getattr(node, "workeroutput", {}).get("home_written", []))


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    written = written_under_home()
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:  # an xdist worker: the controller reports and fails the run
        workeroutput["home_written"] = written
        written = []
    written += _WORKERS_WROTE
    if written:
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        lines = [f"the test run wrote under HOME/XDG dirs ({FAKE_HOME}):", *written[:20]]
        if reporter is not None:
            reporter.write_line("\n  ".join(lines), red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    shutil.rmtree(FAKE_HOME, ignore_errors=True)
    shutil.rmtree(os.environ["XDG_CACHE_HOME"], ignore_errors=True)
    for name, value in _SAVED.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
