"""``poot acceptance``: everything the specification claims for one device, run on it, and a
receipt a hardware owner can send back.

The checks, each with a figure and a verdict (``ACCEPTANCE_CHECKS`` lists them by device):

- every capability of the device's target against the oracle, on inputs reaching its domain's
  edges from inside (a verified engine: the worst error over its bound is the figure), and each
  value past the domain, which must be refused with a typed error (the values: each domain's
  own ``Domain.edges``, which the conformance suite and the device tests share);
- XDNA2 (``acceptance.regions``): every region bound of the target table at and one past its
  limit (compute tiles, host streams in and out, tile-local bytes, streams into a tile,
  contexts, host buffers, elements per tensor), several regions in one program, each run
  verified, and the region flag word refusing a value computed outside its domain;
- a legalization rule that claims saturation (xdna2's sigmoid, and SiLU and a masked
  softmax's exponent with it: ``acceptance.legalized``), over the whole finite line;
- Intel: the F32 boundary (65504 runs, the next F32 up is refused) and the narrowing contract's
  normwise error, measured;
- the blob cache: a second process compiles nothing; a damaged entry is recompiled and repaired;
- a missed deadline poisons the device, and a contract violation poisons its entry.

The receipt (JSON) holds the device's identity (part, compiler and toolchain versions and their
digests), poot's version and commit, every check with its figure and verdict, and the measured
contract figures in the form the target tables take, so a receipt can replace an "unmeasured"
figure. On ``cpu``, ``vpu-cpu`` and ``xdna-host`` it says "stand-in". Exit codes (``cli``): 0
every check passed, 1 one failed, 3 the device is not here ("hardware unavailable: ..."), 2 bad
usage.
"""

from __future__ import annotations

import hashlib
import json
import platform
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np
from poot_engine import Engine, Entry
from poot_engine.checks import saturation_limit
from poot_engine.device import Device
from poot_engine.verify import check_results
from poot_ir import (
    Builder,
    DomainError,
    DomainFlagged,
    DType,
    NarrowingRangeError,
    PootError,
    Prim,
    Program,
    evaluate,
)
from poot_npu.registry import DeviceInfo, DeviceKind
from poot_planner import KernelClass, get_target, plan
from poot_planner.features import render_bound
from poot_planner.fp16.saturation import saturates

from poot.acceptance.engine import Check, cache_checks, poisoning_checks
from poot.acceptance.legalized import legalized_checks
from poot.acceptance.regions import region_checks

__all__ = ["Check", "Receipt", "run_acceptance"]

F32 = DType.F32
_REFUSED = (DomainError, DomainFlagged, NarrowingRangeError)


@dataclass(slots=True)
class Receipt:
    device: dict[str, Any]
    poot: dict[str, str]
    checks: list[Check] = field(default_factory=list)
    contracts: list[dict[str, Any]] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return all(c.passed for c in self.checks)

    def to_json(self) -> str:
        body = {
            "device": self.device,
            "poot": self.poot,
            "passed": self.passed,
            "checks": [asdict(c) for c in self.checks],
            "contract_figures": self.contracts,
        }
        return json.dumps(body, indent=2, default=str)


# -- identity ---------------------------------------------------------------------------------


def _digest(path: str) -> str:
    found = shutil.which(path) or path
    try:
        return "sha256:" + hashlib.sha256(Path(found).read_bytes()).hexdigest()
    except OSError:
        return "unavailable"


