"""Offline Nix checks: what can be proven about the flake without network or hardware.

Run by `uv run nox -s nix` (which, when `nix` is missing, installs Debian's nix-bin under
CI=true and skips elsewhere); this script installs nothing. The checks, each reported by name, the run failing if any fails:

  tracked    flake.nix, flake.lock, uv.lock and nix/ are tracked by git (flakes ignore the rest)
  parse      every tracked .nix file parses (`nix-instantiate --parse`)
  metadata   `nix flake metadata --no-update-lock-file` accepts flake.lock: the lock covers every
             input and `follows` of flake.nix (a missing one makes Nix try to download and fail)
  lock       flake.lock is version 7 and every node is a github pin: 40-hex rev, SRI sha256
             narHash, integer lastModified
  manifest   `nix eval --json .#shellManifest` evaluates; the shells are default, npu, npu-intel;
             each names nox sessions that exist in noxfile.py (read with ast, not imported),
             workspace packages and extras that exist, and sets POOT_NIX_SHELL to its own name
             and the uv variables
  toolchain  the XDNA2 toolchain manifest (packages/poot-codegen/src/poot_codegen/xdna/
             toolchain.json) is what the npu shell evaluates to (`toolchain`), and the wheel
             derivations take their version, URL and hash from it, not from literals of their own
  graph      `nix eval --file nix/offline-eval.nix`: every nix/pkgs/*.nix evaluated with stand-ins
             for nixpkgs (as far as the graph goes offline). The npu-intel pairing assert
             (nix/intel-npu-pair.nix) holds for the driver as the shell overrides it, and the
             locked nixpkgs' own driver (nix/intel-npu.json nixpkgs_at_lock, whose rev must be
             flake.lock's) is reported with whether it would trip it; the mlir-aie install step
             runs nix/pkgs/merge-extras.sh; each hash is known or a placeholder that stops
             evaluation naming tools/pin_hashes.py, and the placeholders are the manifests' nulls
  placeholders  every hash nothing offline can compute, listed (not a failure) with the one
             command that computes them once online (`uv run python tools/pin_hashes.py`): a
             null hash in a manifest (tools/pin_hashes.py MANIFESTS), any lib.fakeHash /
             fakeSha256 in a tracked .nix file
  uv-lock    `uv lock --check`: uv.lock matches the workspace's pyproject.toml files, and
             nix/aiecc/uv.lock (aiecc's own environment) its pyproject.toml

What it cannot prove: that any shell builds or can be entered, the fixed-output hashes that need
network (the nixpkgs narHash is copied from uv2nix's lock; see README "Nix shells"), hardware.
"""

from __future__ import annotations

import ast
import json
import re
import shutil
import subprocess
import sys
import time
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # its sibling, however it is loaded
import pin_hashes

ROOT = Path(__file__).resolve().parent.parent
NIX_FLAGS = [
    "--extra-experimental-features",
    "nix-command flakes",
    "--option",
    "substituters",
    "",
    "--option",
    "connect-timeout",
    "3",
    "--option",
    "download-attempts",
    "1",
]
TIMEOUT = 60
SHELLS = {"default", "npu", "npu-intel"}
REQUIRED_KEYS = {
    "description",
    "python",
    "nixpkgs",
    "workspace",
    "pythonExtras",
    "flakePackages",
    "nox",
    "noxAlso",
    "env",
    "envFromBuild",
}
TRACKED = [
    "flake.nix",
    "flake.lock",
    "uv.lock",
    "nix/shells.nix",
    "nix/devshells.nix",
    "nix/intel-npu.json",
    "nix/aiecc/pyproject.toml",
    "nix/aiecc/uv.lock",
]
REV = re.compile(r"[0-9a-f]{40}")
NAR_HASH = re.compile(r"sha256-[A-Za-z0-9+/]{43}=")


class CheckFailed(Exception):
    pass


