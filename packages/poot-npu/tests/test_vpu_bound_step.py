"""VpuDevice's whole-step binding (``bind_step``) on the CPU stand-in: a step bound once keeps
running when another entry's buffers are freed and its artifact unloaded; its results are the
oracle's, FP16-narrowed."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from poot_engine import Engine
from poot_ir import Builder, DType, Program, evaluate
from poot_npu.vpu import VpuDevice


def _program() -> Program:
    b = Builder("acc")
    x = b.slot("x", DType.F32, (8,))
    total = b.state("total", DType.F32, (8,))
    new = b.add(total, x)
    b.output("y", b.mul(new, 0.5))
    b.update(total, new)
    return b.build()


def test_a_bound_vpu_step_outlives_another_entry_and_matches_the_oracle(tmp_path: Path) -> None:
    with Engine(VpuDevice("CPU"), cache_dir=tmp_path) as engine:
        entry = engine.add_entry(_program())
        other = engine.add_entry(_program())  # the same blob: a second artifact, own request
        x = np.linspace(-3, 3, 8, dtype=np.float32)
        total = np.zeros(8, np.float32)
        for k in range(4):
            if k == 1:
                engine.step(other, {"x": x})
            if k == 2:
                engine.remove_entry(other)
            got = engine.step(entry, {"x": x})
            want = evaluate(_program(), {"x": x, "total": total})
            total = want["total"]
            assert type(engine._entries[entry.id].bound).__name__ == "_OpenVinoStep"
            # FP16 storage of each value: within a few FP16 ulps of the F32 oracle
            assert np.allclose(got["y"], want["y"], rtol=2**-10, atol=0)
            assert np.allclose(got["total"], want["total"], rtol=2**-10, atol=0)
