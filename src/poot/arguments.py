"""The ``poot`` command line's arguments: the parser, and the types that check each value as
it is parsed (a bad one is a usage error, one line, exit status 2).

Choices that come from the device registry, the planner or the decoder examples are read when
first needed (``_Names``), so building the parser loads none of them: ``poot import --help``
loads neither the engine, the devices nor the planner.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import NoReturn

from poot_ir import PootError

from poot import files

__all__ = ["parser"]


def _host_flag(p: argparse.ArgumentParser, what: str) -> None:
    """``--host compiled|oracle``: where a partition's host spans run (``poot run
    --partition``, ``poot generate``), one flag with one meaning in each command."""
    p.add_argument(
        "--host",
        choices=("compiled", "oracle"),
        default="compiled",
        help=f"where {what} run: compiled, the host device (one OpenVINO graph in F32, where "
        "its target admits the span; else the oracle), or oracle (the numpy oracle); either way "
        "every step is checked against the oracle (default: compiled)",
    )


def _positive(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return int(text)


def _steps(text: str) -> int:
    """``--steps``: a positive number of steps."""
    try:
        steps = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of steps") from None
    if steps < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {steps}")
    return steps


def _memory_budget(text: str) -> int:
    from poot_ir.budget import parse_budget

    try:
        return parse_budget(text)
    except PootError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def _bytes(text: str) -> int:
    """``--max-program-bytes``: bytes, with an optional K/M/G/T suffix."""
    return _memory_budget(text)


def _cache_dir(text: str) -> Path:
    """``--cache-dir``: an empty name would silently mean the current directory."""
    if not text:
        raise argparse.ArgumentTypeError("the cache directory must not be empty")
    return Path(text)


class _Names:
    """``choices=`` named on first use (``in``, iteration), so that building the parser loads
    neither the device registry nor the planner: only the subcommand that reads them does."""

    def __init__(self, load: Callable[[], Iterable[str]]) -> None:
        self._load = load
        self._names: tuple[str, ...] | None = None

    def _get(self) -> tuple[str, ...]:
        if self._names is None:
            self._names = tuple(self._load())
        return self._names

    def __contains__(self, name: object) -> bool:
        return name in self._get()

    def __iter__(self) -> Iterator[str]:
        return iter(self._get())


def _device_names() -> list[str]:
    from poot_npu.registry import DEVICES

    return [d.name for d in DEVICES]


def _target_names() -> list[str]:
    from poot_planner import TARGETS

    return list(TARGETS)


def _decoder_names() -> list[str]:
    from poot.decoder import EXAMPLES

    return list(EXAMPLES)


class _ArgumentParser(argparse.ArgumentParser):
    """A usage error is one line on stderr and exit status 2, like a typed error (``--help``
    shows the usage)."""

    def error(self, message: str) -> NoReturn:
        sys.stderr.write(f"{self.prog}: usage error: {' '.join(message.split())}\n")
        sys.exit(2)


def parser() -> argparse.ArgumentParser:
    """The ``poot`` argument parser; ``command`` names the subcommand."""
    ap = _ArgumentParser(prog="poot", description="Typed tensor programs on laptop NPUs.")
    ap.add_argument(
        "--cache-dir",
        type=_cache_dir,
        default=None,
        help="compiled-blob cache (default: the user cache dir; a directory poot did not "
        "create gets poot's own subdirectory poot/)",
    )
    ap.add_argument(
        "--memory-budget",
        type=_memory_budget,
        default=None,
        help="bytes (K/M/G/T suffixes) any one allocation sized by the input may take "
        "(default: half the available memory; also POOT_MEMORY_BUDGET)",
    )
    ap.add_argument(
        "--max-program-bytes",
        type=_bytes,
        default=None,
        help="the largest program text read, in bytes (K/M/G/T suffixes; default "
        f"{files.MAX_PROGRAM_BYTES >> 20}M; also POOT_MAX_PROGRAM_BYTES)",
    )
    # the metavars keep argparse from listing the choices (which loads them) while it builds
    # the parser; a subcommand's --help lists them
    devices, targets = _Names(_device_names), _Names(_target_names)
    device_help = "one of %(choices)s"
    sub = ap.add_subparsers(dest="command", required=True)
    d = sub.add_parser("demo", help="the example programs on every target and device present")
    d.add_argument("--steps", type=_steps, default=3)
    shape_help = (
        "fix a dynamic dim of an .onnx model: INPUT=8x128 or DIM=128; a JAX function "
        "module:function: each parameter's PARAM=8x128[:int32] (repeatable)"
    )
    p = sub.add_parser("plan", help="how a target runs a program, or why it refuses it")
    p.add_argument("file")
    p.add_argument("--shape", action="append", help=shape_help)
    p.add_argument(
        "--target",
        choices=targets,
        metavar="TARGET",
        help="one of %(choices)s (default: every one)",
    )
    p.add_argument(
        "--program", action="store_true", help="also print the program as the target runs it"
    )
    p.add_argument(
        "--guards",
        action="store_true",
        help="list every rewrite, domain guard and host relayout (a rewrite made at several "
        "equations is one line, a long program's guards and relayouts one row per kind)",
    )
    r = sub.add_parser("run", help="run a program on a device, checked against the oracle")
    r.add_argument("file")
    r.add_argument("--shape", action="append", help=shape_help)
    r.add_argument(
        "--target",
        choices=targets,
        metavar="TARGET",
        help="one of %(choices)s (default: the device's; without --device, cpu)",
    )
    r.add_argument(
        "--device",
        choices=devices,
        metavar="DEVICE",
        help="one of %(choices)s (default: the first present for --target)",
    )
    r.add_argument("--steps", type=_steps, default=3)
    r.add_argument("--inputs", help="an .npz of every argument (default: deterministic samples)")
    r.add_argument(
        "--partition",
        action="store_true",
        help="run a refused program in spans: refused ones on the host, the rest on the device",
    )
    _host_flag(r, "--partition's refused spans")
    g = sub.add_parser("generate", help="prefill on one device, decode on another (KV handoff)")
    g.add_argument(
        "example", choices=_Names(_decoder_names), metavar="EXAMPLE", help="one of %(choices)s"
    )
    g.add_argument("--prefill-device", choices=devices, metavar="DEVICE", default="cpu")
    g.add_argument("--decode-device", choices=devices, metavar="DEVICE", default="cpu")
    g.add_argument("--steps", type=_positive, default=32)
    g.add_argument("--prompt-len", type=_positive, help="prefill's T (default: the example's)")
    _host_flag(g, "the spans a device refuses")
    sub.add_parser("features", help="the feature matrix, generated from the target tables")
    v = sub.add_parser("devices", help="the devices poot knows and whether they are here")
    v.add_argument("--require", choices=devices, metavar="DEVICE", help=device_help)
    i = sub.add_parser("import", help="import an ONNX model or a JAX function as a poot program")
    i.add_argument("model", help="an .onnx file, or a JAX function as module:function")
    i.add_argument("-o", "--output", help="the program (.poot); its weights go beside it (.npz)")
    i.add_argument("--shape", action="append", help=shape_help)
    i.add_argument("--check", action="store_true", help="list every blocker of the model")
    c = sub.add_parser("cache", help="the compiled-blob cache")
    c.add_argument("action", choices=["ls", "verify", "clear"])
    c.add_argument("--bad", action="store_true", help="clear: only damaged or foreign entries")
    a = sub.add_parser("acceptance", help="check every claim for a device on it: a receipt")
    group = a.add_mutually_exclusive_group(required=True)
    group.add_argument("--device", choices=devices, metavar="DEVICE", help=device_help)
    group.add_argument("--compare", nargs=2, metavar="RECEIPT", help="two receipts side by side")
    a.add_argument("-o", "--output", type=Path, help="write the receipt (JSON) here")
    return ap
