"""The feature matrix: what each target admits, as markdown generated from ``TARGETS`` alone.

``feature_matrix()`` is what ``poot features`` prints and what ``docs/features.md`` holds (a test
fails when the file is stale). It renders the capability tables, not a description of them: one
table of primitives by target (the admitted dtypes and any axis rule), then for each target every
capability's kernel class, contract bound and domain, its region limits, its narrowing contract
and its fused composite with the composite's derived bound. The output is deterministic: rows
follow the IR's primitive and dtype order and targets follow the registry.
"""

from __future__ import annotations

from collections.abc import Callable

from poot_ir import Builder, DType, Prim, Var, ops
from poot_ir.numerics import Normwise

from poot_planner.bound_text import figure, render_bound
from poot_planner.emit import Emit
from poot_planner.fp16.checks import OVERFLOW_RULE, SCORE_RULE, SENTINEL_RULE
from poot_planner.fp16.constants import CONSTANT_RULE
from poot_planner.fp16.contract import DERIVED_RULE
from poot_planner.fp16.narrowing import COUNTER_RULE, INPUT_EDGE_RULE, LITERAL_EDGE_RULE
from poot_planner.legalize.bounds import derive
from poot_planner.legalize.rules import RULES, Rule, RuleContext
from poot_planner.plan import plan
from poot_planner.target import AxisRule, Capability, KernelClass, Target
from poot_planner.targets import TARGETS

__all__ = ["feature_matrix", "render_bound"]

_NONE = "—"
#: Row length at which the fused norm's derived bound is published (the seed's figure).
_NORM_COLS = 64


def _dtypes(ds: frozenset[DType]) -> str:
    return ", ".join(d.value for d in DType if d in ds)


def _cell(target: Target, prim: Prim) -> str:
    caps = [c for c in target.capabilities if c.prim is prim]
    if not caps:
        return "fused norm step only" if prim in target.fused_steps else _NONE
    parts = []
    for c in caps:
        axis = f" ({c.axes.value})" if c.axes is AxisRule.LAST else ""
        parts.append(_dtypes(c.dtypes) + axis)
    return "; ".join(parts)


def _row(cells: list[str]) -> str:
    return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"


def _table(head: list[str], rows: list[list[str]]) -> list[str]:
    return [_row(head), _row(["---"] * len(head)), *(_row(r) for r in rows), ""]


def _capability_row(c: Capability) -> list[str]:
    return [
        c.prim.value,
        _dtypes(c.dtypes),
        c.kernel.value,
        "" if c.prim.is_elementwise else c.axes.value,
        render_bound(c.contract.bound),
        c.contract.domain.describe(),
        c.note,
    ]


def _fused_norm_bound(target: Target, weight: bool) -> str:
    """The derived relative bound of a ``_NORM_COLS``-column RMSNorm, as the planner derives it
    for ``target`` (or why it does not)."""
    b = Builder("rmsnorm")
    x = b.slot("x", DType.F32, (1, _NORM_COLS))
    w = b.weight("w", DType.F32, (_NORM_COLS,)) if weight else None
    b.output("y", ops.rmsnorm(b, x, w))
    p = plan(b.build(), target)
    bounds = [t.bound for t in p.tiles if t.bound is not None]
    if not p.admitted or len(bounds) != 1:
        return "refused: " + "; ".join(str(r) for r in p.refusals)
    return f"relative {bounds[0]:.3g}"


def _softplus(b: Builder, x: Var) -> Var:
    return b.log(b.add(b.exp(x), 1.0))


def _sigmoid(b: Builder, x: Var) -> Var:
    e = b.exp(b.neg(b.abs(x)))
    r = b.recip(b.add(e, 1.0))
    return b.select(b.ge(x, 0.0), r, b.mul(e, r))  # as poot_onnx.logic.sigmoid writes it


