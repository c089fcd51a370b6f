"""The README's Python example runs as written, and its result matches the oracle."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

README = Path(__file__).resolve().parents[1] / "README.md"


def test_the_python_example_runs_and_matches_the_oracle() -> None:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.S)
    assert blocks, "the README has no Python example"
    scope: dict[str, object] = {}
    exec(compile(blocks[0], "README.md", "exec"), scope)
    from poot_ir import evaluate

    out, prog = scope["out"], scope["prog"]
    assert isinstance(out, dict)
    x = np.random.default_rng(0).standard_normal((8, 64)).astype(np.float32)
    want = evaluate(
        prog, {"x": x, "w": np.ones(64, np.float32), "acc": np.zeros((8, 64), np.float32)}
    )  # type: ignore[arg-type]
    bound = 8.5e-6  # the fused RMSNorm's derived relative bound (about 8.3e-6 for 64 columns)
    assert np.all(np.abs(out["y"] - want["y"]) <= bound * np.abs(want["y"]))