def run(cmd: list[str]) -> str:
    try:
        proc = subprocess.run(
            cmd, cwd=ROOT, capture_output=True, text=True, timeout=TIMEOUT, check=False
        )
    except FileNotFoundError as exc:
        raise CheckFailed(f"{cmd[0]} not found: {exc}") from exc
    except subprocess.TimeoutExpired as exc:
        raise CheckFailed(f"timed out after {TIMEOUT}s: {' '.join(cmd)}") from exc
    if proc.returncode != 0:
        raise CheckFailed(
            f"exit {proc.returncode}: {' '.join(cmd)}\n{proc.stderr.strip() or proc.stdout.strip()}"
        )
    return proc.stdout


def nix(*args: str) -> str:
    return run(["nix", *NIX_FLAGS, *args])


def check_tracked() -> str:
    tracked = set(run(["git", "ls-files", "--", *TRACKED, "nix"]).split())
    missing = [p for p in TRACKED if p not in tracked]
    if missing:
        raise CheckFailed(f"not tracked by git (flakes ignore them): {missing}; `git add` them")
    return f"{len(tracked)} flake files tracked"


def check_parse() -> str:
    files = run(["git", "ls-files", "*.nix"]).split()
    if not files:
        raise CheckFailed("no tracked .nix files")
    bad = []
    for f in files:
        try:
            run(["nix-instantiate", "--parse", f])
        except CheckFailed as exc:
            bad.append(f"{f}: {exc}")
    if bad:
        raise CheckFailed("\n".join(bad))
    return f"{len(files)} files parse"


def check_metadata() -> str:
    meta = json.loads(nix("flake", "metadata", "--no-update-lock-file", "--json"))
    inputs = sorted(meta["locks"]["nodes"]["root"]["inputs"])
    return f"lock accepted; root inputs {inputs}"


def check_lock() -> str:
    lock = json.loads((ROOT / "flake.lock").read_text())
    errors = []
    if lock.get("version") != 7:
        errors.append(f"version is {lock.get('version')!r}, not 7")
    nodes = lock.get("nodes", {})
    root = lock.get("root")
    if root not in nodes:
        errors.append(f"root node {root!r} missing")
    for name, node in nodes.items():
        for input_name, target in node.get("inputs", {}).items():
            if isinstance(target, str) and target not in nodes:
                errors.append(f"{name}.inputs.{input_name} -> missing node {target!r}")
            if isinstance(target, list) and (not target or target[0] not in nodes):
                errors.append(f"{name}.inputs.{input_name} follows unknown path {target}")
        if name == root:
            continue
        locked = node.get("locked", {})
        original = node.get("original", {})
        where = f"node {name}"
        if locked.get("type") != "github" or original.get("type") != "github":
            errors.append(f"{where}: not a github pin ({locked.get('type')!r})")
        if not REV.fullmatch(str(locked.get("rev", ""))):
            errors.append(f"{where}: rev {locked.get('rev')!r} is not 40 hex digits")
        if not NAR_HASH.fullmatch(str(locked.get("narHash", ""))):
            errors.append(f"{where}: narHash {locked.get('narHash')!r} is not an SRI sha256")
        last_modified = locked.get("lastModified")
        if type(last_modified) is not int:
            errors.append(f"{where}: lastModified {last_modified!r} is not an integer")
        if not locked.get("owner") or not locked.get("repo"):
            errors.append(f"{where}: owner/repo missing")
        if (locked.get("owner"), locked.get("repo")) != (
            original.get("owner"),
            original.get("repo"),
        ):
            errors.append(f"{where}: locked owner/repo differ from original")
    if errors:
        raise CheckFailed("\n".join(errors))
    return f"version 7, {len(nodes) - 1} github pins"


def nox_sessions() -> set[str]:
    """Session names in noxfile.py: functions decorated with @nox.session (name= honoured)."""
    tree = ast.parse((ROOT / "noxfile.py").read_text(), filename="noxfile.py")
    names = set()
    for node in tree.body:
        if not isinstance(node, ast.FunctionDef):
            continue
        for dec in node.decorator_list:
            call = dec if isinstance(dec, ast.Call) else None
            target = call.func if call else dec
            if not (
                isinstance(target, ast.Attribute)
                and target.attr == "session"
                and isinstance(target.value, ast.Name)
                and target.value.id == "nox"
            ):
                continue
            name = node.name
            for kw in call.keywords if call else []:
                if kw.arg == "name" and isinstance(kw.value, ast.Constant):
                    name = str(kw.value.value)
            names.add(name)
    return names


