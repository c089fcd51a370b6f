"""Prefill on one device, decode on another: ``poot generate`` and the handoff checks.

``generate`` loads the decoder's ``prefill`` on one device and its ``decode`` on another (each
partitioned where its target refuses part of it: those spans on the compiled host device where
host-cpu admits them, else, or with ``--host oracle``, on the oracle), runs the prompt, hands
the KV cache over (``poot_engine.handoff``) and decodes greedily, one token per step. Everything is checked
against a whole run on the oracle (prefill then decode, evaluated by ``poot_ir.evaluate``):

- the prefill's results (the logits and every state it hands over) against the oracle's
  prefill, under the source plan's numerics class (the runner's rule: bit for bit, a running
  bound, or normwise when narrowed to FP16); a partitioned prefill span by span, each on the
  inputs it really had, a host span under its host plan (``poot_engine.run``'s rule for a
  partitioned step);
- each decode step's logits against the whole run's, under the destination entry's numerics
  class after the handoff (``Engine.numerics``): its own plan's class loosened by the class
  the handed-over states carry from the source. So a prefill narrowed to FP16 makes the
  decode's bound ``NarrowStorage`` (normwise, 2^-8 on intel-npu4) even on the exact CPU, an
  XDNA2 prefill makes it ``Bounded``, and CPU to CPU stays bit for bit. A decode on xdna2
  (its own plan ``Bounded``: bf16 matmul operands) is checked step by step under its derived
  bound on the cache it holds, whichever device filled it. (An elementwise
  running bound started from the handed-over states' measured error, through
  ``poot_planner.error_bounds``, is sound but too loose to check anything here: its
  worst-case carries through two rmsnorm-attention-MLP layers reach infinity.) A step is
  compared only while the tokens so far equal the whole run's (the same inputs);
- the greedy tokens against the whole run's, every one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from time import perf_counter

import numpy as np
from poot_engine import Engine, Entry, Handoff, HostSpans, handoff
from poot_engine.verify import check_results, check_spans
from poot_ir import Comparison, Program, Storage, UnknownEntry, evaluate
from poot_ir.budget import check_alloc, nbytes
from poot_ir.numerics import Bounded, NumericsClass, compare
from poot_ir.sampling import sample_bytes, value_bytes
from poot_npu.registry import device_info, host_device, make_device
from poot_planner import plan
from rich.console import Group
from rich.table import Table
from rich.text import Text

from poot.decoder import DecoderConfig, build_decode, build_prefill, weights

__all__ = [
    "GenerateReport",
    "Loaded",
    "OracleRun",
    "generate",
    "handoff_table",
    "oracle_run",
    "prompt_tokens",
    "render_report",
    "run_handoff",
]

Arrays = dict[str, np.ndarray]


def prompt_tokens(cfg: DecoderConfig, seed: int = 1) -> np.ndarray:
    """A deterministic prompt of ``cfg.prompt_len`` tokens."""
    rng = np.random.default_rng(seed)
    return rng.integers(0, cfg.vocab, cfg.prompt_len).astype(np.int32)


def _argmax(logits: np.ndarray) -> int:
    return int(np.argmax(logits.reshape(-1)))


def _decode_feed(cfg: DecoderConfig, token: int, step: int) -> Arrays:
    return {"token": np.array([token], np.int32), "pos": np.array(cfg.prompt_len + step, np.int32)}


@dataclass(frozen=True, slots=True)
class OracleRun:
    """A whole run on the oracle: prefill, then ``len(logits)`` greedy decode steps. ``feeds[k]``
    is every argument of decode step ``k`` (weights, states, slots)."""

    prefill_feed: Arrays
    prefill: Arrays
    feeds: tuple[Arrays, ...]
    logits: tuple[np.ndarray, ...]
    tokens: tuple[int, ...]  # the prefill's token, then one per decode step


def oracle_run(
    cfg: DecoderConfig, w: Arrays, prompt: np.ndarray, steps: int, prefill: Program, decode: Program
) -> OracleRun:
    names = cfg.state_names()
    zeros = {a.name: np.zeros(a.var.shape, np.float32) for a in prefill.args if a.name in names}
    pfeed = {**w, **zeros, "tokens": prompt}
    pout = evaluate(prefill, pfeed)
    states = {n: pout[n] for n in names}
    tokens = [_argmax(pout["logits"])]
    feeds, logits = [], []
    for k in range(steps):
        feed = {**w, **states, **_decode_feed(cfg, tokens[-1], k)}
        out = evaluate(decode, feed)
        feeds.append(feed)
        logits.append(out["logits"])
        tokens.append(_argmax(out["logits"]))
        states = {n: out[n] for n in names}
    return OracleRun(pfeed, pout, tuple(feeds), tuple(logits), tuple(tokens))


@dataclass(slots=True)
class Loaded:
    """One device's engine with the decoder loaded: ``prefill`` and/or ``decode`` entries."""

    name: str
    engine: Engine
    prefill: Entry | None
    decode: Entry | None

    @staticmethod
    def open(
        name: str,
        cfg: DecoderConfig,
        programs: tuple[Program, Program],
        cache_dir: Path | None = None,
        *,
        prefill: bool = True,
        decode: bool = True,
        host: HostSpans = "compiled",
    ) -> Loaded:
        """``name``'s engine with the entries asked for, each partitioned where the device's
        target refuses a part: its host spans on the compiled host device, or with ``host``
        "oracle" on the oracle (``poot_npu.registry.host_device``)."""
        spans = host_device(device_info(name).target, host)
        try:
            device = make_device(name)
        except BaseException:
            if spans is not None:
                spans.close()
            raise
        engine = Engine(device, cache_dir=cache_dir, host=spans)
        try:
            w = engine.load_weights(weights(cfg))
            pe = engine.add_partitioned(programs[0], w) if prefill else None
            de = engine.add_partitioned(programs[1], w) if decode else None
        except BaseException:
            engine.close()
            raise
        return Loaded(name, engine, pe, de)

    def where(self, entry: Entry) -> str:
        """The device, its target, and its spans when partitioned."""
        target = device_info(self.name).target
        part = self.engine.partitioned(entry)
        if part is None:
            return f"{self.name} ({target})"
        on = sum(s.device for s in part.spans)
        return f"{self.name} ({target}, partitioned: {on} of {len(part.spans)} spans on the device)"

    def close(self) -> None:
        self.engine.close()


