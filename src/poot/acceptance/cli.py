"""``poot acceptance``: the table as the checks run, the receipt, and ``--compare``."""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path
from typing import Any

from poot_ir import InputError
from poot_npu.registry import device_info
from rich.console import Console
from rich.table import Table

from poot import files
from poot.acceptance.checks import Check, run_acceptance

__all__ = ["main"]

EXIT_UNAVAILABLE = 3
#: A receipt is some tens of kilobytes; anything past this is not one.
_RECEIPT_BYTES = 16 << 20


def _figure(c: dict[str, Any] | Check) -> str:
    d = c if isinstance(c, dict) else {"figure": c.figure, "unit": c.unit}
    if d.get("figure") is None:
        return "-"
    return f"{d['figure']:.3g} {d.get('unit', '')}".strip()


def main(console: Console, args: argparse.Namespace) -> int:
    if args.compare:
        return _compare(console, *args.compare)
    if args.output is not None:  # before the checks: a bad -o must not cost their run
        files.check_output(args.output, "receipt")
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
        _write(receipt.to_json() + "\n", args.output)
        console.print(f"receipt written to {args.output}")
    return 0 if receipt.passed else 1


def _write(text: str, path: Path) -> None:
    """The receipt to ``path``; should that fail after all (a full disk), it is kept in a
    temporary file the error names, so the run's checks are not lost."""
    try:
        files.write_text(path, text, "receipt")
    except InputError as err:
        with tempfile.NamedTemporaryFile(
            "w", prefix="poot-receipt-", suffix=".json", delete=False, encoding="utf-8"
        ) as kept:
            kept.write(text)
        raise InputError(err.what, f"{err.reason}; the receipt is kept in {kept.name}") from None


def _load(path: str) -> dict[str, Any]:
    text = files.read_text(path, "receipt", _RECEIPT_BYTES)
    try:
        body = json.loads(text)
    except ValueError as err:
        raise InputError(f"receipt {path}", f"not a readable receipt ({err})") from None
    if not isinstance(body, dict) or "checks" not in body or "device" not in body:
        raise InputError(f"receipt {path}", "not a poot acceptance receipt")
    return body


def _compare(console: Console, a: str, b: str) -> int:
    for path in (a, b):  # both, before either is read
        files.regular_file(path, "receipt", _RECEIPT_BYTES)
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
