"""Write docs/conformance.md from the ONNX node cases (``uv run python tools/gen_conformance.py``)."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "packages" / "poot-onnx" / "tests"))

import onnx_cases  # noqa: E402
import test_onnx  # noqa: E402

if __name__ == "__main__":
    text = onnx_cases.conformance_markdown(
        [(o.case, o.result, o.reason) for o in test_onnx._outcomes()]
    )
    (ROOT / "docs" / "conformance.md").write_text(text, encoding="utf-8")
    print(f"wrote docs/conformance.md ({len(text.splitlines())} lines)")