#: rules that rewrite a pattern, probed on the pattern (the others on the primitive alone)
_PROBES: dict[str, Callable[[Builder, Var], Var]] = {
    "softplus as ONNX writes it, stably": _softplus,
    "sigmoid's select through exp and div": _sigmoid,
}


def _pattern_numerics(rule: Rule, t: Target, probe: Callable[[Builder, Var], Var]) -> str:
    b = Builder("probe")
    b.output("y", probe(b, b.slot("x", DType.F32, (1,))))
    program = b.build()
    e = program.eqns[-1]
    em = Emit(100, DType.F32)
    if not rule.expand(em, e, RuleContext(producer={q.out.id: q for q in program.eqns})):
        return rule.numerics.value
    return f"{rule.numerics.value}: {derive(rule, em.eqns, t, DType.F32).describe()}"


def _rule_numerics(rule: Rule, t: Target) -> str:
    """A rule's derived bound on ``t``, as the planner derives it for a unary F32 operand (the
    rules on comparisons and products are identities or sentinels: their kind says it)."""
    if rule.name in _PROBES:
        return _pattern_numerics(rule, t, _PROBES[rule.name])
    if not (rule.prim.is_unary or rule.prim.is_binary) or rule.prim is Prim.MUL:
        return rule.numerics.value
    b = Builder("probe")
    xs = [b.slot(f"x{k}", DType.F32, (1,)) for k in range(1 if rule.prim.is_unary else 2)]
    out = getattr(b, rule.prim.value)(*xs)
    b.output("y", out)
    e = b.build().eqns[-1]
    em = Emit(100, e.inputs[0].dtype)
    if not rule.expand(em, e, RuleContext()):
        return rule.numerics.value
    got = derive(rule, em.eqns, t, DType.F32).describe()
    return f"{rule.numerics.value}: {got}"


def _rules_section(t: Target) -> list[str]:
    rules = [r for r in RULES if r.target == t.name]
    if not rules:
        return []
    out = [
        "Legalization rules (`poot_planner.legalize.rules`): a refused equation rewritten into "
        "admitted ones before admission, with the bound derived from their contracts:",
        "",
    ]
    return out + _table(
        ["primitive", "rule", "decomposition", "numerics", "source"],
        [[r.prim.value, r.name, r.decomposition, _rule_numerics(r, t), r.source] for r in rules],
    )


