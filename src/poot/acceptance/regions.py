"""``poot acceptance`` on XDNA2: every region bound of the target table at and one past its limit,
and the region flag word.

Each bound is met exactly by one program and broken by the next (``RegionLimits``, counted as
the planner and the design count them, the flag path included; the chains and fan-outs are
``poot_planner.xdna2.probes``, which the device tests share):

- compute tiles, host streams in, host streams out (the flag word takes one of them): at the
  limit one region, run and verified; one past, two regions, run and verified;
- tile-local bytes and streams into a tile: at the limit admitted, run and verified; one past
  refused before anything runs (``REGION_LIMIT`` naming the limit, the need and the bound);
- contexts: three in one process (mlir-aie #3654), then at the limit (that many regions, each
  its own hardware context), run and verified; one past refused (``CONTEXT_LIMIT``); these run
  with ``XdnaDevice``'s default of two contexts per process lifted, and on the NPU a pass is
  recorded where ``XdnaDevice`` reads it (``poot_npu.xdna_contexts``);
- host buffers per kernel call: a program using all five arenas (weights, inputs, results,
  scratch, flags) runs; one past cannot be built (the layout has five roles), which is said;
- elements per tensor: at the limit admitted (planned only: 8 GiB of F32 is not run here), one
  past refused;
- the flag word: ``exp`` of a value computed inside a region, past exp's domain, is refused by
  the device's own count (``DomainFlagged``); inside it, the run is verified.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np
from poot_codegen.xdna import design_program
from poot_engine import Engine
from poot_ir import Builder, DomainFlagged, DType, PootError, Program, Storage, ops
from poot_npu import xdna_contexts as contexts
from poot_npu.xdna import XdnaDevice
from poot_npu.xdna_contexts import NODE
from poot_planner import Plan, RefusalKind, RegionLimits, get_target, plan
from poot_planner.xdna2.probes import add_chain, fan_out, marked_chain, neg_chain

from poot.acceptance.engine import Check

__all__ = ["record_contexts", "region_checks"]

F32 = DType.F32


def _gather(rows: int) -> Program:
    """A gather of one row of a ``rows x 1`` table: the table and the index resident, the
    gathered row double buffered. Its bytes step by 4, so it meets any word-sized limit exactly
    (a row and its sum step by 8, which the reserved bytes could leave 4 short of)."""
    b = Builder(f"accept_gather{rows}")
    b.output("y", b.gather(b.weight("t", F32, (rows, 1)), b.slot("i", DType.I32, (1,))))
    return b.build()


def _norm_weights(n: int) -> Program:
    """A norm with its weight (2 streams into its tile), times a second weight for ``n == 3``."""
    b = Builder(f"accept_tile_streams{n}")
    y = ops.rmsnorm(b, b.slot("x", F32, (4, 64)), b.weight("w", F32, (64,)))
    if n == 3:
        y = b.mul(y, b.weight("w2", F32, (64,)))
    b.output("y", y)
    return b.build()


def _five_arenas() -> Program:
    """A weight, a slot, a value crossing regions (scratch), a result, and the flag words."""
    b = Builder("accept_arenas")
    v = b.mul(b.slot("x", F32, (2, 8)), b.weight("w", F32, (2, 8)))
    for _ in range(get_target("xdna2").region_limits.compute_tiles):  # type: ignore[union-attr]
        v = b.neg(v)
    b.output("y", v)
    return b.build()


def _elements(n: int) -> Program:
    b = Builder(f"accept_elements{n}")
    b.output("y", b.neg(b.slot("x", F32, (n,))))
    return b.build()


def _run_verified(engine: Engine, program: Program, low: float = -1.0, high: float = 1.0) -> str:
    rng = np.random.default_rng(0)
    values = {
        a.name: rng.integers(-1, 1, a.var.shape, dtype=np.int32)  # indices inside any axis
        if a.var.dtype is DType.I32
        else rng.uniform(low, high, a.var.shape).astype(np.float32)
        for a in program.args
    }
    weights = {a.name: values[a.name] for a in program.args if a.storage is Storage.WEIGHT}
    feed = {k: v for k, v in values.items() if k not in weights}
    entry = engine.add_entry(program, engine.load_weights(weights) if weights else None)
    try:
        engine.step(entry, feed)  # a verified engine: a breach raises
    finally:
        engine.remove_entry(entry)
    p = plan(program, engine.device.target)
    return f"{len(p.regions)} region(s), {p.contexts} context(s), verified"


def _refused(p: Plan, kind: RefusalKind, limit: str) -> tuple[bool, str]:
    for r in p.refusals:
        if r.kind is kind and r.fact("limit") == limit:
            return True, f"refused: {r}"
    return False, f"not refused for {limit}: {[str(r) for r in p.refusals]}"


def _name(what: str, n: int, limit: int) -> str:
    return f"{what}: {n} ({'at' if n == limit else 'one past'} the limit of {limit})"


def region_checks(engine: Engine, target: str) -> Iterator[Check]:
    """The region bounds of ``target`` (none for a target without regions) and its flag word.

    First, the hardware contexts one process may hold (``poot_npu.xdna_contexts``, mlir-aie
    #3654): the checks run with the default of two lifted, and three contexts in one process,
    every result verified, is measured; on the NPU (not a stand-in) its result, and that of the
    contexts-at-the-limit check, is recorded where ``XdnaDevice`` reads it, which lifts the
    default for later processes on this machine."""
    limits = get_target(target).region_limits
    if limits is None:
        return
    checks: list[Check] = []
    with contexts.lift(NODE, limits.contexts):
        for c in _region_checks(engine, target, limits):
            checks.append(c)
            yield c
    if isinstance(engine.device, XdnaDevice):  # the NPU itself, not a stand-in
        yield from record_contexts(checks, limits.contexts)


def record_contexts(checks: list[Check], limit: int) -> Iterator[Check]:
    """When three contexts in one process ran verified, record how many did (the limit when the
    contexts-at-the-limit check passed too) where ``XdnaDevice`` reads it, and say so."""
    three = next((c for c in checks if c.name.startswith(_CONTEXTS_3654)), None)
    if three is None or not three.passed:
        return
    at_limit = _name("contexts", limit, limit)
    n = limit if any(c.name == at_limit and c.passed for c in checks) else 3
    path = contexts.write_record(n, f"poot acceptance: {three.detail}")
    yield Check(
        "hardware contexts allowed in one process (recorded)", True, n, "contexts", str(path)
    )


_CONTEXTS_3654 = "hardware contexts in one process (mlir-aie #3654)"


def _three_contexts(engine: Engine, target: str, tiles: int) -> Iterator[Check]:
    """Three distinct xclbins, three hardware contexts in one process, every result verified:
    the pattern of mlir-aie #3654, which returned wrong data reporting COMPLETED."""
    program = marked_chain(2 * tiles + 1, tiles)  # identical regions would share one context
    p = plan(program, target)
    name = f"{_CONTEXTS_3654}: 3 distinct xclbins, verified"
    try:
        detail = _run_verified(engine, program)
        yield Check(name, p.admitted and p.contexts == 3, p.contexts, "contexts", detail)
    except PootError as err:
        yield Check(name, False, p.contexts, "contexts", f"{type(err).__name__}: {err}")


def _region_checks(engine: Engine, target: str, limits: RegionLimits) -> Iterator[Check]:
    yield from _three_contexts(engine, target, limits.compute_tiles)
    splits: list[tuple[str, Callable[[int], Program], int, int]] = [
        ("compute tiles", neg_chain, limits.compute_tiles, limits.compute_tiles),
        ("host streams in", add_chain, limits.host_streams_in, limits.host_streams_in),
        # the flag word takes one stream out of every region
        ("host streams out", fan_out, limits.data_streams_out, limits.host_streams_out),
    ]
    for what, make, at, limit in splits:
        for n, regions in ((at, 1), (at + 1, 2)):
            program = make(n)
            p = plan(program, target)
            name = _name(what, n if limit == at else n + limits.flag_streams_out, limit)
            try:
                detail = _run_verified(engine, program)
            except PootError as err:
                yield Check(name, False, detail=f"{type(err).__name__}: {err}")
                continue
            yield Check(
                name, p.admitted and len(p.regions) == regions, len(p.regions), "regions", detail
            )

    # tile bytes: the table and the index, the gathered row double buffered (and the flag
    # path's words and the link's data sections, ``reserved_bytes``: at the limit, aiecc's
    # linker script leaves the data region after the buffers that reserve, so it links)
    rows = (limits.data_tile_bytes - 4 - 2 * 4) // 4
    yield from _at_and_past(
        engine,
        target,
        "tile-local bytes",
        limits.tile_bytes,
        _gather(rows),
        _gather(rows + 1),
        "tile_bytes",
        lambda p: max((t.tile_bytes for t in p.tiles), default=0),
    )
    yield from _at_and_past(
        engine,
        target,
        "streams into a tile",
        limits.streams_per_tile,
        _norm_weights(2),
        _norm_weights(3),
        "streams_per_tile",
        lambda p: max(t.streams_in for t in p.tiles),
    )
    yield from _contexts(engine, target, limits.contexts, limits.compute_tiles)
    yield from _host_buffers(engine, target, limits.host_buffers)
    for n in (limits.tensor_elements, limits.tensor_elements + 1):
        p = plan(_elements(n), target)
        name = _name("elements per tensor", n, limits.tensor_elements)
        if n == limits.tensor_elements:
            yield Check(name, p.admitted, n, "elements", "admitted (planned only: not run here)")
        else:
            ok, detail = _refused(p, RefusalKind.REGION_LIMIT, "tensor_elements")
            yield Check(name, ok, n, "elements", detail)
    yield from _flag_word(engine, target)


def _at_and_past(
    engine: Engine,
    target: str,
    what: str,
    limit: int,
    at: Program,
    past: Program,
    fact: str,
    figure: Callable[[Plan], int],
) -> Iterator[Check]:
    p = plan(at, target)
    got = figure(p) if p.admitted else -1
    try:
        detail = _run_verified(engine, at)
        yield Check(_name(what, limit, limit), p.admitted and got == limit, got, fact, detail)
    except PootError as err:
        yield Check(_name(what, limit, limit), False, got, fact, f"{type(err).__name__}: {err}")
    q = plan(past, target)
    ok, detail = _refused(q, RefusalKind.REGION_LIMIT, fact)
    needed = next((r.fact("needed") for r in q.refusals if r.fact("limit") == fact), None)
    over = needed if isinstance(needed, int) else -1
    yield Check(
        f"{what}: {over} (one past the limit of {limit})", ok and over > limit, over, fact, detail
    )


def _contexts(engine: Engine, target: str, limit: int, tiles: int) -> Iterator[Check]:
    program = marked_chain(limit * tiles, tiles)  # distinct artifacts: one context each
    p = plan(program, target)
    name = _name("contexts", limit, limit)
    try:
        yield Check(
            name,
            p.admitted and p.contexts == limit,
            p.contexts,
            "contexts",
            _run_verified(engine, program),
        )
    except PootError as err:
        yield Check(name, False, detail=f"{type(err).__name__}: {err}")
    q = plan(marked_chain((limit + 1) * tiles, tiles), target)
    ok = RefusalKind.CONTEXT_LIMIT in {r.kind for r in q.refusals}
    yield Check(
        _name("contexts", limit + 1, limit),
        ok,
        limit + 1,
        "contexts",
        "refused: context limit" if ok else "admitted",
    )


def _host_buffers(engine: Engine, target: str, limit: int) -> Iterator[Check]:
    program = _five_arenas()
    p = plan(program, target)
    name = _name("host buffers per kernel call", limit, limit)
    try:
        arenas = len(design_program(p.check()).layout.arenas)
        detail = _run_verified(engine, program)
        roles = "weights, inputs, results, scratch, flags"
        yield Check(name, arenas == limit, arenas, "arenas", f"{roles}; {detail}")
    except PootError as err:
        yield Check(name, False, detail=f"{type(err).__name__}: {err}")
    yield Check(
        _name("host buffers per kernel call", limit + 1, limit),
        True,
        None,
        "arenas",
        "cannot be built: the layout has five arena roles (poot_codegen.xdna.arenas)",
    )


def _flag_word(engine: Engine, target: str) -> Iterator[Check]:
    b = Builder("accept_flag_word")
    b.output("y", b.exp(b.add(b.slot("x", F32, (2, 8)), 99.0)))
    program = b.build()
    name = "flag word: exp(100) computed inside a region is refused"
    try:
        _run_verified(engine, program, -20.0, -19.0)  # exp(79..80): inside
        entry = engine.add_entry(program)
        bad = np.full((2, 8), -20.0, np.float32)
        bad[1, 3] = 1.0  # exp(1 + 99): inf in F32, outside exp's domain
        try:
            engine.step(entry, {"x": bad})
            yield Check(name, False, detail="exp(100) was returned")
        except DomainFlagged as err:
            yield Check(name, True, err.count, "flagged", f"refused: {err}")
        finally:
            engine.remove_entry(entry)
    except PootError as err:
        yield Check(name, False, detail=f"{type(err).__name__}: {err}")
