"""Export the real-model suite's seeded models to ONNX, offline: a MobileNetV3-small (a
depthwise-separable classifier), a YOLOv8-shaped detector (its SPPF block: padded 5x5 max
pools), a GPT-2-style decoder without a KV cache (a causal mask that torch folds to a
constant of ``finfo(float32).min``), and three ``transformers`` models as their exports write
them: MobileNetV2 with TF-style padding (an explicit ``Pad`` before each strided convolution),
BERT (its ``token_type_ids`` buffer gathered by ``GatherElements`` along 512) and T5's encoder
(relative position buckets, and its padding mask applied by ``Where(mask, 0, finfo.min)``).

No pretrained weights ship for these in a wheel the project can use, and nothing may be
downloaded, so each is its architecture with random weights from a fixed seed (batch-norm
statistics randomised too, so no layer is an identity): what the suite tests is the program
poot imports, plans and runs, against ONNX Runtime on the same file. MobileNetV3-small is
written out here from torchvision's configuration (its table of inverted-residual blocks,
squeeze-excite and hard-swish; torchvision's own wheel does not import beside the pinned
CPU torch); the decoder is ``transformers``' ``GPT2LMHeadModel`` at a small config, exported
with the eager attention and a mask of ones (torch folds the causal mask to a constant).

Needs torch, which stays out of ``uv.lock``: this runs in the export venv of
``tools/export_minilm.py`` (the same pins, made and reused by it), the TorchScript exporter,
opset 17. Writes ``<models dir>/<name>/model.onnx`` and ``export.json`` (the versions and the
file's sha256) for each. Run: ``uv run python tools/export_models.py`` (or ``uv run --group
models nox -s models_export``). Nothing here runs in the default test run.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from export_minilm import PINS, ensure_venv, sha256

from models.catalog import models_dir

#: the models this tool makes (their catalog names)
NAMES = (
    "mobilenet_v3_small",
    "detector",
    "gpt2_tiny",
    "mobilenet_v2_tf",
    "bert_tiny",
    "t5_encoder",
)

# Run inside the export venv: argv[1] is the models dir, the rest the names to export; prints
# the versions as JSON.
_CHILD = r"""
import json, os, pathlib, sys
os.environ["HF_HUB_OFFLINE"] = "1"
import onnx, torch, transformers
from torch import nn

out = pathlib.Path(sys.argv[1])
which = sys.argv[2:]
torch.manual_seed(0)

def export(model, args, path, names, outs, **kw):
    path.parent.mkdir(parents=True, exist_ok=True)
    with torch.no_grad():
        torch.onnx.export(model.eval(), args, str(path), input_names=names, output_names=outs,
                          opset_version=17, dynamo=False, **kw)

