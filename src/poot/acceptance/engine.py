"""The engine's own claims for ``poot acceptance``: the blob cache across processes and its
repair of a damaged entry, a missed deadline poisoning the device, and a contract violation
poisoning its entry (a device made to return one wrong element)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from poot_engine import Engine
from poot_engine.device import Device
from poot_ir import (
    ContractViolation,
    DeadlineExceeded,
    DevicePoisoned,
    EntryPoisoned,
)
from poot_npu.registry import DeviceInfo
from poot_planner.xdna2.probes import neg_chain

__all__ = ["Check", "cache_checks", "poisoning_checks"]


@dataclass(frozen=True, slots=True)
class Check:
    name: str
    passed: bool
    figure: float | None = None
    unit: str = ""
    detail: str = ""


_SECOND = """
import sys
from pathlib import Path
from poot_engine import Engine
from poot_npu.registry import device_info
from poot_planner.xdna2.probes import neg_chain
with Engine(device_info(sys.argv[1]).make(), cache_dir=Path(sys.argv[2])) as e:
    e.add_entry(neg_chain(3))
    s = e.stats()
    print(s.compiles, s.cache_hits)
"""


def cache_checks(info: DeviceInfo, make: Callable[[], Device], root: Path) -> Iterator[Check]:
    cache = root / "cache-check"  # its own: the entry damaged is the one this check made
    with Engine(make(), cache_dir=cache) as e:
        e.add_entry(neg_chain(3))
    done = subprocess.run(
        [sys.executable, "-c", _SECOND, info.name, str(cache)],
        capture_output=True,
        text=True,
        check=False,
    )
    figures = done.stdout.split()
    ok = done.returncode == 0 and figures[:1] == ["0"]
    yield Check(
        "cache: a second process compiles nothing",
        ok,
        float(figures[0]) if figures else None,
        "compiles",
        done.stderr.strip()[-200:],
    )
    blobs = sorted(cache.glob("*.blob"))
    if blobs:
        data = bytearray(blobs[0].read_bytes())
        data[len(data) // 2] ^= 0xFF
        blobs[0].write_bytes(bytes(data))
    with Engine(make(), cache_dir=cache, verify="always") as e:
        entry = e.add_entry(neg_chain(3))
        e.step(entry, {"x": np.ones((2, 8), np.float32)})
        repairs = e.stats().cache_repairs
    yield Check("cache: a damaged entry is repaired", repairs == 1, repairs, "repairs")


class _Wrong:
    """A device whose results are off by one in element 0: a contract violation to catch."""

    def __init__(self, device: Device) -> None:
        self._d = device

    def __getattr__(self, name: str) -> Any:
        return getattr(self._d, name)

    def dispatch(self, artifact: Any, buffers: tuple[Any, ...], deadline_s: float) -> None:
        self._d.dispatch(artifact, buffers, deadline_s)
        out = self._d.read(buffers[-1])  # the last buffer is the artifact's output
        out.reshape(-1)[0] += 1
        self._d.write(buffers[-1], out)


def poisoning_checks(make: Callable[[], Device], root: Path) -> Iterator[Check]:
    with Engine(_Wrong(make()), cache_dir=root / "cache", verify="always") as e:
        entry = e.add_entry(neg_chain(3))
        try:
            e.step(entry, {"x": np.ones((2, 8), np.float32)})
            caught = "returned"
        except ContractViolation:
            try:
                e.step(entry, {"x": np.ones((2, 8), np.float32)})
                caught = "violation, then the entry ran again"
            except EntryPoisoned:
                caught = "violation, then the entry poisoned"
    yield Check(
        "a contract violation poisons its entry", caught.endswith("poisoned"), detail=caught
    )
    program = neg_chain(3, (512, 1024))
    with Engine(make(), cache_dir=root / "cache", deadline_s=1e-6) as e:
        entry = e.add_entry(program)
        x = np.ones((512, 1024), np.float32)
        try:
            for _ in range(50):
                e.step(entry, {"x": x})
            what = "never missed"
        except DeadlineExceeded:
            try:
                e.step(entry, {"x": x})
                what = "missed, then ran again"
            except DevicePoisoned:
                what = "missed, then poisoned"
    yield Check("a missed deadline poisons the device", what.endswith("poisoned"), 1e-6, "s", what)
