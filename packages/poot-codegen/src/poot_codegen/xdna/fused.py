"""The fused norm kernel, generated from its steps (an RMSNorm, with or without weight).

A fused norm is the planner's row group (``poot_planner.xdna2.rowfusion``): element-wise steps over
the row, last-axis reductions, scalar steps on each row's reduced values, broadcasts of those
back along the row, broadcasts of ``[cols]`` vectors (a weight) across the rows, and the
element-wise steps that make the output. It runs as one row kernel, one lane per row and the
row loop serialized, with no workgroup memory and no barrier. Per row:

1. for each reduction, in program order: one loop over the row's columns computing the
   element-wise steps that reduction needs, accumulated in order, left to right; then every
   scalar step whose operands are now known;
2. one loop over the columns computing the element-wise steps that make the output.

An element value a later loop needs again is recomputed there from the row (the steps are
deterministic, so it is the same value bit for bit), never stored: nothing but the row's
reduced scalars lives across loops.
"""

from __future__ import annotations

from typing import cast

from poot_ir import BroadcastParams, DType, Eqn, Literal, NoLowering, Prim, Program, Var
from poot_planner import TileOp

from poot_codegen.xdna.cexpr import TARGET, literal_decl, step_expr
from poot_codegen.xdna.guards import LOCAL, RESULT, KernelGuards

__all__ = ["fused_norm_body"]

_REDUCE: dict[Prim, tuple[str, str]] = {
    # -0.0 is the identity of IEEE addition: the sum is the row's own terms added in order
    Prim.REDUCE_SUM: ("poot_f32_from_bits(0x80000000u)", "{acc} + {x}"),
    Prim.REDUCE_MAX: ("poot_negf(poot_inff())", "poot_maxf({acc}, {x})"),
}


class _Kernel:
    """The steps of one fused norm, classified, and the C lines being written."""

    def __init__(self, tile: TileOp, program: Program, guards: KernelGuards) -> None:
        self.tile = tile
        self.guards = guards
        out = tile.output
        self.cols = tile.out_unit
        if out.dtype is not DType.F32 or not out.type.rank or out.shape[-1] != self.cols:
            self._refuse(tile.eqns[-1], program, f"a fused norm making {out.type}")
        if self.cols == 0:
            self._refuse(tile.eqns[-1], program, "a fused norm over empty rows")
        self.row_shape = out.shape
        self.scalar_shape = out.shape[:-1]
        self.eqns: list[tuple[int, Eqn]] = [(i, program.eqns[i]) for i in tile.eqns]
        self.made = {e.out.id: (i, e) for i, e in self.eqns}
        self.inputs = {op.var.id: (k, op.resident) for k, op in enumerate(tile.inputs)}
        self.literals: dict[int, str] = {}
        self.decls: list[str] = []
        for i, e in self.eqns:
            for a in e.inputs:
                if isinstance(a, Literal) and a.bits not in self.literals:
                    name = f"k{len(self.literals)}"
                    self.literals[a.bits] = name
                    self.decls.append(literal_decl(name, a, i, e.prim))
            self._check(i, e, program)

    def _refuse(self, i: int, program: Program, why: str) -> None:
        raise NoLowering(TARGET, i, program.eqns[i].prim.value, why)

    def _check(self, i: int, e: Eqn, program: Program) -> None:
        if e.prim is Prim.BROADCAST_IN_DIM:
            src = e.inputs[0]
            if self._is_back(e) or (isinstance(src, Var) and src.id in self.inputs):
                return
            self._refuse(i, program, "a broadcast that is neither of a row's value nor a weight")
        elif e.prim in _REDUCE:
            if e.inputs[0].type.shape != self.row_shape:
                self._refuse(i, program, "a reduction of something other than the row")
        elif e.prim.is_unary or e.prim.is_binary:
            if e.prim is Prim.GE or e.out.dtype is not DType.F32:
                self._refuse(i, program, "a step that does not make an f32")
            if e.out.shape not in (self.row_shape, self.scalar_shape):
                self._refuse(i, program, f"a step of shape {e.out.shape}")
        else:
            self._refuse(i, program, "not a row kernel step")
        for a in e.inputs:
            if isinstance(a, Var) and a.id not in self.made and a.id not in self.inputs:
                self._refuse(i, program, "an operand that is neither made here nor an input")

    def _is_back(self, e: Eqn) -> bool:
        """A broadcast of a row's reduced value back along the row."""
        p = e.params
        return (
            isinstance(p, BroadcastParams)
            and e.inputs[0].type.shape == self.scalar_shape
            and p.shape == self.row_shape
        )

    def name(self, a: Var | Literal) -> str:
        if isinstance(a, Literal):
            return self.literals[a.bits]
        return f"v{a.id}"

    def _element(self, v: int) -> bool:
        """Is ``v`` a per-element value (recomputed in each column loop that needs it)?"""
        if v in self.inputs:
            return True
        _, e = self.made[v]
        return e.prim is Prim.BROADCAST_IN_DIM or (
            e.prim not in _REDUCE and e.out.shape == self.row_shape
        )

    def column_steps(self, targets: list[int], indent: str) -> list[str]:
        """The lines computing the element values ``targets`` at column ``c``."""
        needed: set[int] = set()
        stack = list(targets)
        while stack:
            v = stack.pop()
            if v in needed:
                continue
            needed.add(v)
            if v in self.inputs:
                continue
            _, e = self.made[v]
            if e.prim is Prim.BROADCAST_IN_DIM:
                continue  # its operand is a row scalar already known, or a weight input
            stack += [a.id for a in e.inputs if isinstance(a, Var) and self._element(a.id)]
        lines: list[str] = []
        for v, (k, resident) in self.inputs.items():
            if v in needed:
                at = f"in{k}[c]" if resident else f"in{k}_r[c]"
                lines.append(f"{indent}const float v{v} = {at};\n")
        for i, e in self.eqns:
            if e.out.id not in needed:
                continue
            if e.prim is Prim.BROADCAST_IN_DIM:
                src = e.inputs[0]
                if isinstance(src, Var) and src.id in self.inputs and not self._is_back(e):
                    k, _ = self.inputs[src.id]
                    expr = f"in{k}[c]"  # a [cols] vector: the same element on every row
                else:
                    expr = self.name(src)
                lines.append(f"{indent}const float v{e.out.id} = {expr};\n")
            else:
                lines += self.step(i, e, indent)
        return lines

    def step(self, i: int, e: Eqn, indent: str) -> list[str]:
        """One element-wise or scalar step's line, then its guard's (if it has one)."""
        args = [self.name(a) for a in e.inputs]
        lines = [f"{indent}const float {self.name(e.out)} = {step_expr(e.prim, args, i)};\n"]
        guard = self.guards.line(i, e, args, self.name(e.out))
        return lines + ([f"{indent}{guard}\n"] if guard is not None else [])


