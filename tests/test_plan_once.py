"""Plan once (issue 15, aim 4): one ``poot run`` plans its program once and lowers each entry
once; a partitioned run plans the whole program once and each candidate device span once, and
lowers each device span once. Counted by wrapping ``poot_planner.plan`` wherever it is bound
and each device's ``lower``."""

from __future__ import annotations

import importlib
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from poot_engine import CpuDevice, Engine
from poot_ir import Builder, DType, EngineError, Program, parse_program
from poot_npu.host import HostDevice
from poot_npu.vpu import VpuDevice
from poot_planner import partition

from poot.cli import EXAMPLES, main


@pytest.fixture
def plans(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """Counts of ``plan`` calls by program name, whichever module calls it."""
    for lazy in ("poot_engine.run", "poot_engine.engine", "poot.generate", "poot.session"):
        importlib.import_module(lazy)  # the CLI imports them on first use: bound before we patch
    real = sys.modules["poot_planner.plan"].plan
    counts: Counter[str] = Counter()

    def counting(program: Program, target: object, **options: object) -> object:
        counts[program.name] += 1
        return real(program, target, **options)  # type: ignore[arg-type]

    for module in list(sys.modules.values()):
        if getattr(module, "__name__", "").startswith("poot") and (
            getattr(module, "plan", None) is real
        ):
            monkeypatch.setattr(module, "plan", counting)
    return counts


@pytest.fixture
def lowerings(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    counts: Counter[str] = Counter()
    for cls in (CpuDevice, VpuDevice, HostDevice):
        real = cls.lower

        def lower(self: object, plan: object, real: object = real) -> object:
            counts[plan.source.name] += 1  # type: ignore[attr-defined]
            return real(self, plan)  # type: ignore[operator]

        monkeypatch.setattr(cls, "lower", lower)
    for baking in (VpuDevice, HostDevice):  # they bake weights: the engine lowers them so
        real_baked = baking.lower_baked

        def lower_baked(
            self: object, plan: object, weights: object, real_baked: object = real_baked
        ) -> object:
            counts[plan.source.name] += 1  # type: ignore[attr-defined]
            return real_baked(self, plan, weights)  # type: ignore[operator]

        monkeypatch.setattr(baking, "lower_baked", lower_baked)
    return counts


@pytest.mark.parametrize("example", sorted(p.name for p in EXAMPLES.glob("*.poot")))
def test_poot_run_plans_and_lowers_each_example_once(
    example: str,
    tmp_path: Path,
    plans: Counter[str],
    lowerings: Counter[str],
    capsys: pytest.CaptureFixture[str],
) -> None:
    name = parse_program((EXAMPLES / example).read_text()).name
    main(["--cache-dir", str(tmp_path), "run", str(EXAMPLES / example), "--device", "cpu"])
    capsys.readouterr()
    assert plans == {name: 1}
    assert lowerings == {name: 1}


def test_a_partitioned_poot_run_plans_once_per_span(
    tmp_path: Path,
    plans: Counter[str],
    lowerings: Counter[str],
    capsys: pytest.CaptureFixture[str],
) -> None:
    path = EXAMPLES / "log_state.poot"
    name = parse_program(path.read_text()).name
    argv = ["--cache-dir", str(tmp_path), "run", str(path), "--target", "intel-npu4"]
    assert main([*argv, "--device", "vpu-cpu", "--partition", "--host", "oracle"]) == 0
    assert "span 2: device equations 4..6" in capsys.readouterr().out
    # the whole program once; each of its two device spans once (planned by the partition,
    # loaded by the engine from the plan the span carries), the oracle span never
    assert plans == {name: 1, f"{name}_e0_1": 1, f"{name}_e4_6": 1}
    assert lowerings == {f"{name}_e0_1": 1, f"{name}_e4_6": 1}
    plans.clear()
    lowerings.clear()
    # with the host span on the compiled host device (the default): that span once more, for
    # the host device's target, and lowered once there
    assert main([*argv, "--device", "vpu-cpu", "--partition"]) == 0
    assert "span 1: host device equations 2..3" in capsys.readouterr().out
    spans = {f"{name}_e0_1": 1, f"{name}_e2_3": 1, f"{name}_e4_6": 1}
    assert plans == {name: 1, **spans}
    assert lowerings == spans


def _refused_in_the_middle() -> Program:
    # on intel-npu4, a round trip through i32 is refused: device span, oracle span, device span
    b = Builder("mid")
    x = b.slot("x", DType.F32, (4,))
    y = b.convert(b.convert(b.add(x, 1.0), DType.I32), DType.F32)
    b.output("z", b.mul(y, 2.0))
    return b.build()


def test_engine_stats_count_plans_and_lowerings(
    tmp_path: Path, plans: Counter[str], lowerings: Counter[str]
) -> None:
    program = _refused_in_the_middle()
    spans = partition(program, "intel-npu4")
    device_spans = [s for s in spans if s.device]
    assert [s.device for s in spans] == [True, False, True]
    plans.clear()
    with Engine(VpuDevice("CPU"), tmp_path / "a") as engine:
        entry = engine.add_partitioned(program)
        x = np.linspace(0, 3, 4, dtype=np.float32)
        engine.step(entry, {"x": x})
        s = engine.stats()
        # the whole program, then (inside partition) each device span's candidate, once each
        assert s.plans == 1 and sum(plans.values()) == 1 + len(device_spans)
        assert s.lowerings == len(device_spans) == sum(lowerings.values())
    plans.clear()
    with Engine(CpuDevice(), tmp_path / "b") as engine:
        engine.add_entry(program)
        assert engine.stats().plans == 1 and plans == {"mid": 1}
        intel = device_spans[0].plan
        assert intel is not None
        with pytest.raises(EngineError, match="intel-npu4"):
            engine.add_entry(intel)  # a plan for another target is refused, not run
        assert engine.stats().plans == 1 and engine.stats().lowerings == 1
