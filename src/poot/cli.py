"""The ``poot`` command line.

::

    poot demo                               the example programs, planned for every target and
                                            run on every device present, checked against the oracle
    poot plan FILE --target T               admission, regions, contexts, refusals, numerics
    poot run FILE --target T [--device D]   run a program and check it against the oracle
             [--partition]                  (refused spans on the CPU oracle, the rest on D)
    poot features                           the feature matrix (docs/features.md)
    poot devices [--require NAME]           what is on this machine, and why not
    poot import MODEL.onnx [-o FILE]        an ONNX model as a poot program
    poot cache ls|verify|clear              the compiled-blob cache

Exit status: 0 on success, 1 when a check failed or a program was refused, 2 on bad input
(a typed ``PootError``, one line naming what is wrong, or a usage error from the argument
parser).
"""

from __future__ import annotations

import argparse
import sys
import zipfile
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

import numpy as np
from poot_ir import PootError, Program, format_program, parse_program
from poot_npu.registry import DEVICES, DeviceKind, device_info, make_device
from poot_planner import TARGETS, plan
from poot_planner.features import feature_matrix
from rich.console import Console
from rich.markup import escape

from poot import render
from poot.runner import run_program

__all__ = ["main"]

EXAMPLES = Path(__file__).parent / "examples"


def _read_program(path: str) -> Program:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as err:
        raise _InputError(f"cannot read {path}: {err.strerror}") from None
    except UnicodeDecodeError as err:
        raise _InputError(
            f"{path} is not UTF-8 text (byte {err.start}): not a .poot program"
        ) from None
    return parse_program(text)


def _read_inputs(path: str, program: Program) -> dict[str, np.ndarray]:
    """An ``--inputs`` file: an ``.npz`` holding plain arrays, each named for an argument."""
    try:
        data = np.load(path, allow_pickle=False)
    except OSError as err:
        raise _InputError(f"--inputs {path}: cannot read it: {err.strerror or err}") from None
    except (ValueError, EOFError) as err:  # pickled, an object array, or no numpy file
        raise _InputError(f"--inputs {path}: not an .npz of plain arrays ({err})") from None
    if not isinstance(data, np.lib.npyio.NpzFile):
        raise _InputError(f"--inputs {path}: one .npy array, not an .npz of named arguments")
    try:
        with data:
            arrays = {k: data[k] for k in data.files}
    except (ValueError, OSError, EOFError, zipfile.BadZipFile) as err:  # an object member
        raise _InputError(f"--inputs {path}: not an .npz of plain arrays ({err})") from None
    names = {a.name for a in program.args}
    if extra := sorted(set(arrays) - names):
        raise _InputError(f"--inputs {path}: {extra} are not arguments of {program.name!r}")
    return arrays


class _InputError(PootError):
    """A file the command line could not read or write, or an argument it cannot use."""


def _with_progress(device: object, console: Console) -> None:
    """Long builds show progress: a device with a link step (XDNA2) reports each stage."""
    if hasattr(device, "progress"):

        def show(stage: str, done: int, total: int) -> None:
            console.print(f"[dim]link {done}/{total}: {stage}[/]")

        device.progress = show


def _demo(console: Console, args: argparse.Namespace) -> int:
    examples = sorted(EXAMPLES.glob("*.poot"))
    devices = [(d, d.unavailable_reason()) for d in DEVICES]
    console.print(render.devices_table(devices, proves=False))
    ok = True
    reports = []
    for path in examples:
        program = parse_program(path.read_text(encoding="utf-8"))
        for info, why in devices:
            if why is not None:
                continue
            device = info.make()
            _with_progress(device, console)
            try:
                report = run_program(
                    program, device, info.name, steps=args.steps, cache_dir=args.cache_dir
                )
            finally:
                device.close()
            reports.append((path.stem, info, report))
            ok &= report.ok or not report.plan.admitted
    console.print(render.demo_table(reports))
    console.print(
        "Refused programs are not failures: each refusal is a typed reason (`poot plan FILE --target T`)."
    )
    return 0 if ok else 1


def _plan(console: Console, args: argparse.Namespace) -> int:
    program = _read_program(args.file)
    targets = [args.target] if args.target else list(TARGETS)
    code = 0
    for t in targets:
        p = plan(program, t)
        console.print(render.plan_panel(p))
        if args.program and p.admitted:
            # what the device runs: after the target's passes (the Intel narrowing casts)
            console.print(format_program(p.program), highlight=False, markup=False)
        code |= 0 if p.admitted else 1
    return code


def _run(console: Console, args: argparse.Namespace) -> int:
    program = _read_program(args.file)
    name = args.device or next(
        (d.name for d in DEVICES if d.target == args.target and d.unavailable_reason() is None),
        "cpu",
    )
    info = device_info(name)
    if args.target and info.target != args.target:
        raise _InputError(f"device {name!r} runs target {info.target!r}, not {args.target!r}")
    device = make_device(name)
    _with_progress(device, console)
    try:
        inputs = None
        if args.inputs:
            inputs = [_read_inputs(args.inputs, program)]
        report = run_program(
            program,
            device,
            name,
            steps=args.steps,
            cache_dir=args.cache_dir,
            inputs=inputs,
            partition=args.partition,
        )
    finally:
        device.close()
    console.print(render.run_report(report))
    return 0 if report.ok else 1


