"""Prefill on one device, decode on another: the KV-cache handoff between every pair of
hardware-free devices (cpu, vpu-cpu, xdna-host), against a whole run on the oracle. Pairs with
an NPU (vpu, xdna) carry its marker and skip with "hardware unavailable" where it is absent.

The decoder (``poot.decoder``) is loaded once per device for the module (the blob cache is
shared, so ``poot generate`` below loads from it). Each handoff's greedy tokens must equal the
whole oracle run's, token for token, for 32 decode steps, and every logit must stay within the
destination's numerics class after the handoff (``poot.generate``). A bad handoff (another
shape, another dtype, a value the destination cannot hold, a closed source) is a typed error
that changes no state on either side.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from poot_engine import Engine, Entry, handoff
from poot_ir import (
    Builder,
    DeviceFailed,
    DType,
    NarrowingRangeState,
    Program,
    StateError,
    Storage,
    evaluate,
    format_program,
    parse_program,
)
from poot_ir.numerics import Bounded, Exact, NarrowStorage
from poot_npu.registry import DeviceKind, device_info, make_device
from poot_planner import plan

from poot.cli import main
from poot.decoder import EXAMPLES, build_decode, build_prefill, weights
from poot.generate import Loaded, OracleRun, oracle_run, prompt_tokens, run_handoff

CFG = EXAMPLES["tiny-decoder"]
PROGRAMS = (build_prefill(CFG), build_decode(CFG))
# the stand-ins run everywhere; the NPUs carry their marker and skip where they are absent
DEVICES = ("cpu", "vpu-cpu", "xdna-host", "vpu", "xdna")
_MARKS = {"xdna": pytest.mark.xdna, "vpu": pytest.mark.npu_intel}
PAIRS = [
    pytest.param(a, b, id=f"{a}-to-{b}", marks=[_MARKS[n] for n in {a, b} if n in _MARKS])
    for a, b in itertools.product(DEVICES, DEVICES)
]
STEPS = 32


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("handoff-cache")


class _Devices:
    """Each device's decoder, loaded once for the module when a test first needs it."""

    def __init__(self, cache_dir: Path) -> None:
        self.cache_dir = cache_dir
        self.open: dict[str, Loaded] = {}

    def __getitem__(self, name: str) -> Loaded:
        if name not in self.open:
            info = device_info(name)
            why = info.unavailable_reason()
            if why is not None and info.kind is DeviceKind.HARDWARE:
                pytest.skip(f"hardware unavailable: {name}: {why}")
            if why is not None:  # the default test environment provides every stand-in
                pytest.fail(f"the hardware-free device {name} is missing: {why}")
            self.open[name] = Loaded.open(name, CFG, PROGRAMS, self.cache_dir)
        return self.open[name]


@pytest.fixture(scope="module")
def loaded(cache_dir: Path) -> Iterator[_Devices]:
    devices = _Devices(cache_dir)
    yield devices
    for d in devices.open.values():
        d.close()


@pytest.fixture(scope="module")
def oracle() -> OracleRun:
    return oracle_run(CFG, weights(CFG), prompt_tokens(CFG), STEPS, *PROGRAMS)


def test_the_decoder_pair_plans_on_every_target() -> None:
    for program in PROGRAMS:
        assert plan(program, "cpu").admitted
        npu4 = plan(program, "intel-npu4")  # matmul, exp, reductions, the causal mask: all
        assert npu4.admitted, npu4.refusals
        assert isinstance(npu4.numerics, NarrowStorage)
        xdna = plan(program, "xdna2")  # matmuls on tiles; the rest: the partitioned path
        assert not xdna.admitted
        assert "matmul" not in {r.primitive for r in xdna.refusals}


def test_the_decoder_program_files_are_what_the_builder_builds() -> None:
    """``poot plan src/poot/examples/decoder/prefill.poot`` reads the same program (regenerate:
    write ``format_program(build_prefill(CFG))`` under the comment line)."""
    here = Path(__file__).resolve().parents[1] / "src/poot/examples/decoder"
    for program in PROGRAMS:
        text = (here / f"{program.name}.poot").read_text(encoding="utf-8")
        assert parse_program(text) == program
        assert text.split("\n", 1)[1] == format_program(program)