def workspace_extras() -> dict[str, set[str]]:
    """Each workspace package with its extras and dependency groups."""
    found = {}
    for path in [ROOT / "pyproject.toml", *sorted(ROOT.glob("packages/*/pyproject.toml"))]:
        data = tomllib.loads(path.read_text())
        project = data["project"]
        found[project["name"]] = set(project.get("optional-dependencies", {})) | set(
            data.get("dependency-groups", {})
        )
    return found


def check_manifest() -> str:
    manifest = json.loads(nix("eval", "--json", ".#shellManifest"))
    sessions = nox_sessions()
    packages = workspace_extras()
    errors = []
    if set(manifest) != SHELLS:
        errors.append(f"shells are {sorted(manifest)}, expected {sorted(SHELLS)}")
    for shell, spec in manifest.items():
        where = f"shell {shell}"
        missing_keys = REQUIRED_KEYS - set(spec)
        if missing_keys:
            errors.append(f"{where}: missing fields {sorted(missing_keys)}")
            continue
        for session in [spec["nox"], *spec["noxAlso"]]:
            if session not in sessions:
                errors.append(
                    f"{where}: nox session {session!r} not in noxfile.py {sorted(sessions)}"
                )
        for package, extras in spec["workspace"].items():
            if package not in packages:
                errors.append(f"{where}: {package!r} is not a workspace package")
                continue
            unknown = set(extras) - packages[package]
            if unknown:
                errors.append(f"{where}: {package} has no extra or group {sorted(unknown)}")
        env = spec["env"]
        if env.get("POOT_NIX_SHELL") != shell:
            errors.append(f"{where}: POOT_NIX_SHELL is {env.get('POOT_NIX_SHELL')!r}")
        for key, value in {"UV_NO_SYNC": "1", "UV_PYTHON_DOWNLOADS": "never"}.items():
            if env.get(key) != value:
                errors.append(f"{where}: {key} is {env.get(key)!r}, not {value!r}")
        if "UV_PYTHON" not in spec["envFromBuild"]:
            errors.append(f"{where}: UV_PYTHON is not set")
        overlap = set(env) & set(spec["envFromBuild"])
        if overlap:
            errors.append(f"{where}: set both fixed and from the build: {sorted(overlap)}")
        for ref in spec["flakePackages"]:
            if ref.count("#") != 1:
                errors.append(f"{where}: flake package {ref!r} is not <input>#<package>")
    if "npu" in manifest:
        for key in ("PEANO_INSTALL_DIR", "MLIR_AIE_DIR", "POOT_AIECC_PYTHON"):
            if key not in manifest["npu"].get("envFromBuild", {}):
                errors.append(f"shell npu: {key} is not set")
        project = manifest["npu"].get("aiecc", {}).get("project", "")
        if not all((ROOT / project / f).is_file() for f in ("pyproject.toml", "uv.lock")):
            errors.append(
                f"shell npu: aiecc's project {project!r} has no pyproject.toml and uv.lock"
            )
    if "npu-intel" in manifest:
        release = json.loads((ROOT / "nix" / "intel-npu.json").read_text())["release"]
        got = manifest["npu-intel"]["env"].get("POOT_NPU_RELEASE")
        if got != release:
            errors.append(f"shell npu-intel: POOT_NPU_RELEASE is {got!r}, not {release!r}")
    if errors:
        raise CheckFailed("\n".join(errors))
    return f"{len(manifest)} shells, sessions {sorted({s['nox'] for s in manifest.values()})}"


