"""OpenVINO, imported without its telemetry writing into the user's home: the one module of
poot that imports ``openvino`` (every other imports it from here; tests/test_openvino_quiet.py
checks).

Why (read in the pinned packages, openvino 2026.4.1 and openvino-telemetry 2025.2.0):
``openvino/__init__.py`` imports ``openvino.tools.ovc``, whose ``__init__`` calls
``init_ovc_telemetry`` (``tools/ovc/telemetry_utils.py``: a ``Telemetry`` with
``enable_opt_in_dialog=False, disable_in_ci=True``) and sends an ``import`` event. In
``openvino_telemetry/main.py`` (``Telemetry.init``), with the dialog off, a missing consent
file (``~/intel/openvino_telemetry``) counts as consent: it creates ``~/intel``, writes
``openvino_ga_cid`` and ``stats`` there and sends the event to Google Analytics.

The opt-outs upstream offers: ``opt_in_out --opt_out`` writes the consent file, a global
setting of the user's that poot must not change; and ``disable_in_ci``, which declines when
``OptInChecker._run_in_ci`` (``utils/opt_in_checker.py``) sees ``CI=true``. poot uses the
second, for the import alone: ``CI`` is ``true`` while ``openvino`` is imported and is put
back as it was right after (so the environment a user or a subprocess sees is unchanged). The
telemetry object is a process-wide singleton initialised there, declined, so nothing OpenVINO
does later in this process sends or writes either. A program that imported ``openvino``
before poot did keeps whatever it chose.
"""

from __future__ import annotations

import os
import sys
from typing import Final

__all__ = ["Type", "opset1", "opset4", "opset16", "ov"]

_CI: Final = "CI"


def _import_quietly() -> None:
    if "openvino" in sys.modules:
        return
    saved = os.environ.get(_CI)
    os.environ[_CI] = "true"
    try:
        import openvino  # noqa: F401  (the telemetry is initialised here)
    finally:
        if saved is None:
            os.environ.pop(_CI, None)
        else:
            os.environ[_CI] = saved


_import_quietly()

import openvino as ov  # noqa: E402
import openvino.opset1 as opset1  # noqa: E402
import openvino.opset4 as opset4  # noqa: E402
import openvino.opset16 as opset16  # noqa: E402
from openvino import Type  # noqa: E402