def test_prefill_writes_the_cache_that_decoding_the_prompt_would() -> None:
    """An independent check of the pair: feeding the prompt to ``decode`` one token at a time
    fills the same cache and ends on the same logits as one ``prefill``."""
    prefill, decode = PROGRAMS
    w, prompt = weights(CFG), prompt_tokens(CFG)
    names = CFG.state_names()
    zeros = {a.name: np.zeros(a.var.shape, np.float32) for a in prefill.args if a.name in names}
    whole = evaluate(prefill, {**w, **zeros, "tokens": prompt})
    states = dict(zeros)
    for k, tok in enumerate(prompt):
        feed = {"token": np.array([tok], np.int32), "pos": np.array(k, np.int32)}
        out = evaluate(decode, {**w, **states, **feed})
        states = {n: out[n] for n in names}
    np.testing.assert_array_equal(states["filled"], whole["filled"])
    assert states["filled"].sum() == CFG.prompt_len
    for n in names:  # summation order differs (rows of one matmul vs one row at a time)
        np.testing.assert_allclose(states[n], whole[n], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(out["logits"], whole["logits"], rtol=1e-5, atol=1e-5)


def _expected_class(src: str, dst: str) -> type:
    targets = {device_info(src).target, device_info(dst).target}
    if "intel-npu4" in targets:
        return NarrowStorage
    return Bounded if "xdna2" in targets else Exact


@pytest.mark.slow
@pytest.mark.parametrize(("src", "dst"), PAIRS)
def test_handoff_decodes_the_tokens_of_a_whole_oracle_run(
    loaded: _Devices, oracle: OracleRun, src: str, dst: str
) -> None:
    r = run_handoff(CFG, PROGRAMS, loaded[src], loaded[dst], oracle)
    assert r.tokens == list(oracle.tokens) and len(r.tokens) == STEPS + 1
    bad = [(n, str(c)) for n, c in r.prefill_checks if not c.ok]
    assert not bad, bad
    assert len(r.step_checks) == STEPS
    for k, c in enumerate(r.step_checks):
        assert c.ok and c.compared == CFG.vocab, (k, str(c))
    assert isinstance(r.numerics, _expected_class(src, dst)), r.numerics
    if src == dst == "cpu":
        assert all(c.error_ratio == 0 for c in r.step_checks)  # bit for bit
    assert r.moved.names == CFG.state_names()
    assert r.moved.bytes_moved == r.moved.state_bytes == CFG.cache_bytes()  # ratio 1.0
    assert r.ok


def _state_program(shape: tuple[int, ...], dtype: DType) -> Program:
    """A program whose only state is named like the decoder's first key cache."""
    b = Builder("stateful")
    k0 = b.state("k0", dtype, shape)
    x = b.slot("x", dtype, shape)
    new = b.add(k0, x)
    b.update(k0, new)
    b.output("y", b.mul(new, 2.0))
    return b.build()


def _snapshot(engine: Engine, entry: Entry) -> dict[str, np.ndarray]:
    prog = engine.program(entry)
    states = [a.name for a in prog.args if a.storage is Storage.STATE]
    return {n: engine.read_state(entry, n) for n in states}


def _unchanged(before: dict[str, np.ndarray], after: dict[str, np.ndarray]) -> bool:
    return before.keys() == after.keys() and all(
        np.array_equal(before[n], after[n]) for n in before
    )


@pytest.mark.parametrize(("src", "dst"), PAIRS)
def test_bad_handoffs_are_typed_errors_that_change_nothing(
    loaded: _Devices, oracle: OracleRun, cache_dir: Path, src: str, dst: str
) -> None:
    s, d = loaded[src], loaded[dst]
    assert s.prefill is not None and d.decode is not None
    s.engine.reset_state(s.prefill)
    s.engine.step(s.prefill, {"tokens": oracle.prefill_feed["tokens"]})
    cache = (CFG.heads, CFG.max_len, CFG.head_dim)
    shorter = (CFG.heads, CFG.max_len - 8, CFG.head_dim)
    for shape, dtype, what in ((shorter, DType.F32, "f32[2,40,16]"), (cache, DType.F16, "f16")):
        other = d.engine.add_partitioned(_state_program(shape, dtype))
        before = (_snapshot(s.engine, s.prefill), _snapshot(d.engine, other))
        with pytest.raises(StateError, match=re.escape(what)) as err:
            handoff(s.engine, s.prefill, d.engine, other)
        assert err.value.state == "k0"
        assert _unchanged(before[0], _snapshot(s.engine, s.prefill))
        assert _unchanged(before[1], _snapshot(d.engine, other))
        d.engine.remove_entry(other)
    before = (_snapshot(s.engine, s.prefill), _snapshot(d.engine, d.decode))
    if d.engine.limit is not None and s.engine.limit is None:
        # a value the source holds and the FP16 destination cannot: refused, nothing written
        k0 = s.engine.read_state(s.prefill, "k0")
        k0[1, 3, 5] = 7e4
        s.engine.write_state(s.prefill, "k0", k0)
        before = (_snapshot(s.engine, s.prefill), before[1])
        with pytest.raises(NarrowingRangeState) as nerr:
            handoff(s.engine, s.prefill, d.engine, d.decode)
        assert nerr.value.argument == "k0" and nerr.value.element == (1, 3, 5)
    # a closed source engine: a fresh one on the same device, holding the same states
    closed = Engine(make_device(src), cache_dir=cache_dir)
    gone = closed.add_partitioned(_state_program(cache, DType.F32))
    closed.close()
    with pytest.raises(DeviceFailed, match="closed"):
        handoff(closed, gone, d.engine, d.decode, names=["k0"])
    assert _unchanged(before[0], _snapshot(s.engine, s.prefill))
    assert _unchanged(before[1], _snapshot(d.engine, d.decode))


def test_poot_generate_prints_tokens_times_and_where_each_ran(
    loaded: _Devices,
    cache_dir: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("COLUMNS", "200")  # rich wraps table cells at the default 80
    loaded["vpu-cpu"]  # the module's blob cache holds its compiled prefill: a load, no compile
    argv = ["--cache-dir", str(cache_dir), "generate", "tiny-decoder"]
    code = main([*argv, "--prefill-device", "vpu-cpu", "--decode-device", "cpu", "--steps", "32"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "vpu-cpu (intel-npu4)" in out and "cpu (cpu)" in out and "= oracle" in out
    assert "NarrowStorage" in out and "FAILED" not in out
    rows = [[c.strip() for c in line.split("│")[1:-1]] for line in out.splitlines()]
    steps = [r for r in rows if len(r) == 7 and r[0].isdigit()]  # step, ran on, pos, tok, ...
    assert [int(r[0]) for r in steps] == list(range(STEPS))
    assert all(r[1] == "cpu" and r[3] == r[4] and float(r[5]) > 0 for r in steps)
    with pytest.raises(SystemExit) as exit_:
        main([*argv, "--steps", "0"])
    assert exit_.value.code == 2


def test_generate_runs_refused_spans_where_the_host_flag_says(
    loaded: _Devices, cache_dir: Path
) -> None:
    # poot generate follows --host as poot run does (issue 27): xdna2 refuses part of the
    # decoder, and host-cpu admits some of those spans: on the compiled host device by
    # default, every one on the oracle with host="oracle"
    compiled = loaded["xdna-host"]
    for entry in (compiled.prefill, compiled.decode):
        assert entry is not None
        part = compiled.engine.partitioned(entry)
        assert part is not None and any(h is not None for h in part.hosts), part.hosts
    oracle = Loaded.open("xdna-host", CFG, PROGRAMS, cache_dir, host="oracle")
    try:
        for entry in (oracle.prefill, oracle.decode):
            assert entry is not None
            part = oracle.engine.partitioned(entry)
            assert part is not None and all(h is None for h in part.hosts), part.hosts
    finally:
        oracle.close()
