"""The text format: ``format_program`` prints a program and ``parse_program`` reads it back.

For every valid program ``parse_program(format_program(p)) == p``: var ids, var names, argument
storage classes and order, every parameter, outputs, state updates and the exact bit pattern of
every literal survive. ``parse_program`` validates what it reads (``poot_ir.validate``), so text
that parses but does not type-check is a ``TypeCheckError`` naming the equation (and its line);
text that does not parse is a ``ParseError`` with a 1-based line and column. Nothing else
escapes ``parse_program``.

Example::

    program rmsnorm_step
      slot x %0: f32[8,64]
      weight w %1: f32[64]
      state acc %2: f32[8,64]
      %3: f32[8,64] = broadcast_in_dim %1 {shape=(8,64), dims=(1,)}
      %4(scaled): f32[8,64] = mul %0 %3     # an intermediate may keep a name
      %5: f32[8,64] = add %4 1.5:f32
      output y = %5
      update acc = %5
    end

Grammar (one statement per line; ``#`` starts a comment that runs to the end of the line; blank
lines are ignored; spaces and tabs separate tokens and are otherwise insignificant)::

    text      := "program" name NL statement* "end" NL?     (then only blank or comment lines)
    statement := storage name decl ("from" "i64")?          an argument, in program order
                                                            (an i32 slot taking int64 values)
               | decl "=" prim operand* params?             an equation, in program order
               | "output" name "=" var                      a result, in program order
               | "update" name "=" var                      a state update, in program order
    storage   := "slot" | "weight" | "state"
    decl      := var ("(" name? ")")? ":" type
    var       := "%" "-"? digits                            the Var's id
    type      := dtype "[" (digits ("," digits)*)? "]"      f32[8,64]; a scalar is f32[]
    dtype     := "f32" | "f16" | "bf16" | "i32" | "bool"
    operand   := var | literal
    literal   := value ":" dtype
    value     := "0x" hexdigits                             the exact bit pattern, any dtype
               | "true" | "false"                           bool
               | [+-]? digits                               i32, or a float
               | [+-]? ("inf" | "nan")                      float: +-infinity, the quiet NaN
               | [+-]? decimal ([eE] [+-]? digits)?         float, rounded to nearest even
    params    := "{" (key "=" pvalue ("," key "=" pvalue)* ","?)? "}"
    pvalue    := int | dtype | "(" (int ("," int)* ","?)? ")"
    name      := identifier | quoted                        identifier: [A-Za-z_][A-Za-z0-9_.]*
    quoted    := a JSON string literal ("a b\\n")

A statement may use only vars defined on earlier lines. ``prim`` is a ``Prim`` value, and the
parameter keys are the fields of that primitive's parameter class, each exactly once, in any
order (a primitive without parameters takes no braces, or ``{}``).

Var names: an argument's var is named like its argument unless the declaration says otherwise:
``(other)`` names it ``other`` and ``()`` leaves it unnamed. An equation's var is unnamed unless
the declaration gives ``(name)``.

Literals print as the shortest decimal that reads back to the same bits (``1.5:f32``,
``-0.0:f32``, ``inf:f16``, ``1e-45:f32``), ``nan``/``-nan`` for the default quiet NaN of the
dtype (f32 ``0x7fc00000``), and otherwise as the explicit bit pattern (``0x7fc00001:f32``). A
decimal is read as the nearest float64 and then rounded to nearest even in the dtype (as
``Literal.of`` does); a value beyond the dtype's range rounds to infinity.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from collections.abc import Callable
from typing import NoReturn, cast

import numpy as np

from poot_ir.budget import DimsTooLarge, check_dims
from poot_ir.core import (
    PARAMS_OF,
    Arg,
    Atom,
    Eqn,
    Literal,
    Output,
    Params,
    Prim,
    Program,
    Storage,
    Update,
    Var,
)
from poot_ir.dtypes import DType, TensorType
from poot_ir.errors import IRError, ParseError, TypeCheckError
from poot_ir.typing_rules import validate

__all__ = ["format_program", "parse_program"]

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*")
_INT = re.compile(r"[+-]?[0-9]+")
_DIM = re.compile(r"[0-9]+")
_HEX = re.compile(r"0[xX][0-9a-fA-F]+")
_DECIMAL = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_SPECIAL = re.compile(r"([+-]?)(inf|nan)")
_TOKEN = re.compile(
    r"(?P<ws>[ \t\r\f\v]+)"
    r"|(?P<comment>#.*)"
    r"|(?P<var>%-?[0-9]+)"
    r'|(?P<str>"(?:[^"\\]|\\.)*")'
    r"|(?P<word>[A-Za-z0-9_.+\-]+)"
    r"|(?P<punct>[:=\[\](){},])"
)

#: The parameter fields of each parameter class, with how their value is written.
_PARAM_KINDS = {"int": "an integer", "tuple[int, ...]": "a tuple of integers", "DType": "a dtype"}
_PARAM_FIELDS: dict[type[Params], dict[str, str]] = {
    cls: {f.name: str(f.type) for f in dataclasses.fields(cls)} for cls in set(PARAMS_OF.values())
}
_UNWRITABLE = sorted(
    f"{cls.__name__}.{name}: {kind}"
    for cls, fs in _PARAM_FIELDS.items()
    for name, kind in fs.items()
    if kind not in _PARAM_KINDS
)
if _UNWRITABLE:  # a parameter field added without its text form: found at import
    raise IRError(f"the text format cannot write the param field(s) {', '.join(_UNWRITABLE)}")


def _bits_of(x: float, dtype: DType) -> int:
    """The bits of ``x`` (a float64) rounded to nearest even in ``dtype``, like ``Literal.of``."""
    with np.errstate(over="ignore"):
        return int(np.array(x, dtype=np.float64).astype(dtype.numpy).view(dtype.bits_dtype))


_QUIET_NAN = {d: _bits_of(math.nan, d) for d in (DType.F32, DType.F16, DType.BF16)}


# -- printing -------------------------------------------------------------------------------


def format_program(program: Program) -> str:
    """The text of ``program`` (see the module docstring), ending in a newline."""
    out = [f"program {_name(program.name)}"]
    for a in program.args:
        wide = " from i64" if a.wide else ""
        out.append(f"  {a.storage.value} {_name(a.name)} {_decl(a.var, a.name)}{wide}")
    for i, e in enumerate(program.eqns):
        if len(e.outputs) != 1:
            raise TypeCheckError(f"has {len(e.outputs)} outputs; every primitive has one", i)
        parts = [f"  {_decl(e.out, None)} = {e.prim.value}"]
        parts.extend(f"%{a.id}" if isinstance(a, Var) else _literal(a) for a in e.inputs)
        fields = dataclasses.fields(e.params)
        if fields:
            items = (f"{f.name}={_param(getattr(e.params, f.name))}" for f in fields)
            parts.append("{" + ", ".join(items) + "}")
        out.append(" ".join(parts))
    out.extend(f"  output {_name(o.name)} = %{o.var.id}" for o in program.outputs)
    out.extend(f"  update {_name(u.state)} = %{u.var.id}" for u in program.updates)
    out.append("end\n")
    return "\n".join(out)


def _name(name: str) -> str:
    return name if _IDENT.fullmatch(name) else json.dumps(name)


def _decl(v: Var, default: str | None) -> str:
    label = "" if v.name == default else "()" if v.name is None else f"({_name(v.name)})"
    return f"%{v.id}{label}: {v.type}"


def _param(value: object) -> str:
    if isinstance(value, DType):
        return value.value
    if isinstance(value, tuple):
        return "(" + ",".join(str(x) for x in value) + ("," if len(value) == 1 else "") + ")"
    return str(value)


def _literal(lit: Literal) -> str:
    d, bits = lit.dtype, lit.bits
    width = 8 * d.itemsize
    if not 0 <= bits < 2**width:
        raise TypeCheckError(f"literal bit pattern {bits:#x} does not fit {d.value}")
    text = f"0x{bits:0{width // 4}x}"
    if d is DType.BOOL:
        text = {0: "false", 1: "true"}.get(bits, text)
    elif d is DType.I32:
        text = str(bits - 2**32 if bits >= 2**31 else bits)
    else:
        x = lit.as_float()
        sign = "-" if bits >> (width - 1) else ""
        if math.isnan(x):
            if bits & ~(1 << (width - 1)) == _QUIET_NAN[d]:
                text = sign + "nan"
        elif math.isinf(x):
            text = sign + "inf"
        else:
            text = _shortest(x, bits, d) or text
    return f"{text}:{d.value}"


def _shortest(x: float, bits: int, dtype: DType) -> str | None:
    """The decimal with the fewest significant digits that reads back to ``bits``."""
    for digits in range(1, 18):
        text = f"{x:.{digits}g}"
        if _bits_of(float(text), dtype) == bits:
            return text if any(c in text for c in ".e") else text + ".0"
    return None  # unreachable: 17 digits identify every float64, and these values are exact


# -- parsing --------------------------------------------------------------------------------

_Token = tuple[str, str, int]  # kind, text, 1-based column


class _Line:
    """The tokens of one line, read left to right."""

    __slots__ = ("end", "i", "number", "tokens")

    def __init__(self, text: str, number: int) -> None:
        self.number = number
        self.end = len(text) + 1
        self.tokens: list[_Token] = []
        self.i = 0
        pos = 0
        while pos < len(text):
            m = _TOKEN.match(text, pos)
            if m is None:
                what = "an unterminated quoted name" if text[pos] == '"' else repr(text[pos])
                self.fail(f"unexpected {what}", pos + 1)
            kind = m.lastgroup or ""
            if kind == "comment":
                break
            if kind != "ws":
                self.tokens.append((kind, m.group(), pos + 1))
            pos = m.end()

    def fail(self, message: str, column: int | None = None) -> NoReturn:
        if column is None:
            column = self.tokens[self.i][2] if self.i < len(self.tokens) else self.end
        raise ParseError(message, self.number, column)

    def found(self) -> str:
        return repr(self.tokens[self.i][1]) if self.i < len(self.tokens) else "end of line"

    def peek(self) -> str | None:
        return self.tokens[self.i][1] if self.i < len(self.tokens) else None

    def take(self, kind: str, what: str) -> tuple[str, int]:
        """The next token's text and column; it must be of ``kind``."""
        if self.i >= len(self.tokens) or self.tokens[self.i][0] != kind:
            self.fail(f"expected {what}, found {self.found()}")
        self.i += 1
        return self.tokens[self.i - 1][1:]

    def expect(self, punct: str, what: str | None = None) -> None:
        if self.peek() != punct:
            self.fail(f"expected {what or repr(punct)}, found {self.found()}")
        self.i += 1

    def finish(self) -> None:
        if self.i < len(self.tokens):
            self.fail(f"unexpected {self.found()} (trailing garbage)")


