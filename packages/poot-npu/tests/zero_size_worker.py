"""Run programs (poot text, one JSON list on stdin) on one device (argv[1]; the blob cache in argv[2]) and print one JSON
line per program: ``{"name", "outcome"}`` where the outcome is ``"ok"`` (every result equal to
the oracle's, bit for bit), ``"typed <Class>"`` (a ``PootError``: planned away or refused), or
``"wrong ..."`` / ``"untyped ..."``. Each program's name is printed (flushed) before it runs, so
a crash of the process (SIGFPE, SIGSEGV) names the program that killed it. ``test_zero_size``
runs this in a subprocess: a crash fails the test instead of killing pytest."""

from __future__ import annotations

import json
import sys

import numpy as np
from poot_engine import Engine
from poot_ir import DType, PootError, Program, evaluate, parse_program
from poot_npu import make_device


def _inputs(program: Program) -> dict[str, np.ndarray]:
    """Small values (index 0 for i32: inside every non-empty axis), one per argument."""
    out = {}
    for a in program.args:
        t = a.var.type
        if t.dtype is DType.I32:
            out[a.name] = np.zeros(t.shape, np.int32)
        elif t.dtype is DType.BOOL:
            out[a.name] = np.ones(t.shape, np.bool_)
        else:
            out[a.name] = np.linspace(0.5, 1.5, t.size).reshape(t.shape).astype(t.dtype.numpy)
    return out


def _outcome(engine: Engine, text: str) -> str:
    program = parse_program(text)
    inputs = _inputs(program)
    try:
        want = evaluate(program, inputs)
    except PootError as err:
        want = type(err)
    try:
        entry = engine.add_entry(program)
        got = engine.step(entry, inputs)
    except PootError as err:
        return f"typed {type(err).__name__}"
    except Exception as err:  # reported, and the test fails on it
        return f"untyped {type(err).__name__}: {err}"
    if isinstance(want, type):
        return f"wrong: ran where the oracle raised {want.__name__}"
    for name, w in want.items():
        g = got[name]
        if g.shape != w.shape or g.dtype != w.dtype or not np.array_equal(g, w, equal_nan=True):
            return (
                f"wrong {name}: {g.dtype}{list(g.shape)} {g.reshape(-1)[:4]} vs {w.reshape(-1)[:4]}"
            )
    return "ok"


def main() -> None:
    texts = json.loads(sys.stdin.read())
    with Engine(make_device(sys.argv[1]), sys.argv[2]) as engine:
        for text in texts:
            name = parse_program(text).name
            print(json.dumps({"name": name, "outcome": "running"}), flush=True)
            print(json.dumps({"name": name, "outcome": _outcome(engine, text)}), flush=True)


if __name__ == "__main__":
    main()
