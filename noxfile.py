"""nox sessions, one per feature flag; `nix/shells.nix` names the same sessions.

Every session runs in the environment `uv run nox` already synced (the uv workspace with its
one lock), so no session installs anything of its own. The hardware sessions first check that
they run inside their Nix shell and that the device is present, and stop with a clear message
otherwise: a missing device is "hardware unavailable", never a pass.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile

import nox

nox.options.default_venv_backend = "none"
#: `uv run nox` on a contributor's machine: the whole package and CLI test run but the long
#: end-to-end tests, lint and types, under ten minutes on a busy two-core machine (issue 26).
DEFAULT = ["tests", "lint", "typecheck"]
#: What CI (`.ci/run`, which sets CI=true) runs besides: the long end-to-end tests, the
#: conformance suite on every device, the oracle at every SIMD level, the JAX frontend on its
#: own interpreter and the offline Nix checks (about 25 minutes, within CI's 90).
CI_ALSO = ["slow", "conformance", "onnx_cases", "oracle_cpu_features", "jax", "nix"]
nox.options.sessions = DEFAULT + (CI_ALSO if os.environ.get("CI") else [])
nox.options.error_on_missing_interpreters = True

PACKAGES = ["ir", "onnx", "jax", "planner", "codegen", "engine", "npu"]
SOURCES = [f"packages/poot-{p}/src" for p in PACKAGES] + ["src"]


#: The conformance suite (programs x targets x devices) and its ONNX node cases on every
#: device (some 2,000 runs, its longest file): each a session of its own, CI runs all three.
CONFORMANCE = "tests/conformance"
ONNX_CASES = f"{CONFORMANCE}/test_onnx_cases.py"


@nox.session
def tests(session: nox.Session) -> None:
    """The test run but the conformance suite (``conformance``, ``onnx_cases``) and the tests
    marked ``slow`` (``slow``). Hardware tests (markers ``xdna``, ``npu_intel``) are collected
    too, so each shows as a skip with "hardware unavailable" and its reason, never a pass."""
    _pytest(session, "-m", "not slow")


@nox.session
def slow(session: nox.Session) -> None:
    """The tests marked ``slow``: whole programs and models end to end on the stand-ins (the
    hand-off between devices, the acceptance probes, the fake-XRT context limits, the ONNX
    node cases through the oracle), each seconds long."""
    _pytest(session, "-m", "slow")


def _pytest(session: nox.Session, *args: str, leave_out: str = CONFORMANCE) -> None:
    # two workers (the machines have two cores), each test file on one worker: a file's
    # module-level caches (a device opened once) stay in one process; ``leave_out``: the part
    # another session runs
    session.run(
        "pytest", "-q", "-n", "2", "--dist", "loadfile", f"--ignore={leave_out}", *args,
        *session.posargs,
    )  # fmt: skip


@nox.session
def onnx_cases(session: nox.Session) -> None:
    """The ONNX node cases (the conformance suite's largest part) on every device, each device
    on one worker (its outcomes are cached in that process), two workers side by side."""
    session.run("pytest", "-q", "-n", "2", "--dist", "loadgroup", ONNX_CASES, *session.posargs)


@nox.session
def conformance(session: nox.Session) -> None:
    """One suite, programs x targets x devices, on every device (absent hardware skips), but
    the ONNX node cases (``onnx_cases``)."""
    _pytest(session, CONFORMANCE, leave_out=ONNX_CASES)


#: Each NPY_DISABLE_CPU_FEATURES value switching this numpy's dispatch down one level more on
#: this processor (the top dispatched feature off, then the top two, ..., down to the baseline).
_CPU_FEATURE_LEVELS = """
from numpy._core import _multiarray_umath as m
found = [f for f in m.__cpu_dispatch__ if m.__cpu_features__[f]]
print("\\n".join(" ".join(found[i:]) for i in range(len(found) - 1, -1, -1)))
"""


@nox.session
def oracle_cpu_features(session: nox.Session) -> None:
    """The oracle's and the ONNX frontend's tests under every level of numpy's SIMD dispatch
    (issue 26: the oracle's bits must not depend on the loops numpy picks on a processor)."""
    levels = session.run("python", "-c", _CPU_FEATURE_LEVELS, silent=True) or ""
    paths = ["packages/poot-ir/tests", "packages/poot-onnx/tests/test_onnx_ops.py"]
    paths += [
        "packages/poot-onnx/tests/test_onnx.py",
        "packages/poot-onnx/tests/test_onnx_weights.py",
    ]
    # the dispatch switched fully up is the ``tests`` session's own run; of the lower levels,
    # those that switch off a whole x86 ISA level (X86_V4: what a processor without AVX-512
    # runs, many AMD ones; X86_V3: the baseline), not each AVX-512 sub-feature, so the default
    # run stays under ten minutes on a busy two-core machine (test_nan_bits, in the tests
    # session, still compares the oracle's NaN bits at every level)
    every = str(levels).splitlines()
    isa = [level for level in every if level.startswith("X86_V")]
    for level in isa or every:
        session.log(f"NPY_DISABLE_CPU_FEATURES={level!r}")
        env = {"NPY_DISABLE_CPU_FEATURES": level}
        session.run("pytest", "-q", "-n", "2", "-p", "no:randomly", *paths, env=env)


@nox.session
def lint(session: nox.Session) -> None:
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")


@nox.session
def typecheck(session: nox.Session) -> None:
    session.run("mypy", *SOURCES)
    # the benchmarks too (their own run: a second root named ``benchmarks`` beside ``src``)
    session.run("mypy", "benchmarks")


#: The interpreter the jax session runs on: jax 0.12 needs Python 3.12+, the workspace is 3.11.
#: uv does not see pyenv's versions through its shims (and would try to download one offline):
#: $POOT_JAX_PYTHON, else pyenv's 3.12, else python3.12 on PATH.
JAX_PYTHON_VERSION = "3.12.1"


def _jax_python() -> str | None:
    given = os.environ.get("POOT_JAX_PYTHON")
    if given:
        return given
    if shutil.which("pyenv"):
        env = {**os.environ, "PYENV_VERSION": JAX_PYTHON_VERSION}
        found = subprocess.run(
            ["pyenv", "which", "python3.12"], env=env, capture_output=True, text=True, check=False
        )
        if found.returncode == 0 and found.stdout.strip():
            return found.stdout.strip()
    return shutil.which("python3.12")


def _jax_run(python: str) -> list[str]:
    """``uv run`` in ``.venv-jax``: every workspace package (the runner plans and runs on the
    devices, the CLI imports ``module:function``) with poot-jax's ``jax`` extra and ``test``
    group, on ``python``."""
    return ["uv", "run", "--python", python, "--all-packages", "--extra", "jax", "--group", "test"]


@nox.session
def jax(session: nox.Session) -> None:
    """The JAX frontend (packages/poot-jax) on Python 3.12 in its own environment (.venv-jax:
    poot-jax with its ``jax`` extra and ``test`` group from the one uv.lock), so the 3.11
    workspace venv is untouched. In the default run (mypy, then the tests with JAX's primitive
    harnesses, the real models on the stand-ins, the runner and the CLI: about 50 s of CPU on
    two workers); on a machine with no Python 3.12 it is skipped with one line saying so,
    except under CI, whose machines have one."""
    python = _jax_python()
    if python is None:
        why = "no Python 3.12 found (jax 0.12 needs it): set POOT_JAX_PYTHON to a python3.12"
        if os.environ.get("CI"):
            session.error(why)
        session.skip(why)
    env = {"UV_PROJECT_ENVIRONMENT": os.path.join(os.getcwd(), ".venv-jax")}
    run = _jax_run(python)
    # the 3.11 typecheck sees jax as Any; here mypy reads jax's own annotations
    session.run(*run, "mypy", "packages/poot-jax/src", env=env, external=True)
    # two workers, a file each (the harness file, the longest, beside the rest)
    tests = ["pytest", "-q", "-p", "no:randomly", "-n", "2", "--dist", "loadfile"]
    tests.append("packages/poot-jax/tests")
    session.run(*run, *tests, *session.posargs, env=env, external=True)


@nox.session
def bench_jax(session: nox.Session) -> None:
    """The JAX frontend's benchmark (benchmarks/bench_jax.py) in the jax session's environment
    (.venv-jax, Python 3.12): import against jax.jit's compile, the oracle against its step."""
    python = _jax_python()
    if python is None:
        session.skip("no Python 3.12 found (jax 0.12 needs it): set POOT_JAX_PYTHON")
    env = {"UV_PROJECT_ENVIRONMENT": os.path.join(os.getcwd(), ".venv-jax")}
    session.run(*_jax_run(python), "python", "-m", "benchmarks", "jax", env=env, external=True)


@nox.session
def bench(session: nox.Session) -> None:
    """Benchmarks: ratios against a baseline measured in the same run, never timed tests."""
    session.run("python", "-m", "benchmarks", *session.posargs)


@nox.session
def models(session: nox.Session) -> None:
    """The real-model suite (pretrained ONNX models shipped in wheels, against ONNX Runtime):
    minutes long, so outside the default run. Needs the ``models`` dependency group: run it as
    ``uv run --group models nox -s models``."""
    session.run("pytest", "-q", "-p", "no:randomly", "models", *session.posargs)


@nox.session
def models_export(session: nox.Session) -> None:
    """Make the models the suite exports rather than installs: all-MiniLM-L6-v2 from its wheel
    through torch, in a pip venv of its own (torch stays out of uv.lock), into
    ``$POOT_MODELS_DIR`` (default ``~/.cache/poot/models``); offline, a few minutes the first
    time. ``nox -s models`` then runs it too (until then its tests skip, naming this). Then the
    seeded architectures of ``tools/export_models.py`` (MobileNetV3-small, a YOLOv8-shaped
    detector, a GPT-2 decoder) in the same venv."""
    session.run("python", "tools/export_minilm.py", *session.posargs)
    session.run("python", "tools/export_models.py", *session.posargs)


def _hardware_session(session: nox.Session, shell: str, marker: str, probe: str) -> None:
    if os.environ.get("POOT_NIX_SHELL") != shell:
        session.error(
            f"run this session inside `nix develop .#{shell}` (POOT_NIX_SHELL is not {shell!r})"
        )
    session.run("python", "-m", "poot", "devices", "--require", probe)
    session.run("pytest", "-q", "-m", marker, "-p", "no:randomly", *session.posargs)


@nox.session
def xdna(session: nox.Session) -> None:
    """The XDNA2 hardware run (AMD Strix / Strix Halo, XRT and pyxrt), inside `nix develop .#npu`."""
    _hardware_session(session, "npu", "xdna", "xdna")


@nox.session
def npu_intel(session: nox.Session) -> None:
    """The Intel NPU4 hardware run (Lunar Lake, Level Zero), inside `nix develop .#npu-intel`."""
    _hardware_session(session, "npu-intel", "npu_intel", "vpu")


@nox.session
def nix(session: nox.Session) -> None:
    """Offline Nix checks: what can be proven about the flake without network or hardware.

    A test command never installs system packages on a contributor's machine: only under CI
    (``CI=true``) does a missing ``nix`` get Debian's ``nix-bin``; elsewhere the checks are
    skipped with one line saying why and how to run them, and the run stays green."""
    if shutil.which("nix") is None:
        if os.environ.get("CI", "").lower() != "true":
            session.skip(NIX_SKIPPED)
        if shutil.which("apt-get") is None:
            session.error("CI=true and no nix on PATH, and no apt-get to install nix-bin with")
        # A fresh machine has no package lists yet: update them before installing.
        session.run("apt-get", "update", "-qq", external=True)
        session.run("apt-get", "install", "-y", "-qq", "nix-bin", external=True)
    # nix keeps an eval and fetcher cache under $XDG_CACHE_HOME/nix: a throwaway one here (and
    # the private store, if one is needed), so the test command writes nothing under the home
    scratch = tempfile.mkdtemp(prefix="poot-nix-cache-")
    try:
        env = _usable_nix_env({"XDG_CACHE_HOME": scratch})
        if env is None:
            if os.environ.get("CI", "").lower() != "true":
                session.skip(NIX_UNUSABLE)
            session.error(
                "nix is on PATH but evaluates nothing, with its daemon or a private store"
            )
        session.run("python", "tools/check_nix.py", env=env)
    finally:
        _remove_tree(scratch)


def _remove_tree(path: str) -> None:
    """Remove ``path`` whole: a Nix store makes its directories read-only."""
    for root, dirs, _ in os.walk(path):
        for d in dirs:
            full = os.path.join(root, d)
            if not os.path.islink(full):
                os.chmod(full, 0o700)
    shutil.rmtree(path, ignore_errors=True)


def _nix_works(env: dict[str, str]) -> bool:
    probe = ["nix-instantiate", "--parse", "--expr", "1"]
    done = subprocess.run(probe, env={**os.environ, **env}, capture_output=True, check=False)
    return done.returncode == 0


def _usable_nix_env(base: dict[str, str]) -> dict[str, str] | None:
    """The environment the checks run nix in: as it is, or, when the daemon is out of reach (a
    non-root user of a multi-user install without access to its socket), a private local store
    in this run's own temporary directory, which every offline check can use; None if neither
    works."""
    if _nix_works(base):
        return base
    private = {**base, "NIX_REMOTE": f"local?root={base['XDG_CACHE_HOME']}/store"}
    return private if _nix_works(private) else None


NIX_UNUSABLE = (
    "offline Nix checks skipped: `nix` is on PATH but cannot evaluate (no access to its daemon "
    "and no private store); run them inside `nix develop -c nox -s nix` or fix the Nix install"
)
NIX_SKIPPED = (
    "offline Nix checks skipped: no `nix` on PATH and not under CI (CI=true installs nix-bin); "
    "to run them: `nix develop -c nox -s nix`, or install Nix and rerun `uv run nox -s nix`"
)
