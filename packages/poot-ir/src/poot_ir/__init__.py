"""poot_ir: dtypes, typed programs, the Builder, the text format, the numpy oracle, numerics.

``import poot_ir`` needs numpy and ml_dtypes only.
"""

from poot_ir import ops
from poot_ir.builder import Builder, Operand
from poot_ir.core import (
    Arg,
    Atom,
    BroadcastParams,
    ConcatParams,
    ConvertParams,
    Eqn,
    GatherParams,
    IotaParams,
    Literal,
    NoParams,
    Output,
    Params,
    Prim,
    Program,
    ReduceParams,
    ReshapeParams,
    SliceParams,
    Storage,
    TransposeParams,
    Update,
    Var,
)
from poot_ir.dtypes import DType, TensorType
from poot_ir.errors import *  # noqa: F403  (the error tree is part of the public API)
from poot_ir.errors import __all__ as _errors
from poot_ir.oracle import evaluate
from poot_ir.text import format_program, parse_program
from poot_ir.typing_rules import infer_type, validate

__all__ = [
    "Arg",
    "Atom",
    "BroadcastParams",
    "Builder",
    "ConcatParams",
    "ConvertParams",
    "DType",
    "Eqn",
    "GatherParams",
    "IotaParams",
    "Literal",
    "NoParams",
    "Operand",
    "Output",
    "Params",
    "Prim",
    "Program",
    "ReduceParams",
    "ReshapeParams",
    "SliceParams",
    "Storage",
    "TensorType",
    "TransposeParams",
    "Update",
    "Var",
    "evaluate",
    "format_program",
    "infer_type",
    "ops",
    "parse_program",
    "validate",
    *_errors,
]
