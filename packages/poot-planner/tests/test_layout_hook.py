"""``plan`` lays a program out by its target's ``layout`` hook, never by which target it is:
a new target's layout is its own object, and xdna2 without its layout plans no tiles."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from poot_ir import Program, parse_program
from poot_planner import TARGETS, KernelClass, Refusal, RefusalKind, plan
from poot_planner.target import Claim, LaidOut, Target
from poot_planner.xdna2.layout import REGIONS

EXAMPLES = Path(__file__).resolve().parents[3] / "src" / "poot" / "examples"


def _example(name: str) -> Program:
    return parse_program((EXAMPLES / f"{name}.poot").read_text())


@dataclass(frozen=True, slots=True)
class _Claimed:
    """Claims equation 0, refuses nothing there, and lays out by recording what it is given."""

    seen: list[Mapping[int, KernelClass]]
    eqns: frozenset[int] = frozenset({0})
    refusals: tuple[Refusal, ...] = ()

    def lay_out(self, admitted: Mapping[int, KernelClass]) -> LaidOut:
        self.seen.append(dict(admitted))
        late = Refusal(RefusalKind.CONTEXT_LIMIT, -1, "", (("limit", "toy"),))
        placed = tuple((i, KernelClass.POINTWISE, 7) for i in admitted)
        return LaidOut(refusals=(late,), placed=placed)


@dataclass(frozen=True, slots=True)
class _Toy:
    seen: list[Mapping[int, KernelClass]]

    def claim(self, program: Program, target: Target) -> Claim:
        return _Claimed(self.seen)


def test_plan_calls_the_targets_layout() -> None:
    seen: list[Mapping[int, KernelClass]] = []
    toy = dataclasses.replace(TARGETS["cpu"], name="toy", layout=_Toy(seen))
    program = _example("pointwise")
    p = plan(program, toy)
    n = len(program.eqns)
    assert seen == [{i: KernelClass.ORACLE for i in range(1, n)}]  # 0 was claimed
    assert [r.fact("limit") for r in p.refusals] == ["toy"]
    assert [(a.eqn, a.kernel, a.tile) for a in p.admissions] == [
        (i, KernelClass.POINTWISE, 7) for i in range(1, n)
    ]


def test_xdna2_without_its_layout_lays_nothing_out() -> None:
    xdna2 = TARGETS["xdna2"]
    assert xdna2.layout is REGIONS
    program = _example("rmsnorm_step")
    laid = plan(program, xdna2)
    bare = plan(program, dataclasses.replace(xdna2, layout=None))
    assert laid.admitted and laid.tiles and laid.regions
    assert bare.tiles == () and bare.regions == () and bare.relayouts == ()
    assert all(a.tile is None for a in bare.admissions)
    # the row kernel's steps are then admitted (or refused) by the table one by one
    assert len(bare.admissions) + len(bare.refusals) >= len(laid.admissions)


def test_only_xdna2_has_a_layout() -> None:
    assert {name for name, t in TARGETS.items() if t.layout is not None} == {"xdna2"}