def conv(c1, c2, k=1, s=1):
    return nn.Sequential(nn.Conv2d(c1, c2, k, s, k // 2, bias=False), nn.BatchNorm2d(c2), nn.SiLU())

class SPPF(nn.Module):  # YOLOv5/v8's spatial pyramid pooling: three padded 5x5 max pools
    def __init__(self, c1, c2):
        super().__init__()
        self.cv1, self.cv2 = conv(c1, c1 // 2), conv(c1 // 2 * 4, c2)
        self.m = nn.MaxPool2d(5, 1, 2)
    def forward(self, x):
        y = [self.cv1(x)]
        for _ in range(3):
            y.append(self.m(y[-1]))
        return self.cv2(torch.cat(y, 1))

class Detector(nn.Module):  # a YOLOv8-n-shaped detector, small: backbone, SPPF, two-scale head
    def __init__(self, nc=8, reg=16):
        super().__init__()
        self.stem = nn.Sequential(conv(3, 16, 3, 2), conv(16, 32, 3, 2), conv(32, 32, 3))
        self.p4 = nn.Sequential(conv(32, 64, 3, 2), conv(64, 64, 3))
        self.p5 = nn.Sequential(conv(64, 96, 3, 2), SPPF(96, 96))
        self.up = nn.Upsample(scale_factor=2.0, mode="nearest")
        self.fuse = conv(96 + 64, 64, 3)
        self.box = nn.ModuleList([nn.Conv2d(c, 4 * reg, 1) for c in (64, 96)])
        self.cls = nn.ModuleList([nn.Conv2d(c, nc, 1) for c in (64, 96)])
    def forward(self, x):
        p4 = self.p4(self.stem(x))
        p5 = self.p5(p4)
        f4 = self.fuse(torch.cat([self.up(p5), p4], 1))
        outs = [torch.cat([b(f), c(f).sigmoid()], 1).flatten(2) for f, b, c in zip((f4, p5), self.box, self.cls)]
        return torch.cat(outs, 2)


def _div(v, d=8):
    n = max(d, int(v + d / 2) // d * d)
    return n + d if n < 0.9 * v else n

class SE(nn.Module):
    def __init__(self, c):
        super().__init__()
        s = _div(c // 4)
        self.fc1, self.fc2 = nn.Conv2d(c, s, 1), nn.Conv2d(s, c, 1)
    def forward(self, x):
        w = nn.functional.adaptive_avg_pool2d(x, 1)
        return x * nn.functional.hardsigmoid(self.fc2(nn.functional.relu(self.fc1(w))))

def cbn(c1, c2, k, s, groups=1, act=None):
    layers = [nn.Conv2d(c1, c2, k, s, (k - 1) // 2, groups=groups, bias=False), nn.BatchNorm2d(c2)]
    return nn.Sequential(*layers, *([act()] if act else []))

class Block(nn.Module):  # inverted residual: expand 1x1, depthwise kxk, squeeze-excite, project 1x1
    def __init__(self, c1, k, exp, c2, se, hs, s):
        super().__init__()
        act = nn.Hardswish if hs else nn.ReLU
        layers = [cbn(c1, exp, 1, 1, act=act)] if exp != c1 else []
        layers += [cbn(exp, exp, k, s, groups=exp, act=act)]
        layers += [SE(exp)] if se else []
        layers += [cbn(exp, c2, 1, 1)]
        self.body, self.res = nn.Sequential(*layers), s == 1 and c1 == c2
    def forward(self, x):
        y = self.body(x)
        return x + y if self.res else y

# torchvision's mobilenet_v3_small table (in, kernel, expanded, out, SE, hard-swish, stride)
MNV3_SMALL = [(16, 3, 16, 16, 1, 0, 2), (16, 3, 72, 24, 0, 0, 2), (24, 3, 88, 24, 0, 0, 1),
              (24, 5, 96, 40, 1, 1, 2), (40, 5, 240, 40, 1, 1, 1), (40, 5, 240, 40, 1, 1, 1),
              (40, 5, 120, 48, 1, 1, 1), (48, 5, 144, 48, 1, 1, 1), (48, 5, 288, 96, 1, 1, 2),
              (96, 5, 576, 96, 1, 1, 1), (96, 5, 576, 96, 1, 1, 1)]

class MobileNetV3Small(nn.Module):
    def __init__(self, classes=1000):
        super().__init__()
        self.features = nn.Sequential(cbn(3, 16, 3, 2, act=nn.Hardswish),
                                      *[Block(*row) for row in MNV3_SMALL],
                                      cbn(96, 576, 1, 1, act=nn.Hardswish))
        self.classifier = nn.Sequential(nn.Linear(576, 1024), nn.Hardswish(), nn.Linear(1024, classes))
    def forward(self, x):
        return self.classifier(torch.flatten(nn.functional.adaptive_avg_pool2d(self.features(x), 1), 1))

def randomize_bn(m):
    # seeded BN statistics and affine, so eval-mode batch norms are not identities
    for mod in m.modules():
        if isinstance(mod, nn.BatchNorm2d):
            with torch.no_grad():
                mod.running_mean.uniform_(-0.1, 0.1)
                mod.running_var.uniform_(0.5, 1.5)
                mod.weight.uniform_(0.8, 1.2)
                mod.bias.uniform_(-0.1, 0.1)
    return m

record = {"torch": torch.__version__, "transformers": transformers.__version__, "onnx": onnx.__version__}
if "mobilenet_v3_small" in which:
    m = randomize_bn(MobileNetV3Small())
    export(m, (torch.rand(1, 3, 224, 224),), out / "mobilenet_v3_small" / "model.onnx", ["x"], ["logits"])
if "detector" in which:
    m = randomize_bn(Detector())
    export(m, (torch.rand(1, 3, 128, 128),), out / "detector" / "model.onnx", ["images"], ["preds"])
if "gpt2_tiny" in which:
    from transformers import GPT2Config, GPT2LMHeadModel
    cfg = GPT2Config(vocab_size=512, n_positions=64, n_embd=64, n_layer=2, n_head=4, use_cache=False)
    cfg._attn_implementation = "eager"
    lm = GPT2LMHeadModel(cfg).eval()
    class LM(nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m
        def forward(self, input_ids):
            return self.m(input_ids=input_ids, attention_mask=torch.ones_like(input_ids), use_cache=False).logits
    export(LM(lm), (torch.randint(0, 512, (1, 16)),), out / "gpt2_tiny" / "model.onnx", ["input_ids"], ["logits"])
def torch_init(m):
    # PyTorch's own default init for every conv and linear (transformers' vision models draw
    # theirs at std 0.02, under which a MobileNetV2's logits vanish to 1e-25), then seeded BN
    for mod in m.modules():
        if isinstance(mod, (nn.Conv2d, nn.Linear)):
            mod.reset_parameters()
    return randomize_bn(m)

class Out(nn.Module):  # a transformers model's one tensor: logits or the last hidden state
    def __init__(self, m, field):
        super().__init__()
        self.m, self.field = m, field
    def forward(self, *args):
        names = ["pixel_values"] if len(args) == 1 else ["input_ids", "attention_mask"]
        return getattr(self.m(**dict(zip(names, args))), self.field)

if "mobilenet_v2_tf" in which:
    from transformers import MobileNetV2Config, MobileNetV2ForImageClassification
    cfg = MobileNetV2Config(depth_multiplier=0.5, image_size=96, num_labels=10)  # tf_padding
    m = torch_init(MobileNetV2ForImageClassification(cfg))
    export(Out(m, "logits"), (torch.rand(1, 3, 96, 96),), out / "mobilenet_v2_tf" / "model.onnx", ["pixel_values"], ["logits"])
text = (torch.randint(0, 512, (2, 16)), torch.tensor([[1] * 16, [1] * 10 + [0] * 6]))
if "bert_tiny" in which:
    from transformers import BertConfig, BertModel
    cfg = BertConfig(vocab_size=512, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128)
    cfg._attn_implementation = "eager"
    export(Out(BertModel(cfg), "last_hidden_state"), text, out / "bert_tiny" / "model.onnx", ["input_ids", "attention_mask"], ["hidden"])
if "t5_encoder" in which:
    from transformers import T5Config, T5EncoderModel
    cfg = T5Config(vocab_size=512, d_model=64, d_kv=16, d_ff=128, num_layers=2, num_heads=4)
    cfg._attn_implementation = "eager"
    export(Out(T5EncoderModel(cfg), "last_hidden_state"), text, out / "t5_encoder" / "model.onnx", ["input_ids", "attention_mask"], ["hidden"])
print(json.dumps(record))
"""


def export(out: Path, env: Path, names: tuple[str, ...]) -> dict[str, object]:
    py = ensure_venv(env)
    done = subprocess.run(
        [str(py), "-c", _CHILD, str(out), *names], check=True, stdout=subprocess.PIPE, text=True
    )  # the child's stderr (a failed export's traceback) goes to the terminal
    versions = json.loads(done.stdout.strip().splitlines()[-1])
    records: dict[str, object] = {}
    for name in names:
        path = out / name / "model.onnx"
        record = {
            "model": name,
            "weights": "random, torch.manual_seed(0)",
            "pins": list(PINS),
            "versions": versions,
            "sha256": {path.name: sha256(path)},
        }
        (out / name / "export.json").write_text(json.dumps(record, indent=2) + "\n")
        records[name] = record
    return records


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=None, help="default: <models dir>")
    ap.add_argument("--venv", type=Path, default=None, help="default: <models dir>/export-venv")
    ap.add_argument("--force", action="store_true", help="export again over existing files")
    args = ap.parse_args(argv)
    out = args.out or models_dir()
    todo = tuple(n for n in NAMES if args.force or not (out / n / "export.json").exists())
    if not todo:
        print(f"{', '.join(NAMES)} exist in {out} (--force to export again)")
        return
    records = export(out, args.venv or models_dir() / "export-venv", todo)
    print(json.dumps(records, indent=2))


if __name__ == "__main__":
    main()