class _Parser:
    def __init__(self) -> None:
        self.vars: dict[int, tuple[Var, int]] = {}  # id -> var, the line defining it
        self.args: list[Arg] = []
        self.eqns: list[Eqn] = []
        self.eqn_lines: list[int] = []
        self.outputs: list[Output] = []
        self.updates: list[Update] = []

    def name(self, line: _Line, what: str) -> str:
        if line.i < len(line.tokens):
            kind, text, _ = line.tokens[line.i]
            if kind == "str":
                try:
                    value = json.loads(text)
                except ValueError as err:
                    line.fail(f"bad quoted name: {err}")
                if not _encodable(str(value)):
                    line.fail(f"bad quoted name {text}: a lone surrogate is not text")
                line.i += 1
                return str(value)
            if kind == "word" and _IDENT.fullmatch(text):
                line.i += 1
                return text
        line.fail(f"expected {what} (an identifier or a quoted string), found {line.found()}")

    def int_of(self, line: _Line, pattern: re.Pattern[str], what: str) -> int:
        text, column = line.take("word", what)
        if pattern.fullmatch(text):
            try:
                return int(text)
            except ValueError:  # more digits than int() reads
                pass
        line.fail(f"bad number {text!r}: expected {what}", column)

    def dtype(self, line: _Line) -> DType:
        text, column = line.take("word", "a dtype (f32, f16, bf16, i32, bool)")
        try:
            return DType(text)
        except ValueError:
            line.fail(f"unknown dtype {text!r} (expected f32, f16, bf16, i32 or bool)", column)

    def type(self, line: _Line) -> TensorType:
        dtype = self.dtype(line)
        line.expect("[", "'[' starting the shape")
        shape: list[int] = []
        while line.peek() != "]":
            if shape:
                line.expect(",", "',' or ']' in the shape")
            shape.append(self.int_of(line, _DIM, "a dimension (a non-negative integer)"))
        line.i += 1
        try:
            check_dims(shape, "the type", dtype.itemsize)
        except DimsTooLarge as err:
            line.fail(str(err))
        return TensorType(tuple(shape), dtype)

    def decl(self, line: _Line, default: str | None) -> Var:
        text, column = line.take("var", "a var such as %3")
        vid = self.var_id(line, text, column)
        name = default
        if line.peek() == "(":
            line.i += 1
            name = None if line.peek() == ")" else self.name(line, "a var name")
            line.expect(")")
        line.expect(":", "':' and the var's type")
        if vid in self.vars:
            line.fail(f"duplicate var %{vid} (first defined on line {self.vars[vid][1]})", column)
        v = Var(vid, self.type(line), name)
        self.vars[vid] = (v, line.number)
        return v

    def var_id(self, line: _Line, text: str, column: int) -> int:
        try:
            return int(text[1:])
        except ValueError:
            line.fail(f"bad var id {text!r}", column)

    def use(self, line: _Line) -> Var:
        text, column = line.take("var", "a var such as %3")
        vid = self.var_id(line, text, column)
        if vid not in self.vars:
            line.fail(f"undefined var {text} (every var is defined on an earlier line)", column)
        return self.vars[vid][0]

    def literal(self, line: _Line) -> Literal:
        text, column = line.take("word", "an operand")
        line.expect(":", f"':' and the dtype of literal {text!r}")
        dtype = self.dtype(line)
        bits = _literal_bits(text, dtype)
        if bits is None:
            line.fail(f"bad number {text!r} for a {dtype.value} literal", column)
        return Literal(bits, dtype)

    def statement(self, line: _Line) -> None:
        kind, text, _ = line.tokens[0]
        if kind == "var":
            self.equation(line)
        elif text in ("slot", "weight", "state"):
            line.i += 1
            name = self.name(line, "an argument name")
            var = self.decl(line, name)
            wide = line.peek() == "from"
            if wide:
                line.i += 1
                line.expect("i64", "'i64' after 'from' (a slot that takes int64 values)")
            self.args.append(Arg(name, var, Storage(text), wide))
        elif text in ("output", "update"):
            line.i += 1
            name = self.name(line, f"the name of the {text}")
            line.expect("=", "'='")
            v = self.use(line)
            if text == "output":
                self.outputs.append(Output(name, v))
            else:
                self.updates.append(Update(name, v))
        else:
            line.fail(
                f"expected an argument (slot, weight, state), an equation (%N: ...), "
                f"a result (output, update) or 'end', found {text!r}"
            )
        line.finish()

    def equation(self, line: _Line) -> None:
        out = self.decl(line, None)
        line.expect("=", "'=' after the equation's result")
        text, column = line.take("word", "a primitive")
        try:
            prim = Prim(text)
        except ValueError:
            line.fail(f"unknown primitive {text!r}", column)
        inputs: list[Atom] = []
        while line.peek() not in (None, "{"):
            if line.tokens[line.i][0] == "var":
                inputs.append(self.use(line))
            else:
                inputs.append(self.literal(line))
        self.eqns.append(Eqn(prim, tuple(inputs), (out,), self.params(line, prim)))
        self.eqn_lines.append(line.number)

    def params(self, line: _Line, prim: Prim) -> Params:
        cls = PARAMS_OF[prim]
        fields = _PARAM_FIELDS[cls]
        values: dict[str, object] = {}
        if line.peek() == "{":
            brace = line.tokens[line.i][2]
            line.i += 1
            while line.peek() != "}":
                if values:
                    line.expect(",", "',' or '}' in the parameters")
                    if line.peek() == "}":
                        break
                key, column = line.take("word", "a parameter name")
                if key not in fields:
                    known = ", ".join(fields) or "none"
                    line.fail(f"unknown param key {key!r} for {prim.value} (takes {known})", column)
                if key in values:
                    line.fail(f"param {key!r} given twice", column)
                line.expect("=", f"'=' after param {key!r}")
                values[key] = self.param_value(line, fields[key], key)
            line.i += 1
        else:
            brace = line.end
        missing = [k for k in fields if k not in values]
        if missing:
            line.fail(f"{prim.value} needs param(s) {', '.join(missing)}", brace)
        return cast(Callable[..., Params], cls)(**values)

    def param_value(self, line: _Line, kind: str, key: str) -> object:
        what = f"{_PARAM_KINDS[kind]} for param {key!r}"
        is_tuple = line.peek() == "("
        if (kind == "tuple[int, ...]") != is_tuple:
            line.fail(f"wrong param type: expected {what}, found {line.found()}")
        if kind == "DType":
            return self.dtype(line)
        if kind == "int":
            return self.int_of(line, _INT, what)
        line.i += 1
        items: list[int] = []
        while line.peek() != ")":
            if items:
                line.expect(",", "',' or ')' in the tuple")
                if line.peek() == ")":
                    break
            items.append(self.int_of(line, _INT, "an integer"))
        line.i += 1
        return tuple(items)


