"""Hardware contexts of an XDNA2 NPU, counted for the whole process, and how many of them poot
lets one process hold before an owner has shown more to be safe.

The count. The driver's limit (16 on Strix-class NPUs, amd/xdna-driver ``npu4_regs.c``
``hwctx_limit``) is per device, not per ``XdnaDevice``: two engines in one process share it. So
the contexts held are kept here, in one registry per process keyed by the device (``node``),
under a lock, and every ``XdnaDevice`` reserves its artifact's contexts here before XRT makes
any (``reserve``) and gives them back on unload and close (``release``). A load past the limit
is ``ContextLimit`` naming it, before XRT would refuse the context as something else. Contexts
other processes hold count against the same limit but not here (this registry is the process's):
XRT refusing a context this count admitted is ``DeviceFailed`` (``XdnaDevice.load``). An artifact
holds one context per distinct region artifact, not per region: regions reused across identical
layers run one artifact's context (``poot_codegen.xdna.reuse``), so both the limit and the
allowance below count distinct artifacts.

The allowance. mlir-aie #3654 ("3rd distinct xclbin hw_context silently produces garbage, ERT
reports COMPLETED", XRT 2.21, the line the ``.#npu`` shell pins) has no root cause upstream. Until
an owner's ``poot acceptance`` has run three or more contexts in one process and verified every
result (its check "hardware contexts in one process"), a process holds at most ``SAFE``
contexts: a third is ``ContextLimit`` naming #3654 and the two ways to allow it. The allowance
comes from, in order:

- ``$POOT_XDNA_CONTEXTS`` (an integer: the owner accepts the risk, or has measured it);
- ``lift``: the acceptance check itself, for the process it runs in, while it measures;
- the record that check writes when it passes (``write_record``): ``$POOT_XDNA_CONTEXTS_RECORD``,
  else ``$XDG_STATE_HOME/poot/xdna-contexts.json`` (``~/.local/state`` when that is unset), holding
  how many contexts ran verified and when; the acceptance receipt carries the same check;
- otherwise ``SAFE``.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from poot_ir import DeviceFailed

__all__ = [
    "ALLOW_ENV",
    "ISSUE",
    "NODE",
    "RECORD_ENV",
    "SAFE",
    "Allowance",
    "ContextLimit",
    "allowance",
    "held",
    "lift",
    "record_path",
    "release",
    "reserve",
    "write_record",
]

NODE: Final = "pyxrt.device(0)"
"""The device every XdnaDevice opens (``pyxrt.device(0)``): the key of its context count."""
SAFE: Final = 2
"""Contexts one process may hold before an acceptance run has verified more (#3654 is seen at
the third)."""
ALLOW_ENV: Final = "POOT_XDNA_CONTEXTS"
RECORD_ENV: Final = "POOT_XDNA_CONTEXTS_RECORD"
ISSUE: Final = (
    "mlir-aie #3654: a third distinct xclbin hardware context in one process returned wrong "
    "data while XRT reported COMPLETED"
)
_HOW: Final = (
    f"run `poot acceptance --device xdna` on this machine (its check 'hardware contexts in one "
    f"process' verifies three or more and records the result), or set {ALLOW_ENV}=<n> to allow "
    f"n contexts knowingly"
)


class ContextLimit(DeviceFailed):
    """A load needs more hardware contexts than the device has free, or than this process is
    allowed before three or more have been verified on this machine (mlir-aie #3654)."""


@dataclass(frozen=True, slots=True)
class Allowance:
    """How many contexts a process may hold, and what says so."""

    contexts: int
    source: str


_lock = threading.Lock()
_held: dict[str, int] = {}
_lifted: dict[str, int] = {}


def record_path(env: Mapping[str, str] | None = None) -> Path:
    """Where the acceptance check's record is read and written (see the module)."""
    e = os.environ if env is None else env
    if e.get(RECORD_ENV):
        return Path(e[RECORD_ENV])
    state = e.get("XDG_STATE_HOME", "")
    base = Path(state) if state and os.path.isabs(state) else Path.home() / ".local" / "state"
    return base / "poot" / "xdna-contexts.json"


def _recorded(path: Path) -> Allowance | None:
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
        n = raw["contexts"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if type(n) is not int or n <= SAFE:
        return None
    return Allowance(n, f"acceptance record {path} ({raw.get('verified', 'undated')})")


def allowance(node: str, env: Mapping[str, str] | None = None) -> Allowance:
    """The contexts a process may hold on ``node`` (see the module for the order)."""
    e = os.environ if env is None else env
    if e.get(ALLOW_ENV):
        try:
            n = int(e[ALLOW_ENV])
        except ValueError:
            raise ContextLimit(f"{ALLOW_ENV}={e[ALLOW_ENV]!r} is not an integer") from None
        return Allowance(n, f"{ALLOW_ENV}={n}")
    with _lock:
        lifted = _lifted.get(node)
    if lifted is not None:
        return Allowance(lifted, "lifted by the acceptance check while it measures")
    return _recorded(record_path(e)) or Allowance(SAFE, f"the default before acceptance ({SAFE})")


def write_record(contexts: int, detail: str, env: Mapping[str, str] | None = None) -> Path:
    """Record that ``contexts`` hardware contexts ran in one process with every result verified
    (written by the acceptance check only)."""
    path = record_path(env)
    path.parent.mkdir(parents=True, exist_ok=True)
    body = {
        "contexts": contexts,
        "verified": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "detail": detail,
        "issue": ISSUE,
    }
    path.write_text(json.dumps(body, indent=2) + "\n", encoding="utf-8")
    return path


@contextmanager
def lift(node: str, contexts: int) -> Iterator[None]:
    """Allow ``contexts`` on ``node`` in this process while the acceptance check measures."""
    with _lock:
        before = _lifted.get(node)
        _lifted[node] = contexts
    try:
        yield
    finally:
        with _lock:
            if before is None:
                _lifted.pop(node, None)
            else:
                _lifted[node] = before


def held(node: str) -> int:
    """Contexts the process holds on ``node``."""
    with _lock:
        return _held.get(node, 0)


def reserve(node: str, n: int, limit: int, who: str, env: Mapping[str, str] | None = None) -> None:
    """Reserve ``n`` contexts on ``node`` for one artifact, or ``ContextLimit``: past the
    device's ``limit`` (shared by every ``XdnaDevice`` in the process), or past the allowance."""
    allowed = allowance(node, env)
    with _lock:
        used = _held.get(node, 0)
        if n > limit - used:
            raise ContextLimit(
                f"{who}: hardware contexts: needs {n}, available {limit - used} (of {limit}; "
                f"{used} held in this process by loaded artifacts of every XdnaDevice)"
            )
        if used + n > allowed.contexts:
            raise ContextLimit(
                f"{who}: hardware contexts: needs {n} with {used} held, {used + n} in this "
                f"process, over the {allowed.contexts} allowed ({allowed.source}): {ISSUE}. "
                f"To allow it, {_HOW}"
            )
        _held[node] = used + n


def release(node: str, n: int) -> None:
    """Give back ``n`` contexts on ``node``."""
    with _lock:
        left = _held.get(node, 0) - n
        if left > 0:
            _held[node] = left
        else:
            _held.pop(node, None)
