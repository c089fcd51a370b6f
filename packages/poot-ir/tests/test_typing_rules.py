"""``validate`` on hand-built malformed programs (bypassing the Builder), and ``infer_type`` on
the boundary cases of every primitive family. Every failure is a ``TypeCheckError`` whose
``eqn`` and ``primitive`` name the equation; ``parse_program`` refuses the same programs again.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest
from poot_ir import (
    Arg,
    Atom,
    BroadcastParams,
    ConcatParams,
    ConvertParams,
    ConvParams,
    DType,
    Eqn,
    GatherParams,
    IotaParams,
    IRError,
    Literal,
    NoParams,
    Output,
    Params,
    Prim,
    Program,
    ReduceParams,
    ReduceWindowParams,
    ReshapeParams,
    SliceParams,
    Storage,
    TensorType,
    TransposeParams,
    TypeCheckError,
    Update,
    Var,
    format_program,
    infer_type,
    parse_program,
    validate,
)

F32, F16, BF16, I32, BOOL = DType.F32, DType.F16, DType.BF16, DType.I32, DType.BOOL
NO = NoParams()


def var(id: int, shape: Sequence[int], dtype: DType = F32) -> Var:
    return Var(id, TensorType(tuple(shape), dtype))


def t(shape: Sequence[int], dtype: DType = F32) -> TensorType:
    return TensorType(tuple(shape), dtype)


# The arguments every malformed program below starts from.
X = var(0, (2, 3))  # f32[2,3]
Y = var(1, (3, 4))  # f32[3,4]
P = var(2, (2, 3), BOOL)  # bool[2,3]
IDX = var(3, (5,), I32)  # i32[5]
S = var(4, (), I32)  # i32[] (a start)
ARGS = (
    Arg("x", X, Storage.SLOT),
    Arg("y", Y, Storage.WEIGHT),
    Arg("p", P, Storage.SLOT),
    Arg("idx", IDX, Storage.SLOT),
    Arg("s", S, Storage.SLOT),
)


def eqn(prim: Prim, inputs: Sequence[Atom], out: Var, params: Params = NO) -> Eqn:
    return Eqn(prim, tuple(inputs), (out,), params)


def program(*eqns: Eqn, outputs: Sequence[Output] = (), args: Sequence[Arg] = ARGS) -> Program:
    return Program("t", tuple(args), tuple(eqns), tuple(outputs))


def test_the_base_program_is_valid() -> None:
    p = program(
        eqn(Prim.NEG, [X], var(5, (2, 3))),
        eqn(Prim.MATMUL, [var(5, (2, 3)), Y], var(6, (2, 4))),
        outputs=[Output("z", var(6, (2, 4)))],
    )
    assert validate(p) is p
    assert parse_program(format_program(p)) == p


# -- malformed programs ---------------------------------------------------------------------

LIT1 = Literal.of(1.0, F32)
#: name, the malformed program, the failing equation's index and primitive, a fact its message says
MALFORMED: list[tuple[str, Program, int, str, str]] = [
    # SSA order
    (
        "use before definition",
        program(
            eqn(Prim.NEG, [var(6, (2, 3))], var(5, (2, 3))),
            eqn(Prim.NEG, [X], var(6, (2, 3))),
        ),
        0,
        "neg",
        "%6 is used before it is defined",
    ),
    (
        "use with another type",
        program(eqn(Prim.NEG, [var(0, (3, 2))], var(5, (3, 2)))),
        0,
        "neg",
        "%0 is used before it is defined (or with another type)",
    ),
    (
        "redefines an argument",
        program(eqn(Prim.NEG, [X], var(0, (2, 3)))),
        0,
        "neg",
        "%0 is defined twice",
    ),
    (
        "redefines a result",
        program(eqn(Prim.NEG, [X], var(5, (2, 3))), eqn(Prim.ABS, [X], var(5, (2, 3)))),
        1,
        "abs",
        "%5 is defined twice",
    ),
    (
        "uses its own result",
        program(eqn(Prim.NEG, [var(5, (2, 3))], var(5, (2, 3)))),
        0,
        "neg",
        "used before it is defined",
    ),
    (
        "two outputs",
        program(Eqn(Prim.NEG, (X,), (var(5, (2, 3)), var(6, (2, 3))), NO)),
        0,
        "neg",
        "has 2 outputs",
    ),
    # declared result types
    ("wrong result dtype", program(eqn(Prim.NEG, [X], var(5, (2, 3), F16))), 0, "neg", "f16[2,3]"),
    ("wrong result shape", program(eqn(Prim.NEG, [X], var(5, (3, 2)))), 0, "neg", "f32[3,2]"),
    (
        "comparison declared f32",
        program(eqn(Prim.GT, [X, X], var(5, (2, 3)))),
        0,
        "gt",
        "its type is bool[2,3]",
    ),
    (
        "reduction keeps the axis",
        program(eqn(Prim.REDUCE_SUM, [X], var(5, (2, 1)), ReduceParams((1,)))),
        0,
        "reduce_sum",
        "its type is f32[2]",
    ),
    # parameters
    (
        "params of add",
        program(eqn(Prim.ADD, [X, X], var(5, (2, 3)), ReduceParams((0,)))),
        0,
        "add",
        "takes NoParams, got ReduceParams",
    ),
    (
        "params of transpose",
        program(eqn(Prim.TRANSPOSE, [X], var(5, (3, 2)))),
        0,
        "transpose",
        "takes TransposeParams, got NoParams",
    ),
    (
        "params of reduce",
        program(eqn(Prim.REDUCE_MAX, [X], var(5, (2,)), GatherParams(1))),
        0,
        "reduce_max",
        "takes ReduceParams",
    ),
    # arity and operand kinds
    ("neg of two", program(eqn(Prim.NEG, [X, X], var(5, (2, 3)))), 0, "neg", "takes 1 operand"),
    ("add of one", program(eqn(Prim.ADD, [X], var(5, (2, 3)))), 0, "add", "takes 2 operand"),
    (
        "iota of one",
        program(eqn(Prim.IOTA, [X], var(5, (2,), I32), IotaParams((2,), I32, 0))),
        0,
        "iota",
        "takes 0 operand",
    ),
    (
        "add of literals",
        program(eqn(Prim.ADD, [LIT1, LIT1], var(5, ()))),
        0,
        "add",
        "both are literals",
    ),
    ("exp of a literal", program(eqn(Prim.EXP, [LIT1], var(5, ()))), 0, "exp", "not a literal"),
    # elementwise
    (
        "exp of i32",
        program(eqn(Prim.EXP, [IDX], var(5, (5,), I32))),
        0,
        "exp",
        "not defined on i32",
    ),
    (
        "abs of bool",
        program(eqn(Prim.ABS, [P], var(5, (2, 3), BOOL))),
        0,
        "abs",
        "not defined on bool",
    ),
    (
        "add of bool",
        program(eqn(Prim.ADD, [P, P], var(5, (2, 3), BOOL))),
        0,
        "add",
        "not defined on bool",
    ),
    (
        "add shapes",
        program(eqn(Prim.ADD, [X, Y], var(5, (2, 3)))),
        0,
        "add",
        "operand shapes differ",
    ),
    (
        "add dtypes",
        program(eqn(Prim.MUL, [X, Literal.of(1, I32)], var(5, (2, 3)))),
        0,
        "mul",
        "operand dtypes differ",
    ),
    (
        "select f32 predicate",
        program(eqn(Prim.SELECT, [X, X, X], var(5, (2, 3)))),
        0,
        "select",
        "predicate must be bool, got f32[2,3]",
    ),
    (
        "select i32 predicate",
        program(eqn(Prim.SELECT, [var(3, (5,), I32), IDX, IDX], var(5, (5,), I32))),
        0,
        "select",
        "predicate must be bool",
    ),
    (
        "select literal predicate",
        program(eqn(Prim.SELECT, [Literal.of(True, BOOL), X, X], var(5, (2, 3)))),
        0,
        "select",
        "must be a tensor",
    ),
    (
        "select branch shape",
        program(eqn(Prim.SELECT, [P, X, Y], var(5, (2, 3)))),
        0,
        "select",
        "does not match predicate",
    ),
    (
        "select branch dtypes",
        program(eqn(Prim.SELECT, [P, X, Literal.of(0, I32)], var(5, (2, 3)))),
        0,
        "select",
        "branch dtypes differ",
    ),
    # reductions
    (
        "axes unsorted",
        program(eqn(Prim.REDUCE_SUM, [X], var(5, ()), ReduceParams((1, 0)))),
        0,
        "reduce_sum",
        "sorted, distinct",
    ),
    (
        "axes repeated",
        program(eqn(Prim.REDUCE_SUM, [X], var(5, (2,)), ReduceParams((1, 1)))),
        0,
        "reduce_sum",
        "sorted, distinct",
    ),
    (
        "axis negative",
        program(eqn(Prim.REDUCE_MAX, [X], var(5, (2,)), ReduceParams((-1,)))),
        0,
        "reduce_max",
        "within rank 2",
    ),
    (
        "axis beyond",
        program(eqn(Prim.REDUCE_MAX, [X], var(5, (2,)), ReduceParams((2,)))),
        0,
        "reduce_max",
        "within rank 2",
    ),
    (
        "reduce bool",
        program(eqn(Prim.REDUCE_SUM, [P], var(5, (2,), BOOL), ReduceParams((1,)))),
        0,
        "reduce_sum",
        "not defined on bool",
    ),
    # data movement
    (
        "perm repeated",
        program(eqn(Prim.TRANSPOSE, [X], var(5, (2, 2)), TransposeParams((0, 0)))),
        0,
        "transpose",
        "not a permutation",
    ),
    (
        "perm short",
        program(eqn(Prim.TRANSPOSE, [X], var(5, (2,)), TransposeParams((0,)))),
        0,
        "transpose",
        "not a permutation",
    ),
    (
        "perm negative",
        program(eqn(Prim.TRANSPOSE, [X], var(5, (3, 2)), TransposeParams((-1, 0)))),
        0,
        "transpose",
        "not a permutation",
    ),
    (
        "reshape size",
        program(eqn(Prim.RESHAPE, [X], var(5, (7,)), ReshapeParams((7,)))),
        0,
        "reshape",
        "(6 elements) to (7,) (7 elements)",
    ),
    (
        "reshape negative",
        program(eqn(Prim.RESHAPE, [X], var(5, (-2, -3)), ReshapeParams((-2, -3)))),
        0,
        "reshape",
        "non-negative integers",
    ),
    (
        "broadcast size",
        program(eqn(Prim.BROADCAST_IN_DIM, [Y], var(5, (3, 5)), BroadcastParams((3, 5), (0, 1)))),
        0,
        "broadcast_in_dim",
        "size 4) cannot broadcast to size 5",
    ),
    (
        "broadcast dims count",
        program(eqn(Prim.BROADCAST_IN_DIM, [X], var(5, (2, 3)), BroadcastParams((2, 3), (0,)))),
        0,
        "broadcast_in_dim",
        "must map each of the 2 axes",
    ),
    (
        "broadcast dims order",
        program(
            eqn(Prim.BROADCAST_IN_DIM, [X], var(5, (3, 2, 3)), BroadcastParams((3, 2, 3), (2, 1)))
        ),
        0,
        "broadcast_in_dim",
        "strictly increasing",
    ),
    (
        "broadcast dims range",
        program(eqn(Prim.BROADCAST_IN_DIM, [X], var(5, (2, 3)), BroadcastParams((2, 3), (0, 2)))),
        0,
        "broadcast_in_dim",
        "into rank 2",
    ),
    (
        "broadcast shape",
        program(eqn(Prim.BROADCAST_IN_DIM, [X], var(5, (2, 3)), BroadcastParams((2, -3), (0, 1)))),
        0,
        "broadcast_in_dim",
        "non-negative",
    ),
    (
        "slice limit",
        program(eqn(Prim.SLICE, [X], var(5, (2, 4)), SliceParams((0, 0), (2, 4), (1, 1)))),
        0,
        "slice",
        "axis 1: need 0 <= start 0 <= limit 4 <= size 3",
    ),
    (
        "slice start past limit",
        program(eqn(Prim.SLICE, [X], var(5, (0, 3)), SliceParams((2, 0), (1, 3), (1, 1)))),
        0,
        "slice",
        "axis 0",
    ),
    (
        "slice negative start",
        program(eqn(Prim.SLICE, [X], var(5, (1, 3)), SliceParams((-1, 0), (2, 3), (1, 1)))),
        0,
        "slice",
        "start -1",
    ),
    (
        "slice stride",
        program(eqn(Prim.SLICE, [X], var(5, (2, 3)), SliceParams((0, 0), (2, 3), (1, 0)))),
        0,
        "slice",
        "stride 0 >= 1",
    ),
    (
        "slice entries",
        program(eqn(Prim.SLICE, [X], var(5, (2, 3)), SliceParams((0,), (2,), (1,)))),
        0,
        "slice",
        "each have 2 entries",
    ),
    (
        "concat axis",
        program(eqn(Prim.CONCAT, [X, X], var(5, (2, 6)), ConcatParams(2))),
        0,
        "concat",
        "axis 2 is outside rank 2",
    ),
    (
        "concat shapes",
        program(eqn(Prim.CONCAT, [X, Y], var(5, (5, 3)), ConcatParams(0))),
        0,
        "concat",
        "differ outside axis 0",
    ),
    (
        "concat ranks",
        program(eqn(Prim.CONCAT, [X, IDX], var(5, (2, 3)), ConcatParams(0))),
        0,
        "concat",
        "differ outside axis 0",
    ),
    (
        "concat dtypes",
        program(eqn(Prim.CONCAT, [X, P], var(5, (4, 3)), ConcatParams(0))),
        0,
        "concat",
        "differ outside axis 0",
    ),
    (
        "concat of nothing",
        program(eqn(Prim.CONCAT, [], var(5, (0,)), ConcatParams(0))),
        0,
        "concat",
        "at least one",
    ),
    (
        "gather axis",
        program(eqn(Prim.GATHER, [X, IDX], var(5, (2, 5)), GatherParams(2))),
        0,
        "gather",
        "axis 2 is outside rank 2",
    ),
    (
        "gather of a scalar",
        program(eqn(Prim.GATHER, [S, IDX], var(5, (5,), I32), GatherParams(0))),
        0,
        "gather",
        "outside rank 0",
    ),
    (
        "gather f32 indices",
        program(eqn(Prim.GATHER, [Y, X], var(5, (2, 3, 4)), GatherParams(0))),
        0,
        "gather",
        "indices must be i32",
    ),
    # dynamic_update_slice
    (
        "dus update dtype",
        program(
            eqn(
                Prim.DYNAMIC_UPDATE_SLICE,
                [X, P, Literal.of(0, I32), Literal.of(0, I32)],
                var(5, (2, 3)),
            )
        ),
        0,
        "dynamic_update_slice",
        "does not fit",
    ),
    (
        "dus start past the window",
        program(
            eqn(
                Prim.DYNAMIC_UPDATE_SLICE,
                [Y, X, Literal.of(2, I32), Literal.of(0, I32)],
                var(5, (3, 4)),
            )
        ),
        0,
        "dynamic_update_slice",
        "literal start 2 on axis 0",
    ),
    (
        "dus start on the last axis",
        program(
            eqn(
                Prim.DYNAMIC_UPDATE_SLICE,
                [Y, X, Literal.of(1, I32), Literal.of(2, I32)],
                var(5, (3, 4)),
            )
        ),
        0,
        "dynamic_update_slice",
        "literal start 2 on axis 1",
    ),
    (
        "dus negative start",
        program(eqn(Prim.DYNAMIC_UPDATE_SLICE, [Y, X, Literal.of(-1, I32), S], var(5, (3, 4)))),
        0,
        "dynamic_update_slice",
        "literal start -1 on axis 0",
    ),
    (
        "dus f32 start",
        program(eqn(Prim.DYNAMIC_UPDATE_SLICE, [Y, X, LIT1, S], var(5, (3, 4)))),
        0,
        "dynamic_update_slice",
        "start 0 must be an i32 scalar",
    ),
    (
        "dus vector start",
        program(eqn(Prim.DYNAMIC_UPDATE_SLICE, [IDX, var(3, (5,), I32), IDX], var(5, (5,), I32))),
        0,
        "dynamic_update_slice",
        "i32 scalar",
    ),
    (
        "dus start count",
        program(eqn(Prim.DYNAMIC_UPDATE_SLICE, [Y, X, S], var(5, (3, 4)))),
        0,
        "dynamic_update_slice",
        "needs 2 start indices, got 1",
    ),
    (
        "dus update too big",
        program(eqn(Prim.DYNAMIC_UPDATE_SLICE, [X, Y, S, S], var(5, (2, 3)))),
        0,
        "dynamic_update_slice",
        "does not fit",
    ),
    (
        "dus update rank",
        program(eqn(Prim.DYNAMIC_UPDATE_SLICE, [Y, var(3, (5,), I32), S, S], var(5, (3, 4)))),
        0,
        "dynamic_update_slice",
        "does not fit",
    ),
    (
        "dus no update",
        program(eqn(Prim.DYNAMIC_UPDATE_SLICE, [Y], var(5, (3, 4)))),
        0,
        "dynamic_update_slice",
        "takes an operand, an update",
    ),
    # iota
    (
        "iota axis",
        program(eqn(Prim.IOTA, [], var(5, (2, 3), I32), IotaParams((2, 3), I32, 2))),
        0,
        "iota",
        "axis 2",
    ),
    (
        "iota of rank 0",
        program(eqn(Prim.IOTA, [], var(5, (), I32), IotaParams((), I32, 0))),
        0,
        "iota",
        "axis 0",
    ),
    (
        "iota bool",
        program(eqn(Prim.IOTA, [], var(5, (2,), BOOL), IotaParams((2,), BOOL, 0))),
        0,
        "iota",
        "numeric dtype",
    ),
    # matmul
    (
        "matmul inner",
        program(eqn(Prim.MATMUL, [X, X], var(5, (2, 3)))),
        0,
        "matmul",
        "cannot contract f32[2,3] with f32[2,3]",
    ),
    (
        "matmul rank 1",
        program(eqn(Prim.MATMUL, [IDX, IDX], var(5, (), I32))),
        0,
        "matmul",
        "cannot contract",
    ),
    (
        "matmul ranks",
        program(
            eqn(Prim.MATMUL, [X, var(5, (1, 3, 4))], var(6, (1, 2, 4))),
            args=(*ARGS, Arg("b", var(5, (1, 3, 4)), Storage.SLOT)),
        ),
        0,
        "matmul",
        "cannot contract",
    ),
    (
        "matmul batch",
        program(
            eqn(Prim.MATMUL, [var(5, (2, 2, 3)), var(6, (3, 3, 4))], var(7, (2, 2, 4))),
            args=(
                *ARGS,
                Arg("a", var(5, (2, 2, 3)), Storage.SLOT),
                Arg("b", var(6, (3, 3, 4)), Storage.SLOT),
            ),
        ),
        0,
        "matmul",
        "equal batch axes",
    ),
    (
        "matmul dtypes",
        program(
            eqn(Prim.MATMUL, [X, var(5, (3, 4), F16)], var(6, (2, 4))),
            args=(*ARGS, Arg("h", var(5, (3, 4), F16), Storage.SLOT)),
        ),
        0,
        "matmul",
        "share a numeric dtype",
    ),
    (
        "matmul bool",
        program(
            eqn(Prim.MATMUL, [P, var(5, (3, 2), BOOL)], var(6, (2, 2), BOOL)),
            args=(*ARGS, Arg("q", var(5, (3, 2), BOOL), Storage.SLOT)),
        ),
        0,
        "matmul",
        "share a numeric dtype",
    ),
    # literals whose bits do not fit their dtype
    (
        "f32 literal of 2**40",
        program(eqn(Prim.ADD, [X, Literal(2**40, F32)], var(5, (2, 3)))),
        0,
        "add",
        "bit pattern 0x10000000000 does not fit f32",
    ),
    (
        "f32 literal of -1",
        program(eqn(Prim.MUL, [Literal(-1, F32), X], var(5, (2, 3)))),
        0,
        "mul",
        "literal operand 0: bit pattern -0x1 does not fit f32",
    ),
    (
        "f16 literal of 2**16",
        program(
            eqn(Prim.MAX, [var(5, (2,), F16), Literal(2**16, F16)], var(6, (2,), F16)),
            args=(*ARGS, Arg("h", var(5, (2,), F16), Storage.SLOT)),
        ),
        0,
        "max",
        "0x10000 does not fit f16",
    ),
    (
        "bf16 literal of 2**16",
        program(
            eqn(Prim.MIN, [var(5, (2,), BF16), Literal(2**16, BF16)], var(6, (2,), BF16)),
            args=(*ARGS, Arg("h", var(5, (2,), BF16), Storage.SLOT)),
        ),
        0,
        "min",
        "does not fit bf16",
    ),
    (
        "i32 literal of 2**32",
        program(eqn(Prim.ADD, [IDX, Literal(2**32, I32)], var(5, (5,), I32))),
        0,
        "add",
        "0x100000000 does not fit i32",
    ),
    (
        "bool literal of 256",
        program(
            eqn(Prim.SELECT, [P, X, LIT1], var(5, (2, 3))),
            eqn(Prim.EQ, [P, Literal(256, BOOL)], var(6, (2, 3), BOOL)),
        ),
        1,
        "eq",
        "0x100 does not fit bool",
    ),
    (
        "dus start of 2**32",
        program(eqn(Prim.DYNAMIC_UPDATE_SLICE, [Y, X, Literal(2**32, I32), S], var(5, (3, 4)))),
        0,
        "dynamic_update_slice",
        "does not fit i32",
    ),
    (
        "huge literal",
        program(eqn(Prim.ADD, [X, Literal(2**20000, F32)], var(5, (2, 3)))),
        0,
        "add",
        "does not fit f32",
    ),
    # integers too long for str() in a message
    (
        "reshape to huge dims",
        program(eqn(Prim.RESHAPE, [X], var(5, (10**4000,)), ReshapeParams((10**4000, 10**4000)))),
        0,
        "reshape",
        "too large to print",
    ),
    (
        "huge slice start",
        program(eqn(Prim.SLICE, [X], var(5, (2, 3)), SliceParams((10**5000, 0), (2, 3), (1, 1)))),
        0,
        "slice",
        "too large to print",
    ),
    (
        "huge declared result",
        program(eqn(Prim.NEG, [X], var(5, (10**5000,)))),
        0,
        "neg",
        "declares result (too large to print)",
    ),
]


@pytest.mark.parametrize(
    ("name", "prog", "index", "prim", "fact"), MALFORMED, ids=[m[0] for m in MALFORMED]
)
def test_validate_names_the_equation(
    name: str, prog: Program, index: int, prim: str, fact: str
) -> None:
    with pytest.raises(TypeCheckError) as info:
        validate(prog)
    err = info.value
    assert (err.eqn, err.primitive) == (index, prim)
    assert str(err).startswith(f"equation {index} ({prim}): ")
    assert fact in str(err)


@pytest.mark.parametrize(
    ("name", "prog", "index", "prim", "fact"), MALFORMED, ids=[m[0] for m in MALFORMED]
)
def test_parse_program_refuses_it_again(
    name: str, prog: Program, index: int, prim: str, fact: str
) -> None:
    try:
        text = format_program(prog)
    except IRError:
        return  # not even printable (e.g. a literal whose bits do not fit, two outputs)
    except ValueError:
        return  # an integer str() will not print: the text format cannot hold this program
    with pytest.raises(IRError) as info:
        parse_program(text)
    err = info.value
    if isinstance(err, TypeCheckError):
        assert (err.eqn, err.primitive) == (index, prim)


def test_infer_type_names_the_equation_it_is_given() -> None:
    with pytest.raises(TypeCheckError) as info:
        infer_type(Prim.RESHAPE, [X], ReshapeParams((10**4000, 10**4000)), 7)
    assert (info.value.eqn, info.value.primitive) == (7, "reshape")
    with pytest.raises(TypeCheckError) as info:
        infer_type(Prim.MATMUL, [X, X], NO)
    assert (info.value.eqn, info.value.primitive) == (None, "matmul")
    assert str(info.value).startswith("matmul: cannot contract")


# -- program-level failures: no equation to name --------------------------------------------

PROGRAM_LEVEL: list[tuple[str, Program, str]] = [
    (
        "argument name",
        Program("t", (Arg("not a name", X, Storage.SLOT),), (), ()),
        "not an identifier",
    ),
    (
        "argument twice",
        Program("t", (Arg("x", X, Storage.SLOT), Arg("x", Y, Storage.SLOT)), (), ()),
        "declared twice",
    ),
    (
        "argument var twice",
        Program("t", (Arg("x", X, Storage.SLOT), Arg("z", X, Storage.SLOT)), (), ()),
        "%0 is defined twice",
    ),
    (
        "argument shape",
        Program("t", (Arg("x", var(0, (2, -1)), Storage.SLOT),), (), ()),
        "non-negative integers",
    ),
    (
        "huge negative argument shape",
        Program("t", (Arg("x", var(0, (-(10**5000),)), Storage.SLOT),), (), ()),
        "(too large to print) must be non-negative",
    ),
    (
        "output undefined",
        program(outputs=[Output("z", var(9, (2,)))]),
        "%9 is used before it is defined",
    ),
    (
        "output of another type",
        program(outputs=[Output("z", var(0, (6,)))]),
        "used before it is defined (or with another type)",
    ),
    ("output name", program(outputs=[Output("a b", X)]), "not a fresh identifier"),
    ("output twice", program(outputs=[Output("z", X), Output("z", Y)]), "not a fresh identifier"),
    (
        "update of a slot",
        Program("t", ARGS, (), (), (Update("x", X),)),
        "not a state argument",
    ),
    (
        "update of nothing",
        Program("t", ARGS, (), (), (Update("nope", X),)),
        "not a state argument",
    ),
    (
        "state without update",
        Program("t", (*ARGS, Arg("st", var(5, (2,)), Storage.STATE)), (), ()),
        "['st'] have no update",
    ),
    (
        "state updated twice",
        Program("t", (Arg("st", X, Storage.STATE),), (), (), (Update("st", X), Update("st", X))),
        "updated twice",
    ),
    (
        "state named like an output",
        Program("t", (Arg("st", X, Storage.STATE),), (), (Output("st", X),), (Update("st", X),)),
        "shares its name with an output",
    ),
    (
        "update of another type",
        Program(
            "t",
            (Arg("st", X, Storage.STATE), Arg("y", Y, Storage.SLOT)),
            (),
            (),
            (Update("st", Y),),
        ),
        "is f32[2,3] but its update is f32[3,4]",
    ),
    (
        "update undefined",
        Program("t", (Arg("st", X, Storage.STATE),), (), (), (Update("st", var(7, (2, 3))),)),
        "%7 is used before it is defined",
    ),
]


@pytest.mark.parametrize(("name", "prog", "fact"), PROGRAM_LEVEL, ids=[c[0] for c in PROGRAM_LEVEL])
def test_program_level_failures(name: str, prog: Program, fact: str) -> None:
    with pytest.raises(TypeCheckError) as info:
        validate(prog)
    assert info.value.eqn is None
    assert fact in str(info.value)


def test_a_state_round_trip_is_valid() -> None:
    st = Arg("st", X, Storage.STATE)
    nxt = var(5, (2, 3))
    p = Program("t", (st,), (eqn(Prim.NEG, [X], nxt),), (Output("y", nxt),), (Update("st", nxt),))
    assert validate(p) is p
    assert p.result_names == ("y", "st")


@pytest.mark.parametrize(
    "lit",
    [
        Literal(0xFFFF_FFFF, F32),
        Literal(0, F32),
        Literal(0xFFFF, F16),
        Literal(0xFFFF, BF16),
        Literal(0xFFFF_FFFF, I32),
        Literal(1, BOOL),
        Literal(0, BOOL),
    ],
    ids=str,
)
def test_every_pattern_of_the_dtypes_width_is_a_literal(lit: Literal) -> None:
    # the largest and smallest bit patterns of each width are valid literals
    a, c = var(0, (2,), lit.dtype), var(1, (2,), BOOL)
    e = eqn(Prim.SELECT, [c, a, lit], var(2, (2,), lit.dtype))
    p = Program("t", (Arg("a", a, Storage.SLOT), Arg("c", c, Storage.SLOT)), (e,), ())
    assert validate(p) is p


# -- infer_type on the boundaries of every family -------------------------------------------


def _np(shape: Sequence[int], dtype: DType = F32) -> np.ndarray:
    return np.zeros(tuple(shape), dtype.numpy)


def _infer_cases() -> list[tuple[str, Prim, list[Atom], Params, TensorType]]:
    """Each expected type is what numpy gives for the same operation on arrays of those shapes."""
    cases: list[tuple[str, Prim, list[Atom], Params, TensorType]] = []

    def case(name: str, prim: Prim, inputs: list[Atom], params: Params, want: np.ndarray) -> None:
        dtype = DType.from_numpy(want.dtype)
        assert dtype is not None
        cases.append((name, prim, inputs, params, TensorType(want.shape, dtype)))

    for shape in [(), (0,), (1,), (2, 0, 3), (1, 1)]:
        s = "x".join(map(str, shape)) or "scalar"
        for d in (F32, F16, BF16):
            case(f"exp {d.value} {s}", Prim.EXP, [var(0, shape, d)], NO, np.exp(_np(shape, d)))
        case(f"neg i32 {s}", Prim.NEG, [var(0, shape, I32)], NO, np.negative(_np(shape, I32)))
        case(f"abs i32 {s}", Prim.ABS, [var(0, shape, I32)], NO, np.abs(_np(shape, I32)))
        case(f"add {s}", Prim.ADD, [var(0, shape), var(1, shape)], NO, _np(shape) + _np(shape))
        case(f"add literal {s}", Prim.ADD, [var(0, shape), LIT1], NO, _np(shape) + np.float32(1))
        case(f"gt {s}", Prim.GT, [var(0, shape), var(1, shape)], NO, _np(shape) > _np(shape))
        case(
            f"eq bool {s}",
            Prim.EQ,
            [var(0, shape, BOOL), Literal.of(True, BOOL)],
            NO,
            _np(shape, BOOL) == np.True_,
        )
        case(
            f"select {s}",
            Prim.SELECT,
            [var(0, shape, BOOL), var(1, shape, I32), Literal.of(0, I32)],
            NO,
            np.where(_np(shape, BOOL), _np(shape, I32), np.int32(0)),
        )
        for d in DType:
            case(
                f"convert to {d.value} {s}",
                Prim.CONVERT,
                [var(0, shape)],
                ConvertParams(d),
                _np(shape).astype(d.numpy),
            )
        perm = tuple(reversed(range(len(shape))))
        case(
            f"transpose {s}",
            Prim.TRANSPOSE,
            [var(0, shape)],
            TransposeParams(perm),
            _np(shape).transpose(perm),
        )
        flat = (int(np.prod(shape)),)
        case(
            f"reshape flat {s}",
            Prim.RESHAPE,
            [var(0, shape)],
            ReshapeParams(flat),
            _np(shape).reshape(flat),
        )
        case(
            f"slice all {s}",
            Prim.SLICE,
            [var(0, shape)],
            SliceParams((0,) * len(shape), shape, (1,) * len(shape)),
            _np(shape),
        )
        case(f"reduce nothing {s}", Prim.REDUCE_SUM, [var(0, shape)], ReduceParams(()), _np(shape))
        case(
            f"reduce all {s}",
            Prim.REDUCE_MAX,
            [var(0, shape)],
            ReduceParams(tuple(range(len(shape)))),
            np.zeros(()).astype(np.float32),
        )
        case(
            f"broadcast {s} up",
            Prim.BROADCAST_IN_DIM,
            [var(0, shape)],
            BroadcastParams((4, *shape), tuple(range(1, len(shape) + 1))),
            np.broadcast_to(_np(shape), (4, *shape)),
        )
        case(
            f"dus whole {s}",
            Prim.DYNAMIC_UPDATE_SLICE,
            [var(0, shape), var(1, shape), *([Literal.of(0, I32)] * len(shape))],
            NO,
            _np(shape),
        )

    x203 = _np((2, 0, 3))
    case(
        "reduce an empty axis",
        Prim.REDUCE_SUM,
        [var(0, (2, 0, 3))],
        ReduceParams((1,)),
        x203.sum(axis=1),
    )
    case(
        "reduce around an empty axis",
        Prim.REDUCE_SUM,
        [var(0, (2, 0, 3))],
        ReduceParams((0, 2)),
        x203.sum(axis=(0, 2)),
    )
    case(
        "reduce a size-1 axis",
        Prim.REDUCE_MAX,
        [var(0, (1, 3))],
        ReduceParams((0,)),
        _np((1, 3)).max(axis=0),
    )
    case(
        "reshape scalar up",
        Prim.RESHAPE,
        [var(0, ())],
        ReshapeParams((1, 1, 1)),
        _np(()).reshape((1, 1, 1)),
    )
    case(
        "reshape to scalar",
        Prim.RESHAPE,
        [var(0, (1, 1))],
        ReshapeParams(()),
        _np((1, 1)).reshape(()),
    )
    case(
        "reshape empty",
        Prim.RESHAPE,
        [var(0, (2, 0, 3))],
        ReshapeParams((0, 7)),
        x203.reshape((0, 7)),
    )
    case(
        "broadcast scalar to empty",
        Prim.BROADCAST_IN_DIM,
        [var(0, ())],
        BroadcastParams((2, 0), ()),
        np.broadcast_to(_np(()), (2, 0)),
    )
    case(
        "broadcast 1 to 0",
        Prim.BROADCAST_IN_DIM,
        [var(0, (1,))],
        BroadcastParams((0,), (0,)),
        np.broadcast_to(_np((1,)), (0,)),
    )
    case(
        "broadcast size-1 axes",
        Prim.BROADCAST_IN_DIM,
        [var(0, (1, 3))],
        BroadcastParams((4, 1, 3), (1, 2)),
        np.broadcast_to(_np((1, 3)), (4, 1, 3)),
    )
    case(
        "broadcast into the middle",
        Prim.BROADCAST_IN_DIM,
        [var(0, (2, 5))],
        BroadcastParams((2, 3, 5), (0, 2)),
        np.broadcast_to(_np((2, 5))[:, None, :], (2, 3, 5)),
    )
    x5 = _np((5,))
    case("slice empty", Prim.SLICE, [var(0, (5,))], SliceParams((3,), (3,), (1,)), x5[3:3])
    case("slice at the end", Prim.SLICE, [var(0, (5,))], SliceParams((5,), (5,), (1,)), x5[5:5])
    case("slice stride 2", Prim.SLICE, [var(0, (5,))], SliceParams((1,), (5,), (2,)), x5[1:5:2])
    case("slice stride 3", Prim.SLICE, [var(0, (5,))], SliceParams((0,), (5,), (3,)), x5[0:5:3])
    case("slice stride past", Prim.SLICE, [var(0, (5,))], SliceParams((4,), (5,), (9,)), x5[4:5:9])
    case(
        "slice 2d",
        Prim.SLICE,
        [var(0, (2, 0, 3))],
        SliceParams((1, 0, 1), (2, 0, 3), (1, 1, 2)),
        x203[1:2, 0:0, 1:3:2],
    )
    case(
        "concat one",
        Prim.CONCAT,
        [var(0, (2, 3))],
        ConcatParams(1),
        np.concatenate([_np((2, 3))], axis=1),
    )
    case(
        "concat an empty",
        Prim.CONCAT,
        [var(0, (0, 3)), var(1, (2, 3))],
        ConcatParams(0),
        np.concatenate([_np((0, 3)), _np((2, 3))]),
    )
    case(
        "concat all empty",
        Prim.CONCAT,
        [var(0, (2, 0)), var(1, (2, 0))],
        ConcatParams(1),
        np.concatenate([_np((2, 0)), _np((2, 0))], axis=1),
    )
    case(
        "concat last axis",
        Prim.CONCAT,
        [var(0, (1, 2), I32), var(1, (1, 3), I32)],
        ConcatParams(1),
        np.concatenate([_np((1, 2), I32), _np((1, 3), I32)], axis=1),
    )
    idx = np.zeros((2, 4), np.int32)
    case(
        "gather 2d indices",
        Prim.GATHER,
        [var(0, (5, 3)), var(1, (2, 4), I32)],
        GatherParams(0),
        np.take(_np((5, 3)), idx, axis=0),
    )
    case(
        "gather scalar index",
        Prim.GATHER,
        [var(0, (5, 3)), var(1, (), I32)],
        GatherParams(1),
        np.take(_np((5, 3)), np.int32(0), axis=1),
    )
    case(
        "gather no indices",
        Prim.GATHER,
        [var(0, (5, 3)), var(1, (0,), I32)],
        GatherParams(1),
        np.take(_np((5, 3)), np.zeros(0, np.int32), axis=1),
    )
    case(
        "gather from empty",
        Prim.GATHER,
        [var(0, (0, 3)), var(1, (2,), I32)],
        GatherParams(1),
        np.take(_np((0, 3)), np.zeros(2, np.int32), axis=1),
    )
    case(
        "gather bool",
        Prim.GATHER,
        [var(0, (4,), BOOL), var(1, (1, 1), I32)],
        GatherParams(0),
        np.take(_np((4,), BOOL), np.zeros((1, 1), np.int32), axis=0),
    )
    case(
        "dus empty update",
        Prim.DYNAMIC_UPDATE_SLICE,
        [var(0, (3,)), var(1, (0,)), Literal.of(3, I32)],
        NO,
        _np((3,)),
    )
    case(
        "dus var start",
        Prim.DYNAMIC_UPDATE_SLICE,
        [var(0, (3, 2)), var(1, (1, 2)), var(2, (), I32), Literal.of(0, I32)],
        NO,
        _np((3, 2)),
    )
    case(
        "dus last window",
        Prim.DYNAMIC_UPDATE_SLICE,
        [var(0, (3, 2)), var(1, (1, 1)), Literal.of(2, I32), Literal.of(1, I32)],
        NO,
        _np((3, 2)),
    )
    case("iota empty", Prim.IOTA, [], IotaParams((0,), I32, 0), np.arange(0, dtype=np.int32))
    case("iota size 1", Prim.IOTA, [], IotaParams((1, 1), F16, 1), np.zeros((1, 1), np.float16))
    case("iota bf16", Prim.IOTA, [], IotaParams((2, 0), BF16, 0), np.zeros((2, 0), BF16.numpy))
    case("matmul", Prim.MATMUL, [var(0, (2, 3)), var(1, (3, 4))], NO, _np((2, 3)) @ _np((3, 4)))
    # conv and window extents counted by hand: positions p with p*s + span <= padded size
    case(  # 5 + 1 + 1 = 7 padded, span 3, stride 2: starts 0, 2, 4
        "conv 1-d",
        Prim.CONV,
        [var(0, (1, 2, 5)), var(1, (3, 2, 3))],
        ConvParams((2,), (1,), (1,), (1,), (1,), 1),
        np.zeros((1, 3, 3), np.float32),
    )
    case(  # dilated input 2*(3-1)+1 = 5, kernel span 2*(2-1)+1 = 3: starts 0, 1, 2; 4x4 -> 1
        "conv grouped dilated",
        Prim.CONV,
        [var(0, (2, 4, 3, 4)), var(1, (6, 2, 2, 4))],
        ConvParams((1, 1), (0, 0), (0, 0), (2, 1), (2, 1), 2),
        np.zeros((2, 6, 3, 1), np.float32),
    )
    case(  # span 3 > 2 elements: no window
        "conv empty",
        Prim.CONV,
        [var(0, (1, 1, 2)), var(1, (1, 1, 3))],
        ConvParams((1,), (0,), (0,), (1,), (1,), 1),
        np.zeros((1, 1, 0), np.float32),
    )
    case(  # 3 + 2 + 2 = 7, window 2 stride 3: starts 0, 3 (6 + 2 > 7)
        "reduce_window padded",
        Prim.REDUCE_WINDOW_SUM,
        [var(0, (2, 3))],
        ReduceWindowParams((1, 2), (1, 3), (0, 2), (0, 2), (1, 1)),
        np.zeros((2, 2), np.float32),
    )
    case(
        "matmul empty rows",
        Prim.MATMUL,
        [var(0, (0, 3)), var(1, (3, 4))],
        NO,
        _np((0, 3)) @ _np((3, 4)),
    )
    case(
        "matmul empty inner",
        Prim.MATMUL,
        [var(0, (2, 0)), var(1, (0, 4))],
        NO,
        _np((2, 0)) @ _np((0, 4)),
    )
    case(
        "matmul 1x1",
        Prim.MATMUL,
        [var(0, (1, 1), I32), var(1, (1, 1), I32)],
        NO,
        _np((1, 1), I32) @ _np((1, 1), I32),
    )
    case(
        "matmul batched",
        Prim.MATMUL,
        [var(0, (2, 1, 3, 4), F16), var(1, (2, 1, 4, 5), F16)],
        NO,
        _np((2, 1, 3, 4), F16) @ _np((2, 1, 4, 5), F16),
    )
    case(
        "matmul empty batch",
        Prim.MATMUL,
        [var(0, (0, 3, 4)), var(1, (0, 4, 5))],
        NO,
        _np((0, 3, 4)) @ _np((0, 4, 5)),
    )
    return cases


INFER = _infer_cases()


def test_infer_cases_cover_every_primitive_family() -> None:
    covered = {c[1] for c in INFER}
    families = {
        Prim.EXP, Prim.NEG, Prim.ABS, Prim.ADD, Prim.GT, Prim.EQ, Prim.SELECT, Prim.CONVERT,
        Prim.REDUCE_SUM, Prim.REDUCE_MAX, Prim.GATHER, Prim.TRANSPOSE, Prim.RESHAPE,
        Prim.BROADCAST_IN_DIM, Prim.SLICE, Prim.CONCAT, Prim.DYNAMIC_UPDATE_SLICE, Prim.IOTA,
        Prim.MATMUL, Prim.CONV, Prim.REDUCE_WINDOW_SUM,
    }  # fmt: skip
    assert families <= covered
    # every other primitive shares its family's rule with one of those
    shared = {Prim.REDUCE_WINDOW_MAX}  # reduce_window_sum's rule
    assert {p for p in Prim if p.is_unary or p.is_binary} | families | shared == set(Prim)


@pytest.mark.parametrize(
    ("name", "prim", "inputs", "params", "want"), INFER, ids=[c[0] for c in INFER]
)
def test_infer_type_on_the_boundaries(
    name: str, prim: Prim, inputs: list[Atom], params: Params, want: TensorType
) -> None:
    assert infer_type(prim, inputs, params, 0) == want


@pytest.mark.parametrize(
    ("prim", "inputs", "params", "fact"),
    [
        (Prim.IOTA, [], IotaParams((), I32, 0), "axis 0"),
        (Prim.CONCAT, [var(0, ())], ConcatParams(0), "outside rank 0"),
        (Prim.GATHER, [var(0, ()), var(1, (), I32)], GatherParams(0), "outside rank 0"),
        (Prim.REDUCE_SUM, [var(0, ())], ReduceParams((0,)), "within rank 0"),
        (Prim.TRANSPOSE, [var(0, ())], TransposeParams((0,)), "not a permutation"),
        (Prim.MATMUL, [var(0, ()), var(1, ())], NO, "cannot contract"),
        (Prim.MATMUL, [var(0, (3,)), var(1, (3,))], NO, "cannot contract"),
        (Prim.BROADCAST_IN_DIM, [var(0, (2,))], BroadcastParams((), ()), "must map each"),
        (
            Prim.BROADCAST_IN_DIM,
            [var(0, (2,))],
            BroadcastParams((0,), (0,)),
            "cannot broadcast to size 0",
        ),
        (
            Prim.BROADCAST_IN_DIM,
            [var(0, (0,))],
            BroadcastParams((1,), (0,)),
            "cannot broadcast to size 1",
        ),
        (Prim.RESHAPE, [var(0, (2, 0))], ReshapeParams((1,)), "(0 elements) to (1,)"),
        (Prim.RESHAPE, [var(0, ())], ReshapeParams((0,)), "(1 elements) to (0,)"),
        (Prim.SLICE, [var(0, (0,))], SliceParams((0,), (1,), (1,)), "limit 1 <= size 0"),
        (Prim.SLICE, [var(0, ())], SliceParams((0,), (0,), (1,)), "each have 0 entries"),
        (
            Prim.DYNAMIC_UPDATE_SLICE,
            [var(0, (0,)), var(1, (0,)), Literal.of(1, I32)],
            NO,
            "literal start 1",
        ),
        (
            Prim.DYNAMIC_UPDATE_SLICE,
            [var(0, ()), var(1, ()), Literal.of(0, I32)],
            NO,
            "needs 0 start",
        ),
        (Prim.CONCAT, [var(0, (1, 0)), var(1, (2, 1))], ConcatParams(0), "differ outside axis 0"),
    ],
    ids=lambda v: v.value if isinstance(v, Prim) else None,
)
def test_infer_type_refuses_past_the_boundaries(
    prim: Prim, inputs: list[Atom], params: Params, fact: str
) -> None:
    with pytest.raises(TypeCheckError) as info:
        infer_type(prim, inputs, params, 3)
    assert (info.value.eqn, info.value.primitive) == (3, prim.value)
    assert fact in str(info.value)
