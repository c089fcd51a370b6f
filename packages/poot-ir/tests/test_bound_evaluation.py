"""``bind_evaluation``: ``evaluate`` over the same argument arrays on every call.

Every result is compared with ``evaluate`` of the same program on copies of what the bound
arrays hold at the call (the independent reference), at the edges: NaN and infinities, a result
that is an argument passed straight through, a chain long enough that slots are reused, arrays
written in place between calls, and the errors (bad bindings, an error during a call).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from poot_ir import ArgumentError, Builder, DType, IntegerDivisionByZero, Program, evaluate
from poot_ir.oracle import bind_evaluation


def _chain(n: int) -> Program:
    """A slot, a weight and a state; ``n`` equations deep (slots reused along the chain); the
    weight is also an output as it is (a result that is an argument)."""
    b = Builder("chain")
    w = b.weight("w", DType.F32, (4,))
    x = b.slot("x", DType.F32, (4,))
    acc = b.state("acc", DType.F32, (4,))
    y = x
    for i in range(n):
        y = b.mul(b.add(y, w), b.literal(0.5, DType.F32)) if i % 2 else b.max(y, acc)
    b.output("y", y)
    b.output("w_out", w)
    b.update(acc, b.add(acc, y))
    return b.build()


def _copies(arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {k: v.copy() for k, v in arrays.items()}


def _same(got: tuple[np.ndarray, ...], want: dict[str, np.ndarray], names: tuple[str, ...]) -> None:
    assert len(got) == len(names)
    for g, n in zip(got, names, strict=True):
        w = want[n]
        assert g.dtype == w.dtype and g.shape == w.shape
        assert np.array_equal(g, w, equal_nan=True), n
        assert np.array_equal(np.signbit(g), np.signbit(w)), n  # -0 stays -0


F32 = st.floats(width=32, allow_nan=True, allow_infinity=True)


@settings(derandomize=True, max_examples=60, deadline=None)
@given(
    st.integers(1, 9),
    st.lists(st.lists(F32, min_size=4, max_size=4), min_size=2, max_size=2),
    st.lists(st.lists(F32, min_size=4, max_size=4), min_size=1, max_size=4),
)
def test_each_call_is_evaluate_of_what_the_bound_arrays_hold(
    n: int, weights_state: list[list[float]], xs: list[list[float]]
) -> None:
    program = _chain(n)
    arrays = {
        "w": np.array(weights_state[0], np.float32),
        "x": np.zeros(4, np.float32),
        "acc": np.array(weights_state[1], np.float32),
    }
    bound = bind_evaluation(program, arrays)
    assert bound.names == program.result_names
    for x in xs:
        arrays["x"][...] = x  # written in place, as a device writes its buffers
        want = evaluate(program, _copies(arrays))
        got = bound()
        _same(got, want, program.result_names)
        arrays["acc"][...] = got[-1]  # the state carried, as a commit does


def test_results_are_fresh_arrays_never_the_bound_memory() -> None:
    program = _chain(1)
    arrays = {"w": np.ones(4, np.float32), "x": np.zeros(4, np.float32)}
    arrays["acc"] = np.zeros(4, np.float32)
    bound = bind_evaluation(program, arrays)
    first = bound()
    w_out = first[program.result_names.index("w_out")]
    assert not np.shares_memory(w_out, arrays["w"])  # the weight passed straight through
    w_out[...] = 7.0  # a caller writing into a result changes nothing bound
    first[0][...] = 9.0
    _same(bound(), evaluate(program, _copies(arrays)), program.result_names)
    assert np.array_equal(arrays["w"], np.ones(4, np.float32))


def test_an_error_during_a_call_is_the_oracles_and_the_next_call_is_clean() -> None:
    b = Builder("idiv")
    a = b.slot("a", DType.I32, (3,))
    d = b.slot("d", DType.I32, (3,))
    b.output("q", b.div(a, d))
    program = b.build()
    arrays = {"a": np.array([7, -7, 2**31 - 1], np.int32), "d": np.array([2, 0, 1], np.int32)}
    bound = bind_evaluation(program, arrays)
    with pytest.raises(IntegerDivisionByZero) as got:
        bound()
    with pytest.raises(IntegerDivisionByZero) as want:
        evaluate(program, _copies(arrays))
    assert str(got.value) == str(want.value)
    arrays["d"][1] = -1
    _same(bound(), evaluate(program, _copies(arrays)), program.result_names)


@pytest.mark.parametrize(
    ("arrays", "named"),
    [
        ({"w": np.zeros(4, np.float32), "x": np.zeros(4, np.float32)}, "acc"),  # missing
        (
            {n: np.zeros(4, np.float32) for n in ("w", "x", "acc", "extra")},
            "extra",
        ),
        (  # a dtype that evaluate would refuse
            {"w": np.zeros(4, np.float64), "x": np.zeros(4, np.float32)}
            | {"acc": np.zeros(4, np.float32)},
            "w",
        ),
        (  # a shape
            {"w": np.zeros(4, np.float32), "x": np.zeros((1, 4), np.float32)}
            | {"acc": np.zeros(4, np.float32)},
            "x",
        ),
        (  # no array at all
            {"w": [0.0] * 4, "x": np.zeros(4, np.float32), "acc": np.zeros(4, np.float32)},
            "w",
        ),
    ],
)
def test_a_bad_binding_is_an_argument_error_naming_the_argument(
    arrays: dict[str, object], named: str
) -> None:
    with pytest.raises(ArgumentError) as err:
        bind_evaluation(_chain(2), arrays)  # type: ignore[arg-type]
    assert err.value.argument == named


def test_a_wide_argument_is_bound_only_as_its_exact_i32_array() -> None:
    """``evaluate`` narrows an int64 array for a wide slot into a copy; a bound array is read
    in place, so binding one is refused rather than silently reading a stale copy."""
    b = Builder("wide")
    i = b.slot("i", DType.I32, (2,), wide=True)
    b.output("j", b.add(i, b.literal(1, DType.I32)))
    program = b.build()
    with pytest.raises(ArgumentError) as err:
        bind_evaluation(program, {"i": np.array([1, 2], np.int64)})
    assert err.value.argument == "i"
    exact = np.array([1, 2**31 - 1], np.int32)
    bound = bind_evaluation(program, {"i": exact})
    _same(bound(), evaluate(program, {"i": exact.copy()}), program.result_names)
