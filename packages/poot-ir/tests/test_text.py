"""The text format: exact round trips, golden texts, literal bit patterns, errors, fuzzing."""

from __future__ import annotations

import contextlib
import math

import numpy as np
import pytest
import strategies
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from poot_ir import (
    Arg,
    BroadcastParams,
    Builder,
    DType,
    Eqn,
    IotaParams,
    Literal,
    NoParams,
    Output,
    ParseError,
    PootError,
    Prim,
    Program,
    SliceParams,
    Storage,
    TensorType,
    TypeCheckError,
    Update,
    Var,
    format_program,
    parse_program,
)
from poot_ir import text as text_module
from strategies import extreme_bits, inputs_for, programs


def examples(n: int) -> settings:
    return settings(max_examples=n, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# -- round trips ----------------------------------------------------------------------------


@examples(200)
@given(programs())
def test_round_trip_is_identity(program: Program) -> None:
    text = format_program(program)
    assert parse_program(text) == program
    assert format_program(parse_program(text)) == text


def test_strategy_covers_every_primitive() -> None:
    assert set(strategies._MAKERS) == set(Prim)


@examples(60)
@given(st.data())
def test_inputs_match_their_program(data: st.DataObject) -> None:
    program = data.draw(programs(prims=[Prim.GATHER, Prim.DYNAMIC_UPDATE_SLICE, Prim.DIV]))
    inputs = data.draw(inputs_for(program))
    assert list(inputs) == [a.name for a in program.args]
    for a in program.args:
        assert inputs[a.name].dtype == a.var.dtype.numpy
        assert inputs[a.name].shape == a.var.shape
    by_id = {a.var.id: inputs[a.name] for a in program.args}
    for e in program.eqns:
        if e.prim is Prim.GATHER and e.inputs[1].type.size:
            idx = by_id[e.inputs[1].id]  # type: ignore[union-attr]
            size = e.inputs[0].type.shape[e.params.axis]  # type: ignore[union-attr]
            assert np.all((-size <= idx) & (idx < size))
        if e.prim is Prim.DYNAMIC_UPDATE_SLICE:
            for i, s in enumerate(e.inputs[2:]):
                room = e.inputs[0].type.shape[i] - e.inputs[1].type.shape[i]
                if isinstance(s, Var):
                    assert 0 <= int(by_id[s.id]) <= room
        if e.prim is Prim.DIV and e.out.dtype is DType.I32 and isinstance(e.inputs[1], Var):
            assert np.all(by_id[e.inputs[1].id] != 0)


@examples(40)
@given(st.data())
def test_finite_inputs_are_finite(data: st.DataObject) -> None:
    program = data.draw(programs(max_eqns=2))
    inputs = data.draw(inputs_for(program, finite=True))
    for a in program.args:
        if a.var.dtype.is_float:
            assert np.all(np.isfinite(inputs[a.name].astype(np.float32)))


# -- golden texts ---------------------------------------------------------------------------

RMSNORM = """\
# a hand-written program: comments and blank lines are allowed
program rmsnorm_step
  slot x %0: f32[8,64]
  weight w %1: f32[64]

  state acc %2(): f32[8,64]        # an unnamed state var
  %3: f32[8,64] = broadcast_in_dim %1 {dims=(1,), shape=(8,64)}
  %4(scaled): f32[8,64] = mul %0 %3
  %5: f32[8,64] = add %4 1.5:f32
  output y = %5
  update acc = %5
end
"""


def test_golden_rmsnorm() -> None:
    p = parse_program(RMSNORM)
    x = Var(0, TensorType((8, 64), DType.F32), "x")
    w = Var(1, TensorType((64,), DType.F32), "w")
    acc = Var(2, TensorType((8, 64), DType.F32), None)
    v3 = Var(3, TensorType((8, 64), DType.F32))
    v4 = Var(4, TensorType((8, 64), DType.F32), "scaled")
    v5 = Var(5, TensorType((8, 64), DType.F32))
    assert p.name == "rmsnorm_step"
    assert p.args == (
        Arg("x", x, Storage.SLOT),
        Arg("w", w, Storage.WEIGHT),
        Arg("acc", acc, Storage.STATE),
    )
    assert p.eqns == (
        Eqn(Prim.BROADCAST_IN_DIM, (w,), (v3,), BroadcastParams((8, 64), (1,))),
        Eqn(Prim.MUL, (x, v3), (v4,), NoParams()),
        Eqn(Prim.ADD, (v4, Literal(0x3FC00000, DType.F32)), (v5,), NoParams()),
    )
    assert p.outputs == (Output("y", v5),)
    assert p.updates == (Update("acc", v5),)
    # printing puts params in field order and drops the comments
    assert "broadcast_in_dim %1 {shape=(8,64), dims=(1,)}" in format_program(p)
    assert parse_program(format_program(p)) == p


def test_golden_builder_output() -> None:
    b = Builder("rmsnorm_step")
    x = b.slot("x", DType.F32, (8, 64))
    w = b.weight("w", DType.F32, (64,))
    acc = b.state("acc", DType.F32, (8, 64))
    y = b.add(b.mul(x, w), 1.5)
    b.output("y", y)
    b.update(acc, y)
    assert format_program(b.build()) == (
        "program rmsnorm_step\n"
        "  slot x %0: f32[8,64]\n"
        "  weight w %1: f32[64]\n"
        "  state acc %2: f32[8,64]\n"
        "  %3: f32[8,64] = broadcast_in_dim %1 {shape=(8,64), dims=(1,)}\n"
        "  %4: f32[8,64] = mul %0 %3\n"
        "  %5: f32[8,64] = add %4 1.5:f32\n"
        "  output y = %5\n"
        "  update acc = %5\n"
        "end\n"
    )


def test_golden_odd_names_and_params() -> None:
    text = """\
program "my program\\n"
  slot end %-4(other): i32[] # keywords are names by position
  slot "slot" %9 : f32 [ 0 , 2 ]   # spaces between tokens do not matter
  %10("a b"): f32[0,1] = slice %9 {start=(0,1), limit=(0,2), strides=(1,1,)}
  %11: f32[2,3] = iota {shape=(2,3), dtype=f32, axis=1}
  %12: f32[3,2] = transpose %11 {perm=(1,0)}
  output output = %-4
  output z = %12
end
"""
    p = parse_program(text)
    assert p.name == "my program\n"
    assert p.args[0] == Arg("end", Var(-4, TensorType((), DType.I32), "other"), Storage.SLOT)
    assert p.args[1].name == "slot" and p.args[1].var.name == "slot"
    assert p.eqns[0].out.name == "a b"
    assert p.eqns[0].params == SliceParams((0, 1), (0, 2), (1, 1))
    assert p.eqns[1].params == IotaParams((2, 3), DType.F32, 1)
    assert p.eqns[1].inputs == ()
    assert [o.name for o in p.outputs] == ["output", "z"]
    assert parse_program(format_program(p)) == p


def test_names_that_need_quoting_survive() -> None:
    for name in ["", "a b", '"', "\\", "\n\t#", "\u00e9", "x y = %1"]:
        p = Program(name, (), (), ())
        q = parse_program(format_program(p))
        assert q == p
        v = Var(0, TensorType((), DType.F32), name)
        p = Program("p", (Arg("a", v, Storage.SLOT),), (), (Output("o", v),))
        assert parse_program(format_program(p)) == p
    # a lone surrogate is no text (UTF-8 cannot encode it; OpenVINO raises on it): refused
    for text in (format_program(Program("\ud800", (), (), ())), 'program "p\\udc80"\nend\n'):
        with pytest.raises(ParseError, match="lone surrogate"):
            parse_program(text)


# -- literals -------------------------------------------------------------------------------


def _one_literal(lit: Literal) -> Program:
    b = Builder("lit")
    x = b.slot("x", lit.dtype, (2,))
    b.output("y", b.eq(x, lit))
    return b.build()


@pytest.mark.parametrize(
    ("bits", "dtype", "printed"),
    [
        (0x00000000, DType.F32, "0.0:f32"),
        (0x80000000, DType.F32, "-0.0:f32"),
        (0x3FC00000, DType.F32, "1.5:f32"),
        (0x3DCCCCCD, DType.F32, "0.1:f32"),
        (0x7F800000, DType.F32, "inf:f32"),
        (0xFF800000, DType.F32, "-inf:f32"),
        (0x7FC00000, DType.F32, "nan:f32"),
        (0xFFC00000, DType.F32, "-nan:f32"),
        (0x7FC00001, DType.F32, "0x7fc00001:f32"),  # quiet NaN with a payload
        (0x7F800001, DType.F32, "0x7f800001:f32"),  # signalling NaN
        (0xFF800001, DType.F32, "0xff800001:f32"),
        (0x00000001, DType.F32, "1e-45:f32"),  # the smallest subnormal
        (0x007FFFFF, DType.F32, "1.1754942e-38:f32"),  # the largest subnormal
        (0x7F7FFFFF, DType.F32, "3.4028235e+38:f32"),
        (0x7C00, DType.F16, "inf:f16"),
        (0x8000, DType.F16, "-0.0:f16"),
        (0x0001, DType.F16, "6e-08:f16"),
        (0x7BFF, DType.F16, "6.55e+04:f16"),
        (0x7E00, DType.F16, "nan:f16"),
        (0x7D00, DType.F16, "0x7d00:f16"),
        (0xFE01, DType.F16, "0xfe01:f16"),
        (0x3F80, DType.BF16, "1.0:bf16"),
        (0xFFC0, DType.BF16, "-nan:bf16"),
        (0x7F81, DType.BF16, "0x7f81:bf16"),
        (0x0001, DType.BF16, "9e-41:bf16"),
        (0x80000000, DType.I32, "-2147483648:i32"),
        (0x7FFFFFFF, DType.I32, "2147483647:i32"),
        (0xFFFFFFFF, DType.I32, "-1:i32"),
        (1, DType.BOOL, "true:bool"),
        (0, DType.BOOL, "false:bool"),
    ],
)
def test_literal_edge_cases(bits: int, dtype: DType, printed: str) -> None:
    p = _one_literal(Literal(bits, dtype))
    text = format_program(p)
    assert f" {printed}\n" in text
    assert parse_program(text) == p


def test_a_bool_literal_is_zero_or_one() -> None:
    # a byte of 2 is no bool: select would move it into a result as is
    with pytest.raises(TypeCheckError):
        _one_literal(Literal(2, DType.BOOL))
    with pytest.raises(PootError):
        parse_program(format_program(_one_literal(Literal(1, DType.BOOL))).replace("true", "0x02"))


@pytest.mark.parametrize("dtype", list(DType))
def test_extreme_literals_round_trip(dtype: DType) -> None:
    for bits in extreme_bits(dtype):
        p = _one_literal(Literal(bits, dtype))
        assert parse_program(format_program(p)) == p


@pytest.mark.parametrize("dtype", [DType.F16, DType.BF16])
def test_every_16_bit_pattern_round_trips(dtype: DType) -> None:
    # through the printer's own helpers: 65536 one-literal programs would take minutes
    for bits in range(2**16):
        text, _, name = text_module._literal(Literal(bits, dtype)).rpartition(":")
        assert name == dtype.value
        assert text_module._literal_bits(text, dtype) == bits, hex(bits)


@examples(300)
@given(st.integers(0, 2**32 - 1))
def test_any_f32_pattern_round_trips(bits: int) -> None:
    text, _, _ = text_module._literal(Literal(bits, DType.F32)).rpartition(":")
    assert text_module._literal_bits(text, DType.F32) == bits
    if not math.isnan(Literal(bits, DType.F32).as_float()):
        assert not text.startswith("0x")  # every non-NaN prints as a decimal


@pytest.mark.parametrize(
    ("written", "dtype", "bits"),
    [
        ("0x3f800000", DType.F32, 0x3F800000),
        ("0X3F80", DType.BF16, 0x3F80),
        ("1", DType.F32, 0x3F800000),
        ("+.5", DType.F32, 0x3F000000),
        ("1e400", DType.F32, 0x7F800000),  # rounds to infinity
        ("-1e-400", DType.F16, 0x8000),  # rounds to negative zero
        ("65520", DType.F16, 0x7C00),  # half-way above the largest f16: to even, infinity
        ("+inf", DType.BF16, 0x7F80),
        ("-nan", DType.F16, 0xFE00),
        ("-0", DType.I32, 0),
        ("0xffffffff", DType.I32, 0xFFFFFFFF),
        ("0x01", DType.BOOL, 1),
    ],
)
def test_literal_spellings(written: str, dtype: DType, bits: int) -> None:
    p = _one_literal(Literal(bits, dtype))
    text = format_program(p).replace(text_module._literal(Literal(bits, dtype)), "@")
    assert parse_program(text.replace("@", f"{written}:{dtype.value}")) == p


def test_format_refuses_a_literal_that_does_not_fit() -> None:
    x = Var(0, TensorType((), DType.F16))
    y = Var(1, TensorType((), DType.F16))
    e = Eqn(Prim.ADD, (x, Literal(2**16, DType.F16)), (y,), NoParams())
    with pytest.raises(TypeCheckError, match="does not fit"):
        format_program(Program("p", (Arg("x", x, Storage.SLOT),), (e,), (Output("y", y),)))


# -- errors ---------------------------------------------------------------------------------

BASE = """\
program p
  slot x %0: f32[2,3]
  %1: f32[2,3] = add %0 1.0:f32
  output y = %1
end
"""


def _edit(line: int, new: str) -> str:
    lines = BASE.split("\n")
    lines[line - 1] = new
    return "\n".join(lines)


@pytest.mark.parametrize(
    ("text", "line", "column", "reason"),
    [
        (_edit(3, "  %1: f32[2,3] = addd %0 1.0:f32"), 3, 18, "unknown primitive 'addd'"),
        (_edit(2, "  slot x %0: f33[2,3]"), 2, 14, "unknown dtype 'f33'"),
        (_edit(3, "  %1: f32[2,3] = add %0 1.x:f32"), 3, 25, "bad number '1.x' for a f32"),
        (_edit(3, "  %1: f32[2,3] = add %0 nan:i32"), 3, 25, "bad number 'nan' for a i32"),
        (_edit(3, "  %1: i32[2,3] = add %0 2147483648:i32"), 3, 25, "bad number"),
        (_edit(3, "  %1: f16[2,3] = add %0 0x10000:f16"), 3, 25, "bad number '0x10000'"),
        (_edit(2, "  slot x %0: f32[2,-3]"), 2, 20, "bad number '-3': expected a dimension"),
        (_edit(3, "  %1: f32[2,3] add %0 1.0:f32"), 3, 16, "expected '=' after the equation"),
        (_edit(4, "  output y %1"), 4, 12, "expected '='"),
        (_edit(3, "  %1: f32[3,2] = transpose %0 {perm=(1,0), foo=1}"), 3, 44, "unknown param key"),
        (_edit(3, "  %1: f32[3,2] = transpose %0 {perm=1}"), 3, 37, "wrong param type"),
        (_edit(3, "  %1: f32[2,3] = convert %0 {dtype=(1,)}"), 3, 36, "wrong param type"),
        (_edit(3, "  %1: f32[3,2] = transpose %0 {perm=(1,0), perm=(0,1)}"), 3, 44, "twice"),
        (_edit(3, "  %1: f32[3,2] = transpose %0"), 3, 30, "needs param(s) perm"),
        (_edit(3, "  %1: f32[3,2] = transpose %0 {perm=(1,0)"), 3, 42, "expected ',' or '}'"),
        (_edit(3, "  %1: f32[2,3] = add %0 1.0:"), 3, 29, "expected a dtype"),
        (_edit(3, "  %1: f32[2,3 = add %0 1.0:f32"), 3, 15, "expected ',' or ']'"),
        (
            _edit(3, "  %0: f32[2,3] = add %0 1.0:f32"),
            3,
            3,
            "duplicate var %0 (first defined on line 2)",
        ),
        (_edit(3, "  %1: f32[2,3] = add %7 1.0:f32"), 3, 22, "undefined var %7"),
        (_edit(2, "  slot 1x %0: f32[2,3]"), 2, 8, "expected an argument name"),
        (_edit(2, '  slot "x %0: f32[2,3]'), 2, 8, "unterminated quoted name"),
        (_edit(2, '  slot "\\q" %0: f32[2,3]'), 2, 8, "bad quoted name"),
        (_edit(2, "  slot x $0: f32[2,3]"), 2, 10, "unexpected '$'"),
        (_edit(2, "  slot x %0(: f32[2,3]"), 2, 13, "expected a var name"),
        (_edit(2, "  slot x %0 f32[2,3]"), 2, 13, "expected ':'"),
        (_edit(4, "  output y = %1 extra"), 4, 17, "trailing garbage"),
        (_edit(4, "  outputs y = %1"), 4, 3, "expected an argument"),
        (_edit(4, "  program q"), 4, 3, "expected an argument"),
        (_edit(5, "end x"), 5, 5, "trailing garbage"),
        (BASE + "\n# fine\n  slot z %9: f32[]\n", 8, 3, "trailing garbage after 'end'"),
        (BASE.replace("end\n", ""), 5, 1, "truncated input: expected 'end'"),
        (BASE.replace("end\n", "end"), 0, 0, ""),  # no final newline: fine
        ("program p\n  slot x %0: f32[2", 2, 19, "expected ',' or ']'"),
        ("", 1, 1, "truncated input: expected 'program'"),
        ("  # only a comment\n", 2, 1, "truncated input"),
        ("slot x %0: f32[]\n", 1, 1, "expected 'program'"),
        ("program\nend\n", 1, 8, "expected the program's name"),
    ],
)
def test_parse_errors(text: str, line: int, column: int, reason: str) -> None:
    if not reason:
        parse_program(text)
        return
    with pytest.raises(ParseError) as info:
        parse_program(text)
    assert (info.value.line, info.value.column) == (line, column), str(info.value)
    assert reason in info.value.reason
    assert str(info.value).startswith(f"line {line}, column {column}: ")


def test_type_errors_name_the_equation_and_its_line() -> None:
    text = _edit(3, "  %1: f32[3,2] = add %0 1.0:f32")
    with pytest.raises(TypeCheckError) as info:
        parse_program(text)
    assert (info.value.eqn, info.value.primitive) == (0, "add")
    assert "(line 3)" in str(info.value)
    with pytest.raises(TypeCheckError, match="not a state argument"):
        parse_program(BASE.replace("output y", "update x"))
    with pytest.raises(TypeCheckError, match="equation 0 \\(matmul\\)"):
        parse_program(_edit(3, "  %1: f32[2,3] = matmul %0 %0"))


def test_huge_integers_are_typed_errors() -> None:
    big = "9" * 4000  # a product of two of these is too long for str() to print
    text = _edit(3, f"  %1: f32[{big}] = reshape %0 {{shape=({big},{big})}}")
    with pytest.raises(ParseError, match="no target holds"):  # past any target: refused
        parse_program(text)
    with pytest.raises(ParseError, match="bad number"):
        parse_program(_edit(2, f"  slot x %0: f32[{big * 2}]"))


# -- fuzzing --------------------------------------------------------------------------------

_SYNTAX = st.sampled_from(list('%:=[](){},#"\\\n -+.0123456789xefinatrus'))


def _parse_or_poot_error(text: str) -> None:
    with contextlib.suppress(PootError):
        parse_program(text)


@examples(300)
@given(st.one_of(st.text(), st.text(_SYNTAX)))
def test_fuzz_random_text_raises_only_poot_errors(text: str) -> None:
    _parse_or_poot_error(text)
    _parse_or_poot_error("program p\n" + text)


@examples(300)
@given(st.data())
def test_fuzz_mutated_programs_raise_only_poot_errors(data: st.DataObject) -> None:
    text = list(format_program(data.draw(programs(max_eqns=4))))
    for _ in range(data.draw(st.integers(1, 3))):
        i = data.draw(st.integers(0, len(text) - 1))
        match data.draw(st.sampled_from(["delete", "duplicate", "swap", "insert"])):
            case "delete":
                del text[i]
            case "duplicate":
                text.insert(i, text[i])
            case "swap":
                j = min(i + 1, len(text) - 1)
                text[i], text[j] = text[j], text[i]
            case _:
                text.insert(i, data.draw(_SYNTAX))
        if not text:
            break
    _parse_or_poot_error("".join(text))
