"""Fill in every placeholder fixed-output hash of the Nix shells, once, on a machine with network.

    uv run python tools/pin_hashes.py            # compute and write every null hash
    uv run python tools/pin_hashes.py --check    # list them, change nothing (offline)

The manifests (``MANIFESTS``) hold each pinned download with its ``hash``; a null ``hash`` is a
placeholder that nothing offline can compute, and evaluating a shell that needs it stops
naming this command (``nix/placeholder.nix``). For each placeholder, by the entry's ``fetch``:

- ``url`` (the default: every entry with a ``url``, fetched by ``fetchurl``): the file the URL
  serves is downloaded and its sha256 written as Nix's SRI form, ``sha256-<base64>``, the hash
  ``fetchurl`` checks. Computed here in Python (``hashlib``); no Nix needed.
- ``github-submodules`` (``fetchFromGitHub { fetchSubmodules = true; }``): the NAR hash of the
  tag's tree with its submodules, which only Nix computes:
  ``nix flake prefetch --json git+https://github.com/OWNER/REPO?ref=refs/tags/TAG&submodules=1``
  (its ``hash``; the git fetcher and fetchgit both hash the checkout without ``.git``). If the
  first build still reports a hash mismatch, the hash Nix says it got is the one to write.

A hash already written is never recomputed. The manifests are rewritten with two-space JSON,
as they are kept; ``git diff`` shows what changed. ``nox -s nix`` prints this command while a
placeholder is left.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import shutil
import subprocess
import sys
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
MANIFESTS = (
    "packages/poot-codegen/src/poot_codegen/xdna/toolchain.json",
    "nix/intel-npu.json",
)
COMMAND = "uv run python tools/pin_hashes.py"
NIX = ["nix", "--extra-experimental-features", "nix-command flakes"]


class PinError(Exception):
    """A placeholder that could not be computed (the message says which and why)."""


@dataclass(frozen=True, slots=True)
class Placeholder:
    """One null ``hash``: in ``manifest`` at the JSON path ``where``, its entry ``entry``."""

    manifest: str
    where: tuple[str, ...]
    entry: dict[str, Any]

    @property
    def name(self) -> str:
        return f"{self.manifest}: {'.'.join(self.where)}.hash"

    @property
    def fetch(self) -> str:
        return str(self.entry.get("fetch", "url"))


def sri(digest: bytes) -> str:
    """Nix's SRI form of a sha256 digest."""
    return "sha256-" + base64.b64encode(digest).decode("ascii")


def sha256_of_url(url: str, chunk: int = 1 << 20) -> str:
    """The SRI sha256 of what ``url`` serves (any scheme urllib opens: https, file)."""
    h = hashlib.sha256()
    try:
        with urllib.request.urlopen(url, timeout=300) as response:
            while block := response.read(chunk):
                h.update(block)
    except (OSError, ValueError) as err:
        raise PinError(f"{url}: cannot download: {err}") from None
    return sri(h.digest())


def nar_hash_of_github_submodules(entry: dict[str, Any]) -> str:
    """The NAR hash of a GitHub tag's tree with its submodules (see the module)."""
    if shutil.which("nix") is None:
        raise PinError("computing a fetchFromGitHub (submodules) hash needs `nix` on PATH")
    ref = (
        f"git+https://github.com/{entry['owner']}/{entry['repo']}"
        f"?ref=refs/tags/{entry['tag']}&submodules=1"
    )
    done = subprocess.run(
        [*NIX, "flake", "prefetch", "--json", ref], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise PinError(f"nix flake prefetch {ref}: {done.stderr.strip()}")
    got = json.loads(done.stdout)
    value = got.get("hash") or got.get("narHash")
    if not isinstance(value, str) or not value.startswith("sha256-"):
        raise PinError(f"nix flake prefetch {ref} gave no sha256 hash: {done.stdout.strip()}")
    return value


COMPUTE: dict[str, Callable[[dict[str, Any]], str]] = {
    "url": lambda entry: sha256_of_url(str(entry["url"])),
    "github-submodules": nar_hash_of_github_submodules,
}


def _walk(node: Any, where: tuple[str, ...]) -> Iterator[tuple[tuple[str, ...], dict[str, Any]]]:
    if isinstance(node, dict):
        if "hash" in node and node["hash"] is None:
            yield where, node
        for key, value in node.items():
            yield from _walk(value, (*where, str(key)))


def placeholders(root: Path = ROOT) -> list[Placeholder]:
    """Every null hash of every manifest under ``root``, in manifest order."""
    out = []
    for rel in MANIFESTS:
        raw = json.loads((root / rel).read_text(encoding="utf-8"))
        out += [Placeholder(rel, where, entry) for where, entry in _walk(raw, ())]
    return out


def pin(root: Path = ROOT, report: Callable[[str], None] = print) -> tuple[list[str], list[str]]:
    """Compute and write every placeholder under ``root``: (written, failed), each a line."""
    written, failed = [], []
    for rel in MANIFESTS:
        path = root / rel
        raw = json.loads(path.read_text(encoding="utf-8"))
        changed = False
        for where, entry in list(_walk(raw, ())):
            p = Placeholder(rel, where, entry)
            compute = COMPUTE.get(p.fetch)
            try:
                if compute is None:
                    raise PinError(f"unknown fetch {p.fetch!r} (known: {sorted(COMPUTE)})")
                entry["hash"] = compute(entry)
            except (PinError, KeyError) as err:
                failed.append(f"{p.name}: {err}")
                report(f"FAIL {p.name}: {err}")
                continue
            changed = True
            written.append(f"{p.name} = {entry['hash']}")
            report(f"ok   {p.name} = {entry['hash']}")
        if changed:
            path.write_text(json.dumps(raw, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return written, failed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--check", action="store_true", help="list the placeholders and change nothing"
    )
    args = parser.parse_args(argv)
    if args.check:
        found = placeholders()
        for p in found:
            print(f"placeholder {p.name} ({p.fetch})")
        print(f"{len(found)} placeholder(s); `{COMMAND}` computes them, once, online")
        return 0
    written, failed = pin()
    print(f"{len(written)} hash(es) written, {len(failed)} failed")
    if written:
        print("commit the manifests (git diff shows the hashes), then `nix develop .#npu`")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