def _target_section(t: Target) -> list[str]:
    out = [f"## {t.name}", "", t.description + ".", ""]
    out += _table(
        ["primitive", "dtypes", "kernel", "axes", "bound", "domain", "note"],
        [_capability_row(c) for c in t.capabilities],
    )
    out += _rules_section(t)
    moved = [c.prim.value for c in t.capabilities if c.kernel is KernelClass.HOST_RELAYOUT]
    if moved:
        out += [
            f"Host relayouts ({', '.join(moved)}): run on the host between region runs, "
            "over the host arenas: no tile, no hardware context, no stream of their own. Each "
            "reads host values (an argument, a value a region streams out, counted in that "
            "region's bounds, or another relayout's output) and closes the region that makes "
            "its operand. A reshape is an alias (the same arena bytes read with its shape, "
            "zero copies); an iota reads nothing (the host writes its counter); the others "
            "one host copy, arena to arena.",
            "",
        ]
    if t.region_limits is not None:
        lim = t.region_limits
        out += ["Region limits (a region closes where the next equation would break one):", ""]
        out += _table(
            ["limit", "value"],
            [
                ["compute tiles per region", str(lim.compute_tiles)],
                ["host streams in per region", str(lim.host_streams_in)],
                ["host streams out per region", str(lim.host_streams_out)],
                ["streams per tile (each way)", str(lim.streams_per_tile)],
                ["tile-local bytes", str(lim.tile_bytes)],
                ["of those, the flag path's on every tile", str(lim.flag_bytes)],
                [
                    "of those, the link's data sections (guard count and reserve) on every tile",
                    str(lim.link_data_bytes),
                ],
                ["of the streams out, the flag word's", str(lim.flag_streams_out)],
                ["hardware contexts (one per distinct region artifact)", str(lim.contexts)],
                ["host buffers per kernel call", str(lim.host_buffers)],
                ["elements per tensor (int32 kernel ABI)", str(lim.tensor_elements)],
                [
                    "passes of a matmul's K-streamed right operand per run (shim repeat size)",
                    str(lim.transfer_repeats),
                ],
            ],
        )
    if t.tensor_bytes is not None:
        out += [
            f"Tensor size: at most {t.tensor_bytes} bytes per tensor as the device stores it "
            "(one device allocation); a larger one is refused (`tensor_bytes`).",
            "",
        ]
    if t.code_size is not None:
        cs = t.code_size
        state = "measured" if cs.measured else "UNMEASURED estimate"
        out += [
            f"Program memory: {cs.program_bytes} bytes per compute tile; an equation whose "
            f"kernel needs more is refused (`program_bytes`). Code-size figures ({state}; "
            f"{cs.source}): base {cs.base} B per core, then once per core each library routine "
            "its primitives call, plus each primitive's body:",
            "",
        ]
        routines = dict(cs.routines)
        out += _table(
            ["primitive", "body bytes", "routines called (bytes)"],
            [
                [p.value, str(n), ", ".join(f"{r} ({routines[r]})" for r in calls) or _NONE]
                for p, calls, n in cs.bodies
            ],
        )
    if t.narrowing is not None:
        n = t.narrowing
        out += ["Narrowing contract (`narrow_to_device_precision` runs first):", ""]
        out += _table(
            ["field", "value"],
            [
                ["device dtype", n.device_dtype.value],
                ["normwise bound", render_bound(Normwise(n.normwise, n.floor))],
                ["step contract", DERIVED_RULE],
                ["largest magnitude", figure(n.max_magnitude)],
                ["measured on", n.measured_on],
                ["F32 data", "every F32 argument or result is narrowed (FP16 inside the graph)"],
                ["intermediate guard", OVERFLOW_RULE],
                ["sentinel rule", SENTINEL_RULE],
                ["literal edges", LITERAL_EDGE_RULE],
                ["counters", COUNTER_RULE],
                ["input edges", INPUT_EDGE_RULE],
                ["constants", CONSTANT_RULE],
                ["score guard", SCORE_RULE],
            ],
        )
    if t.fused_steps:
        steps = ", ".join(p.value for p in Prim if p in t.fused_steps)
        out += [
            "Fused norm (RMSNorm, with or without a weight) as one row kernel. Its steps: "
            f"{steps}. Its bound is derived from theirs; a step with no derived bound is "
            "refused naming it.",
            "",
        ]
        out += _table(
            ["composite", f"derived bound at {_NORM_COLS} columns"],
            [
                ["rmsnorm", _fused_norm_bound(t, weight=False)],
                ["rmsnorm with weight", _fused_norm_bound(t, weight=True)],
            ],
        )
    return out


def feature_matrix() -> str:
    """The feature matrix as markdown (see the module); ends with one newline."""
    targets = list(TARGETS.values())
    out = [
        "# Feature matrix",
        "",
        "Generated by `poot features` from the target tables (`poot_planner.TARGETS`); do not "
        "edit by hand. A test fails when this file is stale.",
        "",
        "## Primitives by target",
        "",
        f"Each cell lists the admitted dtypes (and axis rule); {_NONE} is refused with a typed "
        "capability.",
        "",
    ]
    out += _table(
        ["primitive", *(t.name for t in targets)],
        [[p.value, *(_cell(t, p) for t in targets)] for p in Prim],
    )
    for t in targets:
        out += _target_section(t)
    while out and out[-1] == "":
        out.pop()
    return "\n".join(out) + "\n"
