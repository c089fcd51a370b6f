"""Rich renderings of plans, runs, devices and the cache for the command line."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from poot_planner import Plan
from rich.console import Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from poot.runner import RunReport

if TYPE_CHECKING:
    from poot_engine.blob_cache import CacheEntry
    from poot_npu.registry import DeviceInfo

__all__ = ["cache_table", "demo_table", "devices_table", "plan_panel", "run_report"]


def devices_table(devices: Sequence[tuple[DeviceInfo, str | None]]) -> Table:
    t = Table(title="Devices", title_justify="left")
    for col in ("device", "target", "kind", "status", "proves"):
        t.add_column(col, overflow="fold")
    for info, why in devices:
        status = (
            Text("present", style="green")
            if why is None
            else Text(f"hardware unavailable: {why}", style="yellow")
        )
        t.add_row(info.name, info.target, info.kind.value, status, info.proves)
    return t


def _verdict(report: RunReport) -> tuple[Text, str]:
    p = report.plan
    if not p.admitted:
        first = p.refusals[0]
        more = f" (+{len(p.refusals) - 1} more)" if len(p.refusals) > 1 else ""
        return Text("refused", style="yellow"), f"{first}{more}"
    worst = [s.worst for s in report.steps if s.worst is not None]
    if not worst:
        return Text("ok", style="green"), "no results"
    name, cmp = max(worst, key=lambda w: (not w[1].ok, w[1].error_ratio))
    style, word = ("green", "ok") if report.ok else ("bold red", "FAILED")
    detail = f"worst {name}: error/bound {cmp.error_ratio:.3g}" if cmp.ok else f"{name}: {cmp}"
    return Text(word, style=style), detail


def demo_table(rows: Sequence[tuple[str, DeviceInfo, RunReport]]) -> Table:
    t = Table(title="Example programs against the oracle", title_justify="left")
    for col in (
        "program",
        "device",
        "target",
        "numerics",
        "regions",
        "steps",
        "cache",
        "result",
        "detail",
    ):
        t.add_column(col, overflow="fold")
    for name, info, report in rows:
        verdict, detail = _verdict(report)
        p = report.plan
        regions = str(len(p.regions)) if p.target.region_limits is not None and p.admitted else "-"
        cache = f"{report.compiles} compiled, {report.cache_hits} loaded" if p.admitted else "-"
        numerics = _numerics(p) if p.admitted else "-"
        t.add_row(
            name,
            info.name,
            p.target.name,
            numerics,
            regions,
            str(len(report.steps)),
            cache,
            verdict,
            detail,
        )
    return t


def _numerics(p: Plan) -> str:
    return (
        repr(p.numerics).replace("(", " ").replace(")", "").replace("signed_zero=True", "").strip()
    )


def plan_panel(p: Plan) -> Panel:
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
            title=f"regions ({p.contexts} hardware contexts)",
            title_justify="left",
        )
        for r in p.regions:
            eq = r.eqns
            reg.add_row(
                str(r.index),
                f"{eq[0]}..{eq[-1]}" if eq else "-",
                str(len(r.tiles)),
                str(len(r.host_in)),
                str(len(r.host_out)),
                str(len(r.internal)),
                str(r.tile_bytes),
            )
        parts.append(reg)
    return Panel(Group(*parts), title=f"plan: {p.target.name}", title_align="left")  # type: ignore[arg-type]


def run_report(report: RunReport) -> Group:
    parts: list[object] = [plan_panel(report.plan)]
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
    parts.append(t)
    if report.plan.admitted:
        parts.append(Text(f"{report.compiles} compiled, {report.cache_hits} loaded from the cache"))
    return Group(*parts)  # type: ignore[arg-type]


def cache_table(entries: Sequence[CacheEntry], title: str) -> Table:
    t = Table(title=f"blob cache: {len(entries)} {title}", title_justify="left")
    for col in ("key", "bytes", "status", "path"):
        t.add_column(col, overflow="fold")
    for e in entries:
        t.add_row(e.key[:16], str(e.size), e.status.value, str(e.path))
    return t