TOOLCHAIN = "packages/poot-codegen/src/poot_codegen/xdna/toolchain.json"
#: Derivations that read a pin from the manifest: (file, the manifest key they read).
PINNED = {
    "nix/pkgs/llvm-aie.nix": "peano",
    "nix/pkgs/mlir-aie.nix": "mlir_aie",
    "nix/pkgs/mlir-python-extras.nix": "mlir_python_extras",
}
READS_MANIFEST = re.compile(
    r"builtins\.fromJSON\s*\(\s*builtins\.readFile\s+(\S+toolchain\.json)\s*\)"
)
#: The function both wheels install through (nix/pkgs/prebuilt-wheel.nix), given their pin.
WHEEL_FUNCTION = "nix/pkgs/prebuilt-wheel.nix"
FAKE = re.compile(r"lib\.fakeHash|lib\.fakeSha256|fakeHash|fakeSha256")


def manifest_readers(path: str) -> list[Path]:
    """The manifest files ``path`` reads with ``builtins.fromJSON (builtins.readFile ...)``,
    resolved against its own directory."""
    text = (ROOT / path).read_text()
    return [((ROOT / path).parent / m).resolve() for m in READS_MANIFEST.findall(text)]


def toolchain_problems() -> list[str]:
    """What makes the shell and the renderer disagree, read from the files alone."""
    want = (ROOT / TOOLCHAIN).resolve()
    errors = []
    # the one wheel function the PINNED wheels call: everything pinned comes from its `pin`
    text = (ROOT / WHEEL_FUNCTION).read_text()
    for field in ("version", "url"):
        if f"inherit (pin) {field};" not in text:
            errors.append(f"{WHEEL_FUNCTION} does not take {field} from its pin")
    for literal in ('version = "', 'url = "', 'hash = "', 'sha256 = "'):
        if literal in text:
            errors.append(f"{WHEEL_FUNCTION} pins {literal.split()[0]} itself, not from its pin")
    for path, key in {"nix/shells.nix": None, **PINNED}.items():
        if manifest_readers(path) != [want]:
            errors.append(f"{path} does not read {TOOLCHAIN} (once)")
        text = (ROOT / path).read_text()
        if key is not None:
            if not re.search(rf"\)\s*\.{key}\s*;", text):
                errors.append(f"{path} does not take the manifest's {key!r} pin")
            for literal in ('version = "', 'url = "', 'hash = "', 'sha256 = "'):
                if literal in text:
                    errors.append(f"{path} pins {literal.split()[0]} itself, not from the manifest")
    return errors


def check_toolchain() -> str:
    errors = toolchain_problems()
    manifest = json.loads(nix("eval", "--json", ".#shellManifest"))
    pinned = json.loads((ROOT / TOOLCHAIN).read_text())
    if manifest.get("npu", {}).get("toolchain") != pinned:
        errors.append(f"the npu shell's toolchain is not {TOOLCHAIN}")
    if errors:
        raise CheckFailed("\n".join(errors))
    return f"npu shell and renderer read {TOOLCHAIN}: mlir-aie {pinned['mlir_aie']['version']}"


def placeholders(files: list[str] | None = None) -> list[str]:
    """Every hash nothing offline can compute (see the module), in ``files`` (default: every
    tracked .nix file)."""
    found = [f"{p.name} is null" for p in pin_hashes.placeholders(ROOT)]
    for path in run(["git", "ls-files", "*.nix"]).split() if files is None else files:
        for n, line in enumerate((ROOT / path).read_text().splitlines(), 1):
            code = line.split("#", 1)[0]  # a comment naming it is no placeholder
            if FAKE.search(code):
                found.append(f"{path}:{n}: {line.strip()}")
            elif "unverified-hash" in line and "hash" in code:
                found.append(f"{path}:{n}: unverified: {code.strip()}")
    return found


def check_placeholders() -> str:
    found = placeholders()
    if not found:
        return "none"
    return (
        f"{len(found)} to fill in with network, once: `{pin_hashes.COMMAND}` computes and "
        'writes them (README "Hardware"):\n  ' + "\n  ".join(found)
    )


INTEL_NPU = "nix/intel-npu.json"


