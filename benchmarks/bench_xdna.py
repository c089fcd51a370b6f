"""XDNA2 regions: hardware contexts, dispatches and host-boundary bytes per step; kernel builds.

For every example program the xdna2 target admits (``src/poot/examples/*.poot``), for a
64-equation pointwise chain (more tiles than one region holds, so it splits and its running
value crosses to the next region through the scratch arena) and for a padded 3x3 convolution
(run as a matmul of its windows: nine strided slices of the padded input, side by side, made
by host copies), each run on ``XdnaHostDevice`` through the ``Engine``:

- regions: one artifact, one hardware context and one kernel call per step each (the plan's
  ``contexts``, which the loaded design must agree with);
- dispatches per step: the kernel calls the stand-in made in one step (must equal the regions);
- host bytes over the minimum: what the step's shim transfers move between the host arenas and
  the array, both ways, over each argument read once and each result written once. 1.0 means no
  intermediate value ever reaches host memory; a hand-off between regions costs its bytes twice,
  and an argument two regions read is read twice (the chain: its input, read by adds in both
  regions, and its running value out to scratch and back: 5 tensors moved for 2, 2.5x; the
  convolution: its windows, nine times its input, moved in place of the input).

These figures are properties of the design, which the NPU runs as the stand-in does: they hold
on the hardware. The stand-in's own times do not, so the only times reported are its kernel
builds (the host C compiler over the chain's 64 kernels): cold, on an empty kernel cache
directory, and cached (the library found by its key; the compiler only reports its version).
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

from poot_engine import Engine
from poot_ir import Builder, DType, Program, Storage, parse_program, sample_inputs
from poot_npu.xdna_host import XdnaHostDevice
from poot_planner import plan

from benchmarks.harness import Figure, median_time

EXAMPLES = Path(__file__).resolve().parent.parent / "src" / "poot" / "examples"
CHAIN = 64


def chain(n: int = CHAIN) -> Program:
    """``n`` pointwise equations, each reading the one before (tanh, neg, a scale, an add of
    the input): a value every tile hands to the next, never needed by the host."""
    b = Builder(f"chain{n}")
    x = b.slot("x", DType.F32, (64, 256))
    y = x
    for i in range(n):
        match i % 4:
            case 0:
                y = b.tanh(y)
            case 1:
                y = b.neg(y)
            case 2:
                y = b.mul(y, 0.5)
            case _:
                y = b.add(y, x)
    b.output("y", y)
    return b.build()


def conv3x3(channels: int = 16, out: int = 32, size: int = 16) -> Program:
    """A 3x3 convolution with one pixel of zero padding, ``channels`` to ``out`` features on a
    ``size`` x ``size`` image: a layer of a small CNN."""
    b = Builder("conv3x3")
    x = b.slot("x", DType.F32, (1, channels, size, size))
    w = b.weight("w", DType.F32, (out, channels, 3, 3))
    b.output("y", b.conv(x, w, padding=((1, 1), (1, 1))))
    return b.build()


def programs() -> list[Program]:
    out = []
    for path in sorted(EXAMPLES.glob("*.poot")):
        p = parse_program(path.read_text())
        if plan(p, "xdna2").admitted:
            out.append(p)
    return [*out, chain(), conv3x3()]


def _regions(engine: Engine, device: XdnaHostDevice, program: Program) -> list[Figure]:
    pl = plan(program, "xdna2").check()
    inputs = sample_inputs(program, 0)
    weights = {a.name: inputs[a.name] for a in program.args if a.storage is Storage.WEIGHT}
    slots = {a.name: inputs[a.name] for a in program.args if a.storage is Storage.SLOT}
    entry = engine.add_entry(program, engine.load_weights(weights) if weights else None)
    engine.step(entry, slots)
    stats = device.last_run_stats()
    assert stats is not None
    (artifact,) = device.loaded()
    assert len(device.design(artifact).regions) == pl.contexts == stats.regions
    engine.remove_entry(entry)
    name = program.name
    return [
        Figure(f"{name}: regions (hardware contexts)", pl.contexts, "contexts", "<= 16"),
        Figure(f"{name}: dispatches per step", stats.regions, "calls", "= regions"),
        Figure(
            f"{name}: host bytes per step / minimum",
            stats.host_ratio,
            "x",
            "1.0: no intermediate in host memory",
            f"{stats.host_bytes} B moved, {stats.min_host_bytes} B minimum",
        ),
    ]


def _builds(root: Path) -> list[Figure]:
    device = XdnaHostDevice(root / "unused")
    source = device.lower(plan(chain(), "xdna2"))
    cold = []
    for i in range(3):
        fresh = XdnaHostDevice(root / f"cold{i}")
        t0 = time.perf_counter()
        fresh.compile(source)
        cold.append(time.perf_counter() - t0)
    warm = XdnaHostDevice(root / "cold0")
    cached = median_time(lambda: warm.compile(source), repeat=7)
    return [
        Figure(
            f"chain{CHAIN}: host kernel build, cold ({CHAIN} kernels)",
            statistics.median(cold) * 1e3,
            "ms",
            note="empty kernel cache directory: the host C compiler runs",
        ),
        Figure(
            f"chain{CHAIN}: host kernel build, cached",
            cached * 1e3,
            "ms",
            note="the library found by its key (compiler --version only)",
        ),
    ]


def run() -> list[Figure]:
    figures: list[Figure] = []
    with tempfile.TemporaryDirectory(prefix="poot-bench-xdna-") as tmp:
        root = Path(tmp)
        device = XdnaHostDevice(root / "kernels")
        with Engine(device, root / "blobs") as engine:
            for program in programs():
                figures += _regions(engine, device, program)
        figures += _builds(root)
    return figures