@dataclass(slots=True)
class GenerateReport:
    """One prefill, handoff and greedy decode, with every check (see the module)."""

    example: str
    prefill_device: str
    decode_device: str
    prefill_where: str
    decode_where: str
    prompt: tuple[int, ...]
    tokens: list[int]
    oracle_tokens: tuple[int, ...]
    prefill_s: float
    decode_s: list[float]
    moved: Handoff
    cache_bytes: int
    numerics: NumericsClass
    prefill_checks: tuple[tuple[str, Comparison], ...]
    step_checks: list[Comparison] = field(default_factory=list)

    @property
    def tokens_match(self) -> bool:
        return tuple(self.tokens) == self.oracle_tokens

    @property
    def ok(self) -> bool:
        checks = [c for _, c in self.prefill_checks] + self.step_checks
        return self.tokens_match and all(c.ok for c in checks)


def run_handoff(
    cfg: DecoderConfig,
    programs: tuple[Program, Program],
    src: Loaded,
    dst: Loaded,
    oracle: OracleRun,
) -> GenerateReport:
    """Prefill ``oracle``'s prompt on ``src``, hand the cache to ``dst``, decode as many steps
    as ``oracle`` has, and check it all (both entries are reset first, so a loaded pair can be
    reused)."""
    prefill = programs[0]
    if src.prefill is None or dst.decode is None:
        raise UnknownEntry("run_handoff needs a prefill entry on src and a decode entry on dst")
    src.engine.reset_state(src.prefill)
    dst.engine.reset_state(dst.decode)
    prompt = oracle.prefill_feed["tokens"]
    t0 = perf_counter()
    pout = src.engine.step(src.prefill, {"tokens": prompt})
    prefill_s = perf_counter() - t0
    target = src.engine.device.target
    part = src.engine.partitioned(src.prefill)
    if part is None:
        pchecks = check_results(plan(prefill, target), oracle.prefill_feed, pout, oracle.prefill)
    else:  # the runner's rule for a partitioned step: each span on the inputs it really had
        w = {
            a.name: oracle.prefill_feed[a.name] for a in prefill.args if a.storage is Storage.WEIGHT
        }
        trace = {**w, **part.trace}
        pchecks = check_spans(prefill, part.spans, trace, pout, part.hosts)
    # the decode's own plan's class, before the handed-over states loosen it
    own = dst.engine.numerics(dst.decode)
    moved = handoff(src.engine, src.prefill, dst.engine, dst.decode)
    report = GenerateReport(
        cfg.name,
        src.name,
        dst.name,
        src.where(src.prefill),
        dst.where(dst.decode),
        tuple(int(t) for t in prompt),
        [_argmax(pout["logits"])],
        oracle.tokens,
        prefill_s,
        [],
        moved,
        cfg.cache_bytes(),
        dst.engine.numerics(dst.decode),
        pchecks,
    )
    bound = report.numerics.bound
    derived = isinstance(own, Bounded) or isinstance(report.numerics, Bounded)
    names = cfg.state_names()
    for k in range(len(oracle.feeds)):
        slots = _decode_feed(cfg, report.tokens[-1], k)
        # a decode whose own plan is Bounded (xdna2's) is checked per element under the bound
        # the running error analysis derives for the inputs the step really had (its cache as
        # the device holds it: a contraction's bound is relative to its terms' magnitudes, not
        # to the result), whatever the handed-over states carry: their error is the prefill's,
        # checked above, and a fixed figure cannot hold bf16 products on top of an FP16 cache
        held = {n: dst.engine.read_state(dst.decode, n) for n in names} if derived else {}
        t0 = perf_counter()
        out = dst.engine.step(dst.decode, slots)
        report.decode_s.append(perf_counter() - t0)
        if report.tokens == list(oracle.tokens[: k + 1]):  # the same inputs as the whole run
            if derived:
                c = _derived_check(dst, programs[1], {**oracle.feeds[k], **held, **slots}, out)
            else:
                c = compare(out["logits"], oracle.logits[k], bound)
            report.step_checks.append(c)
        report.tokens.append(_argmax(out["logits"]))
    return report