def _hashes(graph: dict[str, Any]) -> dict[str, str]:
    """Each evaluated derivation's hash (or "placeholder"), by "shell.package"."""
    return {
        f"{shell}.{name}": d["hash"]
        for shell, packages in graph.items()
        for name, d in packages.items()
        if isinstance(d, dict) and "hash" in d
    }


def graph_problems(graph: dict[str, Any], lock: dict[str, Any], intel: dict[str, Any]) -> list[str]:
    """What the offline evaluation of the package graph (nix/offline-eval.nix) shows wrong."""
    errors = []
    pair = graph["npu-intel"]
    release = intel["release"]
    for side in ("driver", "compiler"):
        if pair[side]["version"] != release:
            errors.append(f"npu-intel {side} is {pair[side]['version']}, not the release {release}")
    if not pair["paired"]:
        errors.append(
            "npu-intel: the driver/compiler pairing assert (nix/intel-npu-pair.nix) trips"
        )
    locked_rev = lock["nodes"]["nixpkgs"]["locked"]["rev"]
    recorded = intel["nixpkgs_at_lock"]["rev"]
    if recorded != locked_rev:
        errors.append(
            f"{INTEL_NPU} nixpkgs_at_lock is {recorded}, flake.lock's nixpkgs {locked_rev}: "
            "record that rev's intel-npu-driver version"
        )
    if not graph["npu"]["mlir-aie"]["mergesExtras"]:
        errors.append("npu: nix/pkgs/mlir-aie.nix does not merge the extras with merge-extras.sh")
    return errors


def check_graph() -> str:
    graph = json.loads(nix("eval", "--json", "--file", "nix/offline-eval.nix"))
    lock = json.loads((ROOT / "flake.lock").read_text())
    intel = json.loads((ROOT / INTEL_NPU).read_text())
    errors = graph_problems(graph, lock, intel)
    hashes = _hashes(graph)
    open_ = sorted(k for k, v in hashes.items() if v == "placeholder")
    if len(open_) != len(pin_hashes.placeholders(ROOT)):
        errors.append(f"placeholders evaluated {open_} are not the manifests' null hashes")
    if errors:
        raise CheckFailed("\n".join(errors))
    pair = graph["npu-intel"]
    trips = "would trip" if not pair["lockedDriverPairs"] else "would not trip"
    return (
        f"{len(hashes)} derivations evaluate; npu-intel pairs driver and compiler "
        f"{pair['driver']['version']} (the locked nixpkgs' own driver {pair['lockedDriver']} "
        f"{trips} the assert: overridden); mlir-aie merges its extras; placeholders {open_}"
    )


def check_uv_lock() -> str:
    run(["uv", "lock", "--check"])
    run(["env", "UV_PYTHON_DOWNLOADS=never", "uv", "lock", "--check", "--directory", "nix/aiecc"])
    return "uv.lock and nix/aiecc/uv.lock are up to date"


CHECKS: list[tuple[str, Callable[[], str]]] = [
    ("tracked", check_tracked),
    ("parse", check_parse),
    ("metadata", check_metadata),
    ("lock", check_lock),
    ("manifest", check_manifest),
    ("toolchain", check_toolchain),
    ("graph", check_graph),
    ("placeholders", check_placeholders),
    ("uv-lock", check_uv_lock),
]


def main() -> int:
    if shutil.which("nix") is None or shutil.which("nix-instantiate") is None:
        print(
            "FAIL nix: `nix` is not installed (`apt-get install -y nix-bin`, or run `nox -s nix`)"
        )
        return 1
    failed = []
    for name, check in CHECKS:
        start = time.monotonic()
        try:
            detail = check()
        except CheckFailed as exc:
            failed.append(name)
            print(f"FAIL {name}: {exc}")
        except (OSError, ValueError, KeyError, TypeError) as exc:
            failed.append(name)
            print(f"FAIL {name}: {type(exc).__name__}: {exc}")
        else:
            print(f"ok   {name} ({time.monotonic() - start:.1f}s): {detail}")
    if failed:
        print(f"{len(failed)} Nix check(s) failed: {', '.join(failed)}")
        return 1
    print("all offline Nix checks passed (not proven: shell builds, network hashes, hardware)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
