"""Write flake.lock (version 7) from the real pins below; nothing is fetched or invented.

Offline Nix cannot lock github inputs (`nix flake lock` calls the GitHub API), so the lock is
written from pins whose narHash was computed as `git archive <rev> | nix hash path` on snapshots
of each repository. The one exception is nixpkgs: its narHash is copied from uv2nix's own
flake.lock at the pinned uv2nix rev (nixpkgs is too large to hash here). To move a pin, change it
here (rev, lastModified = committer time, narHash) and rerun:

    uv run python tools/gen_flake_lock.py
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import NamedTuple


class Pin(NamedTuple):
    owner: str
    repo: str
    ref: str | None
    rev: str
    last_modified: int  # committer time of rev, as GitHub reports it
    nar_hash: str
    # A string names another node; a list is a `follows` path from the root.
    inputs: dict[str, str | list[str]]


PINS: dict[str, Pin] = {
    "nixpkgs": Pin(
        "NixOS",
        "nixpkgs",
        "nixos-unstable",
        "d407951447dcd00442e97087bf374aad70c04cea",
        1783224372,
        "sha256-8i/87eeoqiGE4yOTjwSA3Eh/ziJRQEmd/unYU+K27sk=",
        {},
    ),
    "pyproject-nix": Pin(
        "pyproject-nix",
        "pyproject.nix",
        None,
        "7af23cfe91064865ecf2e835da28b45b3c6f49fd",
        1782905613,
        "sha256-SvXJcAemihifkTn4BGvyE5K1FJX9bl4U8DQ5pqKvD0s=",
        {"nixpkgs": ["nixpkgs"]},
    ),
    "uv2nix": Pin(
        "pyproject-nix",
        "uv2nix",
        None,
        "49dac8d206c42175b069b7c6050ba27060a21106",
        1784582828,
        "sha256-uPeuFNSYO429IEiud3iJKWIpN/xrH2CANj1uYNiDxqc=",
        {"nixpkgs": ["nixpkgs"], "pyproject-nix": ["pyproject-nix"]},
    ),
    "pyproject-build-systems": Pin(
        "pyproject-nix",
        "build-system-pkgs",
        None,
        "90ffdeee1a4929b231913df067448cd9803d3e07",
        1786936886,
        "sha256-8SFyOdmcG6Nsh/JzlH812lTI/v+ur06fpQhj/acNn8k=",
        {"nixpkgs": ["nixpkgs"], "pyproject-nix": ["pyproject-nix"], "uv2nix": ["uv2nix"]},
    ),
    # XRT + amdxdna shim (with pyxrt) and the mlir-aie wheel, from a public flake.
    "nix-amd-npu": Pin(
        "robcohen",
        "nix-amd-npu",
        None,
        "b09029f7ce2b0c7e4a9bed14843edcd9324f0e7d",
        1768839283,
        "sha256-s7jyhz2296Yf50USTPoQmZiVo/8w43wdqY0GyC2lENM=",
        {"flake-parts": "flake-parts", "nixpkgs": ["nixpkgs"]},
    ),
    # nix-amd-npu's own inputs, at the revs its flake.lock pins (narHash recomputed, equal).
    "flake-parts": Pin(
        "hercules-ci",
        "flake-parts",
        None,
        "250481aafeb741edfe23d29195671c19b36b6dca",
        1767609335,
        "sha256-feveD98mQpptwrAEggBQKJTYbvwwglSbOv53uCfH9PY=",
        {"nixpkgs-lib": "nixpkgs-lib"},
    ),
    "nixpkgs-lib": Pin(
        "nix-community",
        "nixpkgs.lib",
        None,
        "2075416fcb47225d9b68ac469a5c4801a9c4dd85",
        1765674936,
        "sha256-k00uTP4JNfmejrCLJOwdObYC9jHRrr/5M/a/8L2EIdo=",
        {},
    ),
}
ROOT_INPUTS = ["nixpkgs", "pyproject-nix", "uv2nix", "pyproject-build-systems", "nix-amd-npu"]


def lock() -> dict[str, object]:
    nodes: dict[str, object] = {}
    for name, (owner, repo, ref, rev, last_modified, nar_hash, inputs) in PINS.items():
        original: dict[str, str] = {"owner": owner, "repo": repo, "type": "github"}
        if ref is not None:
            original["ref"] = ref
        node: dict[str, object] = {
            "locked": {
                "lastModified": last_modified,
                "narHash": nar_hash,
                "owner": owner,
                "repo": repo,
                "rev": rev,
                "type": "github",
            },
            "original": dict(sorted(original.items())),
        }
        if inputs:
            node["inputs"] = dict(sorted(inputs.items()))
        nodes[name] = dict(sorted(node.items()))
    nodes["root"] = {"inputs": {name: name for name in sorted(ROOT_INPUTS)}}
    return {"nodes": dict(sorted(nodes.items())), "root": "root", "version": 7}


def main() -> None:
    path = Path(__file__).resolve().parent.parent / "flake.lock"
    path.write_text(json.dumps(lock(), indent=2) + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
