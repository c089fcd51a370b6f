"""``poot acceptance``: the table as the checks run, the receipt, and ``--compare``."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from poot_ir import PootError
from poot_npu.registry import device_info
from rich.console import Console
from rich.table import Table

from poot.acceptance.checks import Check, run_acceptance

__all__ = ["main"]

EXIT_UNAVAILABLE = 3


class ReceiptError(PootError):
    """A receipt that cannot be read (missing, not JSON, not a receipt)."""


def _figure(c: dict[str, Any] | Check) -> str:
    d = c if isinstance(c, dict) else {"figure": c.figure, "unit": c.unit}
    if d.get("figure") is None:
        return "-"
    return f"{d['figure']:.3g} {d.get('unit', '')}".strip()


def main(console: Console, args: argparse.Namespace) -> int:
    if args.compare:
        return _compare(console, *args.compare)
    info = device_info(args.device)
    why = info.unavailable_reason()
    if why is not None:
        Console(stderr=True).print(f"hardware unavailable: {info.name}: {why}", highlight=False)
        return EXIT_UNAVAILABLE
    console.print(f"[bold]poot acceptance[/] on {info.name} ({info.target}, {info.kind.value})")
    done = [0]

    def progress(c: Check) -> None:
        done[0] += 1
        mark = "[green]pass[/]" if c.passed else "[red]FAIL[/]"
        console.print(f"[dim]{done[0]:>3}[/] {mark}  {c.name}: {_figure(c)}  [dim]{c.detail}[/]")

    receipt = run_acceptance(info, progress)
    table = Table("check", "figure", "result", "detail", title=f"acceptance: {info.name}")
    for c in receipt.checks:
        verdict = "[green]pass[/]" if c.passed else "[red]FAIL[/]"
        table.add_row(c.name, _figure(c), verdict, c.detail)
    console.print(table)
    kind = receipt.device["kind"]
    console.print(
        f"{sum(c.passed for c in receipt.checks)}/{len(receipt.checks)} passed on "
        f"{receipt.device['part']} ({kind})"
    )
    if args.output is not None:
        args.output.write_text(receipt.to_json() + "\n", encoding="utf-8")
        console.print(f"receipt written to {args.output}")
    return 0 if receipt.passed else 1


def _load(path: str) -> dict[str, Any]:
    try:
        body = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise ReceiptError(f"{path}: not a readable receipt ({err})") from None
    if not isinstance(body, dict) or "checks" not in body or "device" not in body:
        raise ReceiptError(f"{path}: not a poot acceptance receipt")
    return body


def _compare(console: Console, a: str, b: str) -> int:
    ra, rb = _load(a), _load(b)
    head = Table("", a, b, title="receipts")
    for key in ("name", "kind", "part", "compiler_version"):
        head.add_row(key, str(ra["device"].get(key, "")), str(rb["device"].get(key, "")))
    head.add_row("poot", str(ra["poot"]), str(rb["poot"]))
    console.print(head)
    checks = Table("check", a, b, title="checks")
    by_a = {c["name"]: c for c in ra["checks"]}
    by_b = {c["name"]: c for c in rb["checks"]}
    for name in list(dict.fromkeys([*by_a, *by_b])):
        cells = []
        for side in (by_a, by_b):
            c = side.get(name)
            cells.append("-" if c is None else f"{'pass' if c['passed'] else 'FAIL'} {_figure(c)}")
        checks.add_row(name, *cells)
    console.print(checks)
    return 0