def _literal_bits(text: str, dtype: DType) -> int | None:
    """The bit pattern ``text`` denotes in ``dtype``, or None when it denotes none."""
    width = 8 * dtype.itemsize
    if _HEX.fullmatch(text):
        bits = int(text, 16)
        return bits if bits < 2**width else None
    if dtype is DType.BOOL:
        return {"false": 0, "true": 1}.get(text)
    if dtype is DType.I32:
        if not _INT.fullmatch(text) or len(text) > 16:
            return None
        value = int(text)
        return value % 2**32 if -(2**31) <= value < 2**31 else None
    special = _SPECIAL.fullmatch(text)
    if special:
        sign = (1 << (width - 1)) if special.group(1) == "-" else 0
        magnitude = _QUIET_NAN[dtype] if special.group(2) == "nan" else _bits_of(math.inf, dtype)
        return sign | magnitude
    if _DECIMAL.fullmatch(text):
        return _bits_of(float(text), dtype)
    return None


def _encodable(name: str) -> bool:
    """Whether ``name`` is text every tool takes: UTF-8 has no encoding of a lone surrogate
    (``"\\udc80"`` in JSON), and OpenVINO's bindings raise a bare ``TypeError`` on one."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def parse_program(text: str) -> Program:
    """The program ``text`` denotes, validated. Raises ``ParseError`` (line, column, what was
    expected) for malformed text and ``TypeCheckError`` for a program that does not type-check;
    nothing else."""
    given: object = text  # callers outside mypy pass bytes or None
    if not isinstance(given, str):
        what = type(given).__name__
        raise ParseError(
            f"expected the program text as a str, got {what} (decode bytes first)", 0, 0
        )
    lines = text.split("\n")
    parser = _Parser()
    name: str | None = None
    finished = False
    for number, raw in enumerate(lines, start=1):
        line = _Line(raw, number)
        if not line.tokens:
            continue
        if finished:
            line.fail("trailing garbage after 'end'", line.tokens[0][2])
        if name is None:
            if line.peek() != "program":
                line.fail(f"expected 'program' and its name, found {line.found()}")
            line.i += 1
            name = parser.name(line, "the program's name")
            line.finish()
        elif line.peek() == "end":
            line.i += 1
            line.finish()
            finished = True
        else:
            parser.statement(line)
    if not finished or name is None:  # 'end' is only read after the name
        what = "'program' and its name" if name is None else "'end'"
        raise ParseError(f"truncated input: expected {what}", len(lines), len(lines[-1]) + 1)
    program = Program(
        name,
        tuple(parser.args),
        tuple(parser.eqns),
        tuple(parser.outputs),
        tuple(parser.updates),
    )
    try:
        return validate(program)
    except TypeCheckError as err:
        if err.eqn is None or not 0 <= err.eqn < len(parser.eqn_lines):
            raise
        where = f" (line {parser.eqn_lines[err.eqn]})"
        raise TypeCheckError(err.reason + where, err.eqn, err.primitive) from None
    except ValueError as err:  # an integer too long for str() in validate's own message
        raise TypeCheckError(f"program {name!r} does not type-check: {err}") from None