def _devices(console: Console, args: argparse.Namespace) -> int:
    devices = [(d, d.unavailable_reason()) for d in DEVICES]
    console.print(render.devices_table(devices))
    if args.require:
        info = device_info(args.require)
        why = info.unavailable_reason()
        if why is not None or (info.kind is not DeviceKind.HARDWARE and args.require != "cpu"):
            console.print(
                f"[red]hardware unavailable: {args.require}: {why or 'a stand-in, not the device'}"
            )
            return 1
    return 0


def _features(console: Console, args: argparse.Namespace) -> int:
    sys.stdout.write(feature_matrix())
    return 0


def _import(console: Console, args: argparse.Namespace) -> int:
    from poot_ir import format_program
    from poot_ir.onnx import import_model

    try:
        imported = import_model(args.model)
    except OSError as err:
        raise _InputError(f"cannot read {args.model}: {err.strerror or err}") from None
    text = format_program(imported.program)
    if args.output:
        try:
            Path(args.output).write_text(text, encoding="utf-8")
            if imported.weights:
                weights = Path(args.output).with_suffix(".npz")
                np.savez(weights, allow_pickle=False, **imported.weights)
        except OSError as err:
            raise _InputError(f"-o {args.output}: cannot write it: {err.strerror or err}") from None
        console.print(f"wrote {args.output} ({len(imported.program.eqns)} equations)")
    else:
        sys.stdout.write(text)
    return 0


def _cache(console: Console, args: argparse.Namespace) -> int:
    from poot_engine import blob_cache
    from poot_engine.cache_root import cache_root

    # where the cache is for the directory named (poot's own poot/ inside a directory it did
    # not create); nothing is created or changed to find out
    root = cache_root(args.cache_dir, create=False)
    console.print(f"cache directory: {root}", highlight=False, markup=False)
    match args.action:
        case "ls":
            console.print(render.cache_table(blob_cache.ls(args.cache_dir), "entries"))
        case "verify":
            entries = blob_cache.verify(args.cache_dir)
            console.print(render.cache_table(entries, "verified"))
            return 0 if all(e.status is blob_cache.EntryStatus.OK for e in entries) else 1
        case "clear":
            done = blob_cache.clear(args.cache_dir, only_bad=args.bad)
            n = len(done.removed)
            console.print(f"removed {n} file{'' if n == 1 else 's'} from {done.root}")
            for path in done.removed:
                console.print(f"  removed {path.name}", highlight=False, markup=False)
            if done.kept:
                why = "verified or not written by poot" if args.bad else "not written by poot"
                console.print(f"kept {len(done.kept)} ({why}):")
                for path in done.kept:
                    console.print(f"  kept {path.name}", highlight=False, markup=False)
    return 0


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


def _cache_dir(text: str) -> Path:
    """``--cache-dir``: an empty name would silently mean the current directory."""
    if not text:
        raise argparse.ArgumentTypeError("the cache directory must not be empty")
    return Path(text)


class _ArgumentParser(argparse.ArgumentParser):
    """A usage error is one line on stderr and exit status 2, like a typed error (``--help``
    shows the usage)."""

    def error(self, message: str) -> NoReturn:
        sys.stderr.write(f"{self.prog}: usage error: {' '.join(message.split())}\n")
        sys.exit(2)


def _parser() -> argparse.ArgumentParser:
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
    sub = ap.add_subparsers(dest="command", required=True)
    d = sub.add_parser("demo", help="the example programs on every target and device present")
    d.add_argument("--steps", type=_steps, default=3)
    d.set_defaults(fn=_demo)
    p = sub.add_parser("plan", help="how a target runs a program, or why it refuses it")
    p.add_argument("file")
    p.add_argument("--target", choices=list(TARGETS))
    p.add_argument(
        "--program", action="store_true", help="also print the program as the target runs it"
    )
    p.set_defaults(fn=_plan)
    r = sub.add_parser("run", help="run a program on a device, checked against the oracle")
    r.add_argument("file")
    r.add_argument("--target", choices=list(TARGETS), default="cpu")
    r.add_argument("--device", choices=[d.name for d in DEVICES])
    r.add_argument("--steps", type=_steps, default=3)
    r.add_argument("--inputs", help="an .npz of every argument (default: deterministic samples)")
    r.add_argument(
        "--partition",
        action="store_true",
        help="run a refused program in spans: refused ones on the CPU oracle, the rest on the device",
    )
    r.set_defaults(fn=_run)
    f = sub.add_parser("features", help="the feature matrix, generated from the target tables")
    f.set_defaults(fn=_features)
    v = sub.add_parser("devices", help="the devices poot knows and whether they are here")
    v.add_argument("--require", choices=[d.name for d in DEVICES])
    v.set_defaults(fn=_devices)
    i = sub.add_parser("import", help="import an ONNX model as a poot program")
    i.add_argument("model")
    i.add_argument("-o", "--output")
    i.set_defaults(fn=_import)
    c = sub.add_parser("cache", help="the compiled-blob cache")
    c.add_argument("action", choices=["ls", "verify", "clear"])
    c.add_argument("--bad", action="store_true", help="clear: only damaged or foreign entries")
    c.set_defaults(fn=_cache)
    return ap


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    console = Console()
    try:
        if args.memory_budget is not None:
            from poot_ir.budget import set_budget

            set_budget(args.memory_budget)
        code: int = args.fn(console, args)
    except PootError as err:
        Console(stderr=True, soft_wrap=True).print(
            f"[bold red]error:[/] {escape(f'{type(err).__name__}: {err}')}", highlight=False
        )
        return 2
    return code


if __name__ == "__main__":
    sys.exit(main())
