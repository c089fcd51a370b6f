"""Rich renderings of plans, runs, devices and the cache for the command line."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from poot_engine.run import RunReport
from poot_ir import Prim
from poot_ir.numerics import NarrowStorage
from poot_planner import Plan, Span, partition, summarize
from poot_planner.fp16.contract import contract_form
from poot_planner.guards import RESULT, DomainGuard, Site
from rich.console import Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

if TYPE_CHECKING:
    from poot_engine.blob_cache import CacheEntry
    from poot_npu.registry import DeviceInfo
    from poot_planner.legalize.rewrite import Rewrite

__all__ = ["cache_table", "demo_table", "devices_table", "plan_panel", "run_report"]


def devices_table(devices: Sequence[tuple[DeviceInfo, str | None]], proves: bool = True) -> Table:
    t = Table(title="Devices", title_justify="left")
    for col in ("device", "target", "kind", "status") + (("proves",) if proves else ()):
        t.add_column(col, overflow="fold")
    for info, why in devices:
        status = (
            Text("present", style="green")
            if why is None
            else Text(f"unavailable: {why}", style="yellow")
        )
        t.add_row(
            info.name, info.target, info.kind.value, status, *((info.proves,) if proves else ())
        )
    return t


def _cell(report: RunReport) -> Text:
    """One program on one device, in a few words."""
    p = report.plan
    if not p.admitted:
        r = p.refusals[0]
        more = f" +{len(p.refusals) - 1}" if len(p.refusals) > 1 else ""
        what = r.primitive or "program"
        return Text(f"refused: {r.kind.value} ({what}){more}", style="yellow")
    worst = [s.worst for s in report.steps if s.worst is not None]
    regions = f", {len(p.regions)} region{'s' if len(p.regions) != 1 else ''}" if p.regions else ""
    if not worst:
        return Text("ok" + regions, style="green")
    name, cmp = max(worst, key=lambda w: (not w[1].ok, w[1].error_ratio))
    if not report.ok:
        return Text(f"FAILED: {name} {cmp.error_ratio:.3g} x bound", style="bold red")
    err = "exact" if cmp.error_ratio == 0 else f"{cmp.error_ratio:.2g} of bound"
    return Text(f"ok, {err}{regions}", style="green")


def demo_table(rows: Sequence[tuple[str, DeviceInfo, RunReport]]) -> Table:
    """Programs down, devices across: each cell the worst error over its bound, or the first
    refusal."""
    devices: list[str] = []
    for _, info, _ in rows:
        if info.name not in devices:
            devices.append(info.name)
    t = Table(
        title="Example programs, every device present, against the oracle", title_justify="left"
    )
    t.add_column("program")
    for d in devices:
        t.add_column(d, overflow="fold")
    programs: dict[str, dict[str, Text]] = {}
    for name, info, report in rows:
        programs.setdefault(name, {})[info.name] = _cell(report)
    for name, cells in programs.items():
        t.add_row(name, *(cells.get(d, Text("-")) for d in devices))
    return t


def _numerics(p: Plan) -> str:
    if isinstance(p.numerics, NarrowStorage):  # derived per step: its form, not a figure
        return f"NarrowStorage: {contract_form(p.legalized, p.numerics)}"
    return (
        repr(p.numerics).replace("(", " ").replace(")", "").replace("signed_zero=True", "").strip()
    )


#: More rewrites or guards than this are summarised, one line or row per kind (``every``
#: lists each): a long program's plan stays a screenful, not one line per equation.
SUMMARY_ROWS = 40


def _eqns(eqns: Sequence[int]) -> str:
    """Equation numbers, the first few and the last when there are many, with the count."""
    if len(eqns) <= 6:
        return ", ".join(map(str, eqns))
    return f"{', '.join(map(str, eqns[:4]))}, ..., {eqns[-1]} ({len(eqns)})"


def plan_panel(p: Plan, spans: tuple[Span, ...] = (), *, every: bool = False) -> Panel:
    """The plan; a refused one with its partition (``spans`` when the caller has them, so
    nothing is planned again). A rewrite made at several equations is one line, and more than
    ``SUMMARY_ROWS`` guards are summarised one row per kind, unless ``every``."""
    head = Text.assemble(
        (f"{p.source.name}", "bold"),
        f" on {p.target.name}: ",
        (
            "admitted" if p.admitted else f"refused ({len(p.refusals)})",
            "green" if p.admitted else "yellow",
        ),
        f"; numerics {_numerics(p)}" if p.admitted else "",
    )
    parts: list[object] = [head]
    # a rewrite made once is shown whole; one made at many equations (a clamp per activation)
    # is one line with its equations, unless ``every``
    kinds: dict[tuple[str, str, str], list[Rewrite]] = {}
    for rw in p.rewrites:
        kind = (rw.primitive, rw.rule.decomposition, rw.derivation.describe())
        kinds.setdefault(kind, []).append(rw)
    for (prim, decomposition, derived), made in kinds.items():
        if every or len(made) == 1:
            parts.extend(Text(f"legalized: {rw.describe()}") for rw in made)
        else:
            at = _eqns([rw.eqn for rw in made])
            parts.append(
                Text(f"legalized: {prim} -> {decomposition}, bound {derived} (equations {at})")
            )
    if not p.admitted and p.source.eqns:
        spans = spans or partition(p.source, p.target, p)
        parts.append(Text(f"partitioned: {summarize(spans, p.target).describe()}"))
        scores = sum(len(s.plan.score_bound) for s in spans if s.plan is not None)
        if scores:  # the mask rewrite of poot_planner.fp16.prelude, which the device checks
            parts.append(
                Text(
                    f"attention mask: its -inf made finite; {scores} score value(s) checked "
                    "on the device against the bound that keeps masked entries exactly 0"
                )
            )
    if p.narrowing is not None:
        parts.append(
            Text(
                f"narrowed to {p.narrowing.device_dtype.value}: casts on entry and exit (narrow_to_device_precision)"
            )
        )
    if p.refusals:
        rt = Table("eqn", "primitive", "kind", "facts", title="refusals", title_justify="left")
        for r in p.refusals:
            rt.add_row(
                "program" if r.eqn < 0 else str(r.eqn),
                r.primitive,
                r.kind.name,
                ", ".join(f"{k}={v}" for k, v in r.facts),
            )
        parts.append(rt)
    if p.regions:
        reg = Table(
            "region",
            "equations",
            "tiles",
            "streams in",
            "streams out",
            "tile-to-tile",
            "max bytes/tile",
            "artifact",
            # identical regions run one artifact on one context (poot_codegen.xdna.reuse)
            title=f"regions ({p.contexts} hardware contexts; "
            f"{p.contexts_before_reuse} before reuse)",
            title_justify="left",
        )
        for region in p.regions:
            eq = region.eqns
            reg.add_row(
                str(region.index),
                f"{eq[0]}..{eq[-1]}" if eq else "-",
                str(len(region.tiles)),
                str(len(region.host_in)),
                str(len(region.host_out)),
                str(len(region.internal)),
                str(region.tile_bytes),
                "own" if region.runs == region.index else f"region {region.runs}'s",
            )
        parts.append(reg)
    if p.relayouts:  # the relayouts the host arenas absorb between the region runs
        parts.append(_relayouts_table(p, every=every))
    for t in p.tiles:  # how each gather keeps its indices inside the axis
        if t.index_guard is not None:
            parts.append(Text(f"gather at equation {t.eqns[0]}: indices {t.index_guard.value}"))
    if p.admitted and p.guards:
        parts.append(guards_table(p, p.guards, every=every))
    return Panel(Group(*parts), title=f"plan: {p.target.name}", title_align="left")  # type: ignore[arg-type]


def _relayouts_table(p: Plan, *, every: bool = False) -> Table:
    """The host relayouts between region runs: a row each, or, for more than
    ``SUMMARY_ROWS`` unless ``every`` (a convolution's windows are a slice per kernel tap),
    a row per kind with its equations."""
    summarised = not every and len(p.relayouts) > SUMMARY_ROWS
    title = "host relayouts (no tile, no hardware context)"
    if summarised:
        title += f" ({len(p.relayouts)}, one row per kind; poot plan --guards lists each)"
    t = Table("eqn", "primitive", "how", "runs", title=title, title_justify="left")
    rows: list[tuple[int, tuple[str, ...]]] = []
    for h in p.relayouts:
        if summarised:
            when = "between region runs" if p.regions else "on the host"
        elif not p.regions:
            when = "on the host"
        else:
            last = h.after >= len(p.regions)
            when = "after the last region" if last else f"before region {h.after}"
        how = "alias (same bytes, new shape)" if h.alias else "host copy, arena to arena"
        if h.prim is Prim.IOTA:
            how = "written by the host (a counter)"
        rows.append((h.eqn, (h.prim.value, how, when)))
    _add_rows(t, rows, summarised)
    return t


def _add_rows(t: Table, rows: list[tuple[int, tuple[str, ...]]], by_kind: bool) -> None:
    """``rows`` (an equation and its cells) into ``t``: each, or one per distinct cells with
    their equations (``by_kind``)."""
    if not by_kind:
        for eqn, cells in rows:
            t.add_row(str(eqn), *cells)
        return
    kinds: dict[tuple[str, ...], list[int]] = {}
    for eqn, cells in rows:
        kinds.setdefault(cells, []).append(eqn)
    for cells, at in kinds.items():
        t.add_row(_eqns(at), *cells)


def guards_table(p: Plan, placed: Sequence[DomainGuard], *, every: bool = False) -> Table:
    """Where each equation's domain is enforced (``Plan.guards``): a row per guard, or, for
    more than ``SUMMARY_ROWS`` unless ``every``, a row per kind of guard with its equations."""
    summarised = not every and len(placed) > SUMMARY_ROWS
    cells: list[tuple[str, str, str, str]] = []
    for g in placed:
        operand = "result" if g.operand == RESULT else str(g.operand)
        # summarised, an argument's check is one kind whichever argument (each of a model's
        # weights was a row of its own: hundreds)
        argument = "an argument" if summarised else f"argument {g.argument!r}"
        where = {
            Site.HOST: f"host: {argument}, before the run",
            Site.DEVICE: "device: counted in the region's flag word"
            if p.target.name == "xdna2"
            else "device",
            Site.PROVEN: f"none: {g.why}",
        }[g.site]
        cells.append((g.primitive.value, operand, g.domain.describe(), where))
    title = "domain guards"
    if summarised:
        title += f" ({len(placed)}, one row per kind; poot plan --guards lists each)"
    t = Table("eqn", "primitive", "operand", "domain", "guard", title=title, title_justify="left")
    _add_rows(t, [(g.eqn, row) for g, row in zip(placed, cells, strict=True)], summarised)
    return t


def run_report(report: RunReport) -> Group:
    parts: list[object] = [plan_panel(report.plan, report.spans)]
    t = Table(
        "step",
        "result",
        "comparison",
        title=f"{report.program.name} on {report.device}",
        title_justify="left",
    )
    for s in report.steps:
        for name, cmp in s.results:
            t.add_row(str(s.step), name, Text(str(cmp), style="green" if cmp.ok else "bold red"))
    if report.spans:
        parts.append(Text(f"partitioned into {len(report.spans)} spans:"))
        for k, span in enumerate(report.spans):
            hosted = k < len(report.hosts) and report.hosts[k] is not None
            where = "device" if span.device else "host device" if hosted else "oracle"
            which = f"equations {span.first}..{span.last}"
            if len(span.eqns) != span.last - span.first + 1:  # the host prelude: not contiguous
                which = f"{len(span.eqns)} equations in {span.first}..{span.last}"
            parts.append(Text(f"  span {k}: {where} {which}"))
    parts.append(t)
    if report.plan.admitted or report.spans:
        parts.append(Text(f"{report.compiles} compiled, {report.cache_hits} loaded from the cache"))
    return Group(*parts)  # type: ignore[arg-type]


def cache_table(entries: Sequence[CacheEntry], title: str) -> Table:
    t = Table(title=f"blob cache: {len(entries)} {title}", title_justify="left")
    for col in ("key", "bytes", "status", "what", "path"):
        t.add_column(col, overflow="fold")
    for e in entries:
        what = dict(e.meta).get("part", "")  # e.g. "host kernel library" for xdna-host's
        t.add_row(e.key[:16], str(e.size), e.status.value, what, str(e.path))
    return t