def fused_norm_body(tile: TileOp, program: Program, guards: KernelGuards) -> str:
    """The body of a fused norm's kernel (see the module docstring), its steps guarded as
    ``guards`` says (``poot_codegen.xdna.guards``)."""
    k = _Kernel(tile, program, guards)
    cols = k.cols
    lines = [f"    {d}\n" for d in k.decls]
    lines += ["    (void)first_unit;\n", "    for (int32_t r = 0; r < units; r++) {\n"]
    for v, (slot, resident) in k.inputs.items():
        if not resident:
            lines.append(f"        const float* in{slot}_r = in{slot} + r * {cols};\n")
        del v
    lines.append(f"        float* out_r = out + r * {cols};\n")
    known: set[int] = set()
    reductions = [(i, e) for i, e in k.eqns if e.prim in _REDUCE]
    scalar_steps = [
        (i, e)
        for i, e in k.eqns
        if e.prim not in _REDUCE and not k._element(e.out.id) and e.out.shape == k.scalar_shape
    ]
    emitted: set[int] = set()
    for ri, r in reductions:
        init, step = _REDUCE[r.prim]
        acc = k.name(r.out)
        x = cast(Var, r.inputs[0])  # the type rules: a reduction's operand is a tensor
        lines.append(f"        float {acc} = {init}; /* {r.prim.value} */\n")
        lines.append(f"        for (int32_t c = 0; c < {cols}; c++) {{\n")
        lines += k.column_steps([x.id], "            ")
        lines.append(f"            {acc} = {step.format(acc=acc, x=k.name(x))};\n")
        guard = guards.line(ri, r, [k.name(x)], acc)
        if guard is not None:
            lines.append(f"            {guard}\n")
        lines.append("        }\n")
        if (ri, RESULT) in guards.guarded:  # the in-order sum overflowed
            lines.append(f"        {LOCAL} += poot_g_nonfinite({acc});\n")
        known.add(r.out.id)
        for i, e in scalar_steps:  # program order is topological: one sweep suffices
            ready = all(not isinstance(a, Var) or a.id in known for a in e.inputs)
            if i not in emitted and ready:
                lines += k.step(i, e, "        ")
                known.add(e.out.id)
                emitted.add(i)
    lines.append(f"        for (int32_t c = 0; c < {cols}; c++) {{\n")
    lines += k.column_steps([tile.output.id], "            ")
    lines.append(f"            out_r[c] = {k.name(tile.output)};\n")
    lines += ["        }\n", "    }\n"]
    return "".join(lines)
