"""Prefill on a device against decoding the prompt step by step on the oracle, and the handoff.

The decoder of ``poot generate`` (``poot.decoder``, the tiny-decoder dimensions) with a prompt
of T = 128 tokens and a cache of 128 positions. On each hardware-free device present (cpu,
vpu-cpu, xdna-host; xdna-host partitioned, since xdna2 has no matmul) one ``prefill`` step
over the whole prompt is timed (``Engine.step``, recorded before timing) against the baseline
measured in the same run: the decode-only cost of the same T positions on the oracle, T
``decode`` steps on ``CpuDevice`` from an empty cache, one token at a time. The ratio is the
speedup the handoff buys (what a device prefill saves over feeding the prompt to decode).

Then one handoff from each device's prefill to the oracle's decode: the bytes read off the
source over the size the KV cache states declare (aim 1.0: nothing but the cache moves) and
the time it takes. The stand-ins' times are not an NPU's: they say what the engine adds and
how the two programs compare, not what silicon does.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
from poot_engine import handoff
from poot_npu.registry import device_info

from benchmarks.harness import Figure, median_time
from poot.decoder import EXAMPLES, build_decode, build_prefill
from poot.generate import Loaded, prompt_tokens

T = 128
ROUNDS = 5


def run() -> list[Figure]:
    cfg = EXAMPLES["tiny-decoder"].with_prompt(T, T)
    programs = (build_prefill(cfg), build_decode(cfg))
    prompt = prompt_tokens(cfg)
    figures: list[Figure] = []
    cache = Path(tempfile.mkdtemp(prefix="poot-bench-handoff-"))
    oracle = Loaded.open("cpu", cfg, programs, cache)
    try:
        assert oracle.decode is not None
        dec = oracle.decode

        def decode_prompt() -> None:
            oracle.engine.reset_state(dec)
            for k, tok in enumerate(prompt):
                feed = {"token": np.array([tok], np.int32), "pos": np.array(k, np.int32)}
                oracle.engine.step(dec, feed)

        base = median_time(decode_prompt, repeat=ROUNDS)
        figures.append(
            Figure(f"baseline: decode-only, {T} steps on the oracle (cpu)", base * 1e3, "ms")
        )
        figures.append(Figure("  per decode step", base / T * 1e3, "ms"))
        for name in ("cpu", "vpu-cpu", "xdna-host"):
            why = device_info(name).unavailable_reason()
            if why is not None:
                figures.append(Figure(f"prefill on {name}: unavailable ({why})", 0.0, ""))
                continue
            t0 = time.perf_counter()
            src = oracle if name == "cpu" else Loaded.open(name, cfg, programs, cache, decode=False)
            load_s = time.perf_counter() - t0
            try:
                assert src.prefill is not None
                pre = src.prefill
                feed = {"tokens": prompt}
                t = median_time(lambda: src.engine.step(pre, feed), repeat=ROUNDS)  # noqa: B023
                where = src.where(pre)
                moves = []
                for _ in range(ROUNDS):
                    moved = handoff(src.engine, pre, oracle.engine, dec)
                    moves.append(moved.seconds)
            finally:
                if src is not oracle:
                    src.close()
            figures += [
                Figure(f"prefill T={T} on {where}", t * 1e3, "ms"),
                Figure(f"  decode-only on the oracle / prefill on {name}", base / t, "x"),
                *(
                    [Figure(f"  load (plan, compile, upload) on {name}", load_s, "s")]
                    if src is not oracle
                    else []
                ),
                Figure(
                    f"  handoff {name} -> cpu: bytes moved / KV cache size",
                    moved.bytes_moved / cfg.cache_bytes(),
                    "x",
                    aim="1.0",
                    note=f"{moved.bytes_moved} B",
                ),
                Figure(f"  handoff {name} -> cpu: time", statistics.median(moves) * 1e3, "ms"),
            ]
    finally:
        oracle.close()
    return figures
