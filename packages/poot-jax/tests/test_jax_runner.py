"""``poot_jax.jit`` / ``Runner``: one trace per shape/dtype signature, replayed after; planned for
the device's target and partitioned where refused; the engine's checks apply; results against
``jax.jit`` on XLA:CPU (tolerance in ``jax_cases``)."""

from __future__ import annotations

from pathlib import Path

import pytest

jax = pytest.importorskip("jax", reason="jax 0.12 needs Python 3.12+: run `nox -s jax`")

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import poot_jax  # noqa: E402
from jax_cases import compare  # noqa: E402
from poot_ir.errors import DomainFlagged, PlanRefused, UnsupportedJax  # noqa: E402

RNG = np.random.default_rng(3)


def _tree(x: jax.Array, y: jax.Array) -> tuple[jax.Array, dict[str, jax.Array]]:
    return jnp.tanh(x) * y, {"total": (x * y).sum(axis=1)}


def test_one_trace_per_signature_then_replays(tmp_path: Path) -> None:
    with poot_jax.jit(_tree, device="cpu", cache_dir=tmp_path) as run:
        for _ in range(3):
            x, y = (RNG.standard_normal((4, 8)).astype(np.float32) for _ in range(2))
            got = run(x, y)
            want = jax.jit(_tree)(x, y)
            assert jax.tree_util.tree_structure(got) == jax.tree_util.tree_structure(want)
            for g, w in zip(
                jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want), strict=True
            ):
                assert isinstance(g, np.ndarray)
                compare(g, np.asarray(w))
        assert run.signatures == 1
        stats = run.engine.stats()
        assert (stats.steps, stats.recordings, stats.replays, stats.lowerings) == (3, 1, 2, 1)
        x2 = RNG.standard_normal((2, 8)).astype(np.float32)
        compare(run(x2, x2)[0], np.asarray(jax.jit(_tree)(x2, x2)[0]))
        assert run.signatures == 2


def test_as_jax_returns_jax_arrays(tmp_path: Path) -> None:
    x = RNG.standard_normal((3, 5)).astype(np.float32)
    with poot_jax.jit(jnp.exp, device="cpu", cache_dir=tmp_path, as_jax=True) as run:
        got = run(x)
    assert isinstance(got, jax.Array)
    compare(np.asarray(got), np.asarray(jax.jit(jnp.exp)(x)))


def _round_trip(w: dict[str, jax.Array], x: jax.Array) -> jax.Array:
    # an int32 round trip: intel-npu4 has no integer converts, so its plan refuses the middle
    return (x * x + 1.0).astype(jnp.int32).astype(jnp.float32) * w["w"] + 0.5


def test_a_refused_plan_runs_partitioned_on_vpu_cpu(tmp_path: Path) -> None:
    pytest.importorskip("openvino", reason="vpu-cpu needs openvino")
    params = {"w": RNG.standard_normal((4, 8)).astype(np.float32)}
    x = RNG.uniform(-2, 2, (4, 8)).astype(np.float32)
    with poot_jax.jit(_round_trip, params=params, device="vpu-cpu", cache_dir=tmp_path) as run:
        got = run(x)
        assert run.compiled(x).partitioned and not run.compiled(x).plan.admitted
    compare(got, np.asarray(jax.jit(_round_trip)(params, x)), rtol=1e-2)  # FP16 on the device
    with (
        poot_jax.jit(
            _round_trip, params=params, device="vpu-cpu", cache_dir=tmp_path, partition=False
        ) as whole,
        pytest.raises(PlanRefused),
    ):
        whole(x)


@pytest.mark.parametrize("host", ["compiled", "oracle"])
def test_refused_spans_run_where_host_says(host: str, tmp_path: Path) -> None:
    # the converts intel-npu4 refuses on the compiled host device (host-cpu admits them) by
    # default, as poot run does; on the oracle with host="oracle"
    pytest.importorskip("openvino", reason="vpu-cpu needs openvino")
    params = {"w": RNG.standard_normal((4, 8)).astype(np.float32)}
    x = RNG.uniform(-2, 2, (4, 8)).astype(np.float32)
    with poot_jax.jit(
        _round_trip, params=params, device="vpu-cpu", cache_dir=tmp_path, host=host
    ) as run:
        got = run(x)
        part = run.engine.partitioned(run.compiled(x).entry)
        assert part is not None
        spans = [k for k, s in enumerate(part.spans) if not s.device]
        hosted = [k < len(part.hosts) and part.hosts[k] is not None for k in spans]
        assert spans, "nothing refused: the test needs a host span"
        assert all(hosted) if host == "compiled" else not any(hosted), part.hosts
    compare(got, np.asarray(jax.jit(_round_trip)(params, x)), rtol=1e-2)  # FP16 on the device


def test_the_engines_domain_check_applies_on_xdna_host(tmp_path: Path) -> None:
    # matmul, refused on xdna2 at this size, runs on the oracle; exp(x + 1) on the device: an
    # element beyond exp's domain is flagged by the device span's region, nothing returned
    def f(w: jax.Array, x: jax.Array) -> jax.Array:
        return jnp.exp(-x @ w + 1.0)

    w = -np.eye(8, dtype=np.float32)
    with poot_jax.jit(f, params=w, device="xdna-host", cache_dir=tmp_path, verify=1.0) as run:
        ok = run(np.full((4, 8), 2.0, np.float32))
        compare(ok, np.asarray(jax.jit(f)(w, np.full((4, 8), 2.0, np.float32))))
        assert run.engine.stats().verified_steps >= 1
        bad = np.full((4, 8), 2.0, np.float32)
        bad[1, 2] = 99.0
        with pytest.raises(DomainFlagged):
            run(bad)


def test_an_unsupported_primitive_is_refused_before_anything_runs(tmp_path: Path) -> None:
    def f(x: jax.Array) -> jax.Array:
        return jnp.sort(x)

    with poot_jax.jit(f, device="cpu", cache_dir=tmp_path) as run:
        with pytest.raises(UnsupportedJax, match="sort"):
            run(np.zeros(4, np.float32))
        assert run.signatures == 0 and run.engine.stats().steps == 0


def test_a_second_runner_loads_from_the_blob_cache(tmp_path: Path) -> None:
    def f(x: jax.Array) -> jax.Array:
        return jnp.tanh(x) * 2.0 + 1.0

    x = RNG.standard_normal((4, 8)).astype(np.float32)
    stats = []
    for _ in range(2):
        with poot_jax.jit(f, device="xdna-host", cache_dir=tmp_path) as run:
            compare(run(x), np.asarray(jax.jit(f)(x)), rtol=1e-4)
            stats.append(run.engine.stats())
    assert stats[0].compiles >= 1 and stats[0].cache_hits == 0
    assert stats[1].compiles == 0 and stats[1].cache_hits == stats[0].compiles