def _commit() -> str:
    here = Path(__file__).resolve().parent
    try:
        done = subprocess.run(
            ["git", "-C", str(here), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            check=False,
        )
    except OSError:
        return "unknown"
    return done.stdout.strip() if done.returncode == 0 else "unknown"


#: The kernel module each target's NPU is driven by (Linux: amdxdna, intel_vpu).
_MODULES = {"xdna2": "amdxdna", "intel-npu4": "intel_vpu"}


def _driver(target: str) -> str:
    """The NPU's kernel driver as sysfs shows it: its module's version, or whether it is
    loaded (an in-tree module may carry no version)."""
    module = _MODULES.get(target)
    if module is None:
        return "unknown"
    root = Path("/sys/module") / module
    try:
        return f"{module} {(root / 'version').read_text().strip()}"
    except OSError:
        return f"{module} loaded (no version in sysfs)" if root.is_dir() else f"{module} not loaded"


def _identity(info: DeviceInfo, device: Device) -> dict[str, Any]:
    i = device.identity
    return {
        "kernel": platform.release(),
        "driver": _driver(info.target) if info.kind is DeviceKind.HARDWARE else "none (a stand-in)",
        # the NPU firmware's version is shown by the vendor tools (xrt-smi examine; the Intel
        # driver's dmesg line); poot has no read of it
        "firmware": "not read by poot",
        "name": info.name,
        "target": info.target,
        "kind": "stand-in" if info.kind is not DeviceKind.HARDWARE else "hardware",
        "proves": info.proves,
        "part": i.part,
        "compiler": i.compiler,
        "compiler_version": i.compiler_version,
        "compiler_digest": _digest(i.compiler),
        "options": dict(i.options),
    }


# -- capabilities at their domains' edges -----------------------------------------------------


def _past(engine: Engine, entry: Entry, feed: dict[str, np.ndarray], past: float) -> str:
    """One value just past the domain's edge, in place of the first element: refused, or
    (a failure) returned."""
    bad = {k: v.copy() for k, v in feed.items()}
    bad["x"][0, 0] = past
    try:
        engine.step(entry, bad)
    except _REFUSED as err:
        return f"{past!r} refused ({type(err).__name__})"
    return f"{past!r} past the domain was returned"


def _single(prim: Prim, dtype: DType, n: int) -> Program | None:
    b = Builder(f"accept_{prim.value}_{dtype.value}")
    x = b.slot("x", dtype, (2, n))
    if prim.is_unary:
        b.output("y", getattr(b, prim.value)(x))
    elif prim.is_binary:
        b.output("y", getattr(b, prim.value)(x, b.slot("z", dtype, (2, n))))
    elif prim in (Prim.REDUCE_SUM, Prim.REDUCE_MAX):
        b.output("y", getattr(b, prim.value)(x, axes=1))
    elif prim is Prim.MATMUL:  # x @ z^T: every edge meets every other in some product
        b.output("y", b.matmul(x, b.transpose(b.slot("z", dtype, (2, n)), (1, 0))))
    elif prim is Prim.BROADCAST_IN_DIM:  # every edge value copied to three rows of a new axis
        b.output("y", b.broadcast_in_dim(x, (3, 2, n), (1, 2)))
    else:
        return None
    return b.build()


def _capabilities(engine: Engine, target: str, receipt: Receipt) -> Iterator[Check]:
    t = get_target(target)
    for cap in t.capabilities:
        for dtype in sorted(cap.dtypes & {DType.F32, DType.F16}, key=lambda d: d.value):
            edges = cap.contract.domain.edges(dtype)
            inside, past = list(edges.inside), list(edges.past)
            narrowing = t.narrowing
            if narrowing is not None and dtype is not narrowing.device_dtype:
                # an F32 row of a narrowing target holds for what FP16 carries: the rest of
                # the domain is past the narrowing range, refused (typed) on the way in
                top = narrowing.max_magnitude
                past += [v for v in inside if not abs(v) <= top]
                inside = [v for v in inside if abs(v) <= top]
            program = _single(cap.prim, dtype, len(inside))
            if cap.prim is Prim.MATMUL and cap.kernel is not KernelClass.MATMUL:
                program = None  # the XDNA2 tile's contraction (issue 30); the others: to do
            if program is None or not plan(program, target).admitted:
                continue
            name = f"{cap.prim.value} {dtype.value} at its domain's edges"
            try:
                entry = engine.add_entry(program)
                row = np.array(inside, dtype.numpy)
                feed = {a.name: np.stack([row, row[::-1]]) for a in program.args}
                if cap.prim.is_unary or cap.prim.is_binary:
                    # an edge pair whose exact result leaves the domain (1 / 0) is not inside
                    want = evaluate(program, feed)["y"]
                    ops = [feed[a.name] for a in program.args]
                    keep = cap.contract.domain.inside(ops, want)
                    if t.narrowing is not None and saturates(program.eqns[-1]):
                        # a DPU result of magnitude 65504 reads as a saturated overflow and is
                        # refused, typed: the bit-for-bit row holds inside +-65504 only
                        clamp = saturation_limit(t.narrowing.max_magnitude)
                        keep &= np.abs(want) <= clamp
                    feed = {n: np.where(keep, v, v.dtype.type(1)) for n, v in feed.items()}
                got = engine.step(entry, feed)  # verified: a breach raises
                checks = check_results(plan(program, target), feed, got)
                worst = max((c.error_ratio for _, c in checks), default=0.0)
                outcomes = [_past(engine, entry, feed, v) for v in past]
                refused = "; ".join(outcomes) or "nothing past"
                engine.remove_entry(entry)
            except PootError as err:
                yield Check(name, False, detail=f"{type(err).__name__}: {err}")
                continue
            ok = "returned" not in refused
            receipt.contracts.append(
                {
                    "primitive": cap.prim.value,
                    "dtype": dtype.value,
                    "bound": render_bound(cap.contract.bound),
                    "domain": cap.contract.domain.describe(),
                    "measured_error_over_bound": worst,
                    "measured_on": receipt.device["part"],
                }
            )
            yield Check(name, ok, worst, "error/bound", refused)


# -- Intel: the F32 boundary and the narrowing contract ------------------------------------------


def _narrowing(
    engine: Engine, make: Callable[[], Device], target: str, receipt: Receipt
) -> Iterator[Check]:
    n = get_target(target).narrowing
    if n is None:
        return
    b = Builder("accept_boundary")
    x = b.slot("x", F32, (4,))
    b.output("y", b.neg(x))
    entry = engine.add_entry(b.build())
    edge = np.array([n.max_magnitude, -n.max_magnitude, 0.0, 1.0], np.float32)
    got = engine.step(entry, {"x": edge})
    ok = np.array_equal(got["y"], -edge)
    past = edge.copy()
    past[0] = np.nextafter(np.float32(n.max_magnitude), np.float32(np.inf))
    try:
        engine.step(entry, {"x": past})
        refused = False
    except NarrowingRangeError:
        refused = True
    yield Check(
        f"F32 boundary {n.max_magnitude:g}",
        ok and refused,
        float(n.max_magnitude),
        "",
        "the next F32 up refused" if refused else "the next F32 up was returned",
    )
    b = Builder("accept_normwise")
    x = b.slot("x", F32, (16, 64))
    w = b.slot("w", F32, (16, 64))
    b.output("y", b.add(b.mul(x, w), b.exp(b.mul(x, 0.25))))
    program = b.build()
    worst = 0.0
    with Engine(make(), cache_dir=engine.cache.root) as plain:  # measured, so not verified
        e2 = plain.add_entry(program)
        rng = np.random.default_rng(1)
        for _ in range(4):
            feed = {a: rng.uniform(-4, 4, (16, 64)).astype(np.float32) for a in ("x", "w")}
            y = plain.step(e2, feed)["y"].astype(np.float64)
            ref = evaluate(program, feed)["y"].astype(np.float64)
            worst = max(worst, float(np.linalg.norm(y - ref) / np.linalg.norm(ref)))
    receipt.contracts.append(
        {
            "narrowing": {
                "device_dtype": n.device_dtype.value,
                "normwise": worst,
                "max_magnitude": n.max_magnitude,
                "floor": n.floor,
                "measured_on": receipt.device["part"],
            }
        }
    )
    yield Check(
        "narrowing normwise error (measured)",
        worst <= n.normwise,
        worst,
        "relative",
        f"contract {n.normwise:.3g}",
    )


def run_acceptance(info: DeviceInfo, progress: Callable[[Check], None]) -> Receipt:
    """Every check for ``info``'s device (which must be here), reported to ``progress`` as each
    finishes, and the receipt."""
    device = info.make()
    receipt = Receipt(
        _identity(info, device),
        {
            "version": metadata.version("poot"),
            "commit": _commit(),
            "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        },
    )
    root = Path(tempfile.mkdtemp(prefix="poot-acceptance-"))

    def add(checks: Iterator[Check]) -> None:
        for c in checks:
            receipt.checks.append(c)
            progress(c)

    try:
        with Engine(device, cache_dir=root / "cache", verify="always") as engine:
            add(_capabilities(engine, info.target, receipt))
            add(region_checks(engine, info.target))
            add(legalized_checks(engine, info.target))
            add(_narrowing(engine, info.make, info.target, receipt))
        add(cache_checks(info, info.make, root))
        add(poisoning_checks(info.make, root))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return receipt