def _derived_check(
    dst: Loaded, decode: Program, feed: Arrays, out: dict[str, np.ndarray]
) -> Comparison:
    """The logits of one decode step against the oracle on ``feed`` (every argument), under
    the plan's derived bound: span by span when the decode runs partitioned."""
    assert dst.decode is not None
    part = dst.engine.partitioned(dst.decode)
    if part is None:
        checks = check_results(plan(decode, dst.engine.device.target), feed, out)
    else:
        w = {a.name: feed[a.name] for a in decode.args if a.storage is Storage.WEIGHT}
        checks = check_spans(decode, part.spans, {**w, **part.trace}, out, part.hosts)
    return dict(checks)["logits"]


def generate(
    example: str,
    prefill_device: str,
    decode_device: str,
    steps: int,
    cache_dir: Path | None = None,
    cfg: DecoderConfig | None = None,
    *,
    host: HostSpans = "compiled",
) -> GenerateReport:
    """Open both devices, load the example, and ``run_handoff`` (the same device twice: one
    engine, two entries); a span a device refuses runs on the compiled host device, or with
    ``host`` "oracle" on the oracle."""
    from poot.decoder import EXAMPLES

    c = cfg or EXAMPLES[example]
    if c.max_len < c.prompt_len + steps:  # a cache long enough for every step
        c = c.with_prompt(c.prompt_len, c.prompt_len + steps)
    programs = (build_prefill(c), build_decode(c))
    check_alloc(f"generate {example}, {steps} steps", run_bytes(*programs))
    oracle = oracle_run(c, weights(c), prompt_tokens(c), steps, *programs)
    same = prefill_device == decode_device
    src = Loaded.open(prefill_device, c, programs, cache_dir, decode=same, host=host)
    try:
        dst = (
            src
            if same
            else Loaded.open(decode_device, c, programs, cache_dir, prefill=False, host=host)
        )
        try:
            return run_handoff(c, programs, src, dst, oracle)
        finally:
            dst.close()
    finally:
        src.close()


