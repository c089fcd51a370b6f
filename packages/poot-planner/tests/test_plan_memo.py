"""One plan asks admission and the narrowing's literal analysis once per program
(``admission.PlanMemo``), keeps nothing between plans, and plans made at once in threads are
the plans made one after another."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from poot_ir import Builder, DType, Program, parse_program
from poot_planner import TARGETS, Plan, plan
from poot_planner import admission as admission_module

EXAMPLES = Path(__file__).resolve().parents[3] / "src" / "poot" / "examples"
F32 = DType.F32


def _tried_but_not_rewritten() -> Program:
    """Legalization tries rules here (a product with a literal past FP16, a select) and makes
    none: the plan then admits the very program legalization admitted."""
    b = Builder("r")
    x = b.slot("x", F32, (4,))
    m = b.slot("m", DType.BOOL, (4,))
    b.output("y", b.mul(b.mul(b.sub(1.0, x), -3.4e38), x))
    b.output("l", b.select(m, x, 0.0))
    return b.build()


def _counting(monkeypatch: pytest.MonkeyPatch) -> Counter[tuple[str, int]]:
    """Counts of the memo's questions that reached the analysis, by (question, program id)."""
    counts: Counter[tuple[str, int]] = Counter()

    def wrap(name: str, real: Callable[..., object]) -> Callable[..., object]:
        def counted(program: Program, *rest: object) -> object:
            counts[(name, id(program))] += 1
            return real(program, *rest)

        return counted

    for name in ("admit_all", "literal_refusals"):
        monkeypatch.setattr(admission_module, name, wrap(name, getattr(admission_module, name)))
    return counts


def test_one_plan_asks_each_question_of_a_program_once(monkeypatch: pytest.MonkeyPatch) -> None:
    program = _tried_but_not_rewritten()
    counts = _counting(monkeypatch)
    p = plan(program, "intel-npu4")
    assert p.rewrites == () and p.refusals  # tried, nothing rewritten, refused
    assert counts == {("admit_all", id(program)): 1, ("literal_refusals", id(program)): 1}
    plan(program, "intel-npu4")  # a second plan remembers nothing of the first
    assert counts == {("admit_all", id(program)): 2, ("literal_refusals", id(program)): 2}


def _examples() -> list[Program]:
    return [parse_program(p.read_text()) for p in sorted(EXAMPLES.rglob("*.poot"))]


def _key(p: Plan) -> tuple[object, ...]:
    return (p.target.name, p.program, p.admissions, p.refusals, p.numerics, p.tiles, p.regions)


def test_plans_made_in_threads_are_the_plans_made_in_turn() -> None:
    jobs = [(prog, t) for prog in [*_examples(), _tried_but_not_rewritten()] for t in TARGETS]
    in_turn = [_key(plan(prog, t)) for prog, t in jobs]
    with ThreadPoolExecutor(max_workers=4) as pool:
        at_once = list(pool.map(lambda job: _key(plan(*job)), jobs * 3))
    assert at_once == in_turn * 3
