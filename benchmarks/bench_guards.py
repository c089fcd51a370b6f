"""Domain guards: ``Engine.step`` with guards against without, on each stand-in.

Guards on (the default) against guards off, alternated in one run on the same program and
inputs: off is the engine with no host-side domain checks (``entry_domains`` returning None)
and, on XDNA2, kernels generated without guard code (``kernel_guards`` returning nothing), so
the kernels are rebuilt. Programs: a pointwise chain with an exp, a sqrt and a max over
F32[64, 256] (host guards on the arguments, device guards on the computed operands), and on
xdna-host also the RMSNorm example (a fused row kernel). The ratio is on / off; 1.0 is free.
``poot_engine.verify``'s cost is not a guard and is not measured here.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import poot_codegen.xdna.kernels as kernels
import poot_engine.live as engine_module
from poot_codegen.xdna.guards import KernelGuards
from poot_engine import CpuDevice, Engine
from poot_engine.device import Device
from poot_ir import Builder, DType, Program, Storage, parse_program
from poot_npu.vpu import VpuDevice
from poot_npu.xdna_host import XdnaHostDevice

from benchmarks.harness import Figure, median_time

SHAPE = (64, 256)


def chain() -> Program:
    b = Builder("guarded_chain")
    x = b.slot("x", DType.F32, SHAPE)
    w = b.weight("w", DType.F32, SHAPE)
    y = b.exp(b.mul(x, w))
    z = b.max(b.sqrt(b.add(y, 1.0)), 2.0)
    b.output("z", b.sub(z, x))
    return b.build()


def rmsnorm() -> Program:
    text = (Path(__file__).parents[1] / "src/poot/examples/rmsnorm_step.poot").read_text()
    return parse_program(text)


@contextmanager
def _unguarded() -> Iterator[None]:
    # the two module attributes the entry and the kernels look their guards up by, patched for
    # the unguarded arm (neither is re-exported: hence the attr-defined ignores)
    domains, guards = engine_module.entry_domains, kernels.kernel_guards  # type: ignore[attr-defined]
    engine_module.entry_domains = lambda *a, **k: None  # type: ignore[attr-defined]
    kernels.kernel_guards = lambda plan: KernelGuards()  # type: ignore[attr-defined]
    try:
        yield
    finally:
        engine_module.entry_domains, kernels.kernel_guards = domains, guards  # type: ignore[attr-defined]


def _inputs(program: Program) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {
        a.name: rng.uniform(0.5, 1.5, a.var.shape).astype(a.var.dtype.numpy) for a in program.args
    }


def _stepper(device: Device, cache: Path, program: Program) -> Callable[[], object]:
    engine = Engine(device, cache_dir=cache)
    feed = _inputs(program)
    kinds = {a.name: a.storage for a in program.args}
    weights = {n: v for n, v in feed.items() if kinds[n] is Storage.WEIGHT}
    states = {n: v for n, v in feed.items() if kinds[n] is Storage.STATE}
    slots = {n: v for n, v in feed.items() if kinds[n] is Storage.SLOT}
    handle = engine.load_weights(weights) if weights else None
    entry = engine.add_entry(program, handle, initial_state=states)

    def step() -> object:
        engine.reset_state(entry)
        return engine.step(entry, slots)

    return step


def _ratio(name: str, make: Callable[[], Device], program: Program, root: Path) -> list[Figure]:
    on = _stepper(make(), root / f"{name}-on", program)
    with _unguarded():
        off = _stepper(make(), root / f"{name}-off", program)
    t_on, t_off = [], []
    for _ in range(3):  # alternated, so drift lands on both sides
        t_on.append(median_time(on, repeat=5, number=20))
        t_off.append(median_time(off, repeat=5, number=20))
    a, b = min(t_on), min(t_off)
    what = f"{name}: Engine.step {program.name}"
    return [
        Figure(f"{what}, guards on", a * 1e6, "us"),
        Figure(f"{what}, guards off", b * 1e6, "us"),
        Figure(f"{what}, on / off", a / b, "x", aim="close to 1"),
    ]


def run() -> list[Figure]:
    root = Path(tempfile.mkdtemp(prefix="poot-bench-guards-"))
    figures: list[Figure] = []
    figures += _ratio("cpu", CpuDevice, chain(), root)
    f16 = Builder("guarded_f16")
    xh = f16.slot("x", DType.F16, SHAPE)
    f16.output("z", f16.max(f16.sqrt(f16.exp(xh)), 2.0))
    figures += _ratio("vpu-cpu", lambda: VpuDevice("CPU"), f16.build(), root)
    figures += _ratio("vpu-cpu", lambda: VpuDevice("CPU"), chain(), root)
    kernels_dir = root / "kernels"
    figures += _ratio("xdna-host", lambda: XdnaHostDevice(kernels_dir), chain(), root)
    figures += _ratio("xdna-host", lambda: XdnaHostDevice(kernels_dir), rmsnorm(), root)
    return figures