def run_bytes(prefill: Program, decode: Program) -> int:
    """What ``generate`` holds at its peak, at least: the weights and states (as the seeded
    draw makes them, float64 first), a copy of the states on each of two devices and the
    oracle's, and one evaluation keeping every value (``value_bytes``). Checked against the
    memory budget before anything is allocated: a long ``--steps`` grows every one of them."""
    states = sum(
        nbytes(a.var.type.shape, a.var.type.dtype.itemsize)
        for a in decode.args
        if a.storage is Storage.STATE
    )
    peak = max(value_bytes(prefill), value_bytes(decode))
    return sample_bytes(decode) + 2 * states + peak


# -- rendering (``poot generate``, ``poot demo``) -------------------------------------------


def _worst(report: GenerateReport) -> Text:
    checks = [(f"prefill {n}", c) for n, c in report.prefill_checks]
    checks += [(f"decode step {k}", c) for k, c in enumerate(report.step_checks)]
    name, c = max(checks, key=lambda nc: (not nc[1].ok, nc[1].error_ratio))
    if not c.ok:
        return Text(f"FAILED: {name}: {c.error_ratio:.3g} x bound", style="bold red")
    return Text("exact" if c.error_ratio == 0 else f"{c.error_ratio:.2g} of bound", style="green")


def handoff_table(reports: list[GenerateReport], title: str = "Handoff") -> Table:
    """One row per run: where each half ran, the tokens against the whole oracle run, the
    times, the bytes moved over the KV cache's size, and the worst check."""
    t = Table(title=title, title_justify="left")
    cols = ("prefill on", "decode on", "tokens", "prefill ms", "decode ms/step", "moved")
    for col in (*cols, "numerics", "worst vs bound"):
        t.add_column(col, overflow="fold")
    for r in reports:
        same = Text("= oracle", style="green") if r.tokens_match else Text("DIFFER", "bold red")
        per = sum(r.decode_s) / max(len(r.decode_s), 1)
        t.add_row(
            r.prefill_where,
            r.decode_where,
            Text.assemble(f"{len(r.tokens)} ", same),
            f"{r.prefill_s * 1e3:.2f}",
            f"{per * 1e3:.2f}",
            f"{r.moved.bytes_moved} B ({r.moved.bytes_moved / r.cache_bytes:.2f} x cache)",
            type(r.numerics).__name__,
            _worst(r),
        )
    return t


def _ratio(c: Comparison) -> str:
    if c.compared == 0:
        return "not compared"
    return f"{c.error_ratio:.2g}" if c.ok else f"FAILED {c.error_ratio:.3g}"


def render_report(r: GenerateReport) -> Group:
    """``poot generate``'s output: the summary row, then every token with its step's time."""
    steps = Table(title="Tokens", title_justify="left")
    for col in ("step", "ran on", "position", "token", "oracle", "ms", "logits vs bound"):
        steps.add_column(col)
    logits = next(c for n, c in r.prefill_checks if n == "logits")
    steps.add_row(
        "prefill",
        r.prefill_device,
        f"0..{len(r.prompt) - 1}",
        str(r.tokens[0]),
        str(r.oracle_tokens[0]),
        f"{r.prefill_s * 1e3:.2f}",
        _ratio(logits),
    )
    for k, s in enumerate(r.decode_s):
        c = r.step_checks[k] if k < len(r.step_checks) else None
        steps.add_row(
            str(k),
            r.decode_device,
            str(len(r.prompt) + k),
            str(r.tokens[k + 1]),
            str(r.oracle_tokens[k + 1]),
            f"{s * 1e3:.2f}",
            _ratio(c) if c else "-",
        )
    moved = ", ".join(r.moved.names)
    note = Text(
        f"prompt {list(r.prompt)}; handed over {moved} "
        f"({r.moved.bytes_moved} of {r.cache_bytes} cache bytes, {r.moved.seconds * 1e3:.2f} ms); "
        f"decode numerics after the handoff: {r.numerics}"
    )
    return Group(handoff_table([r], f"{r.example}: prefill, handoff, decode"), note, steps)
