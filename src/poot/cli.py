"""The ``poot`` command line.

::

    poot demo                               the example programs, planned for every target and
                                            run on every device present, checked against the oracle
    poot plan FILE --target T               admission, regions, contexts, refusals, numerics
    poot run FILE [--device D] [--target T] run a program and check it against the oracle
             [--partition]                  (T: D's target; D: the first device present for T;
             [--host compiled|oracle]        refused spans on the host device or the oracle,
                                            the rest on D)
    poot generate EXAMPLE                   prefill on one device, hand the KV cache over,
             [--prefill-device D]           decode greedily on another; checked against a
             [--decode-device D] [--steps N]  whole run on the oracle; a span a device refuses
             [--host compiled|oracle]        on the host device or the oracle
    poot features                           the feature matrix (docs/features.md)
    poot devices [--require NAME]           what is on this machine, and why not
    poot import MODEL.onnx [-o FILE]        an ONNX model as a poot program (weights beside it)
            [--check] [--shape X=8x128]     (every blocker; fix dynamic dims)
    poot import module:function             a JAX function (jax 0.12: Python 3.12+, poot-jax's
            --shape x=8x128[:int32] ...     `jax` extra), each parameter's shape given
    poot plan|run MODEL.onnx|module:function ...  import, then plan or run, with its weights
    poot cache ls|verify|clear              the compiled-blob cache
    poot acceptance --device D [-o FILE]    every claim for device D, checked on it: a receipt
    poot acceptance --compare A B           two receipts side by side

Exit status: 0 on success, 1 when a check failed or a program was refused by the target or
the device (when planning or while running: ``poot.exit_codes.REFUSALS``), 2 on bad input (a
typed ``PootError`` of a public class, one line naming what is wrong, or a usage error from the
argument parser), 3 when ``acceptance`` finds its device absent ("hardware unavailable:
...").

Every file read is checked before it is opened and every file written before the work starts
(``poot.files``).
"""

from __future__ import annotations

import argparse
import math
import sys
import tokenize
import zipfile
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from poot_ir import InputError, PootError, Program, format_program, parse_program
from poot_ir.budget import budget_set, check_alloc
from rich.console import Console
from rich.markup import escape

from poot import files
from poot.arguments import parser
from poot.exit_codes import exit_code

# Each subcommand imports what it needs when it runs: `poot import` loads neither the engine,
# the devices nor the planner (tests/test_cli.py checks it with -X importtime).
if TYPE_CHECKING:
    from poot_engine import Device
    from poot_jax import ImportedFunction
    from poot_onnx import Imported

__all__ = ["main"]

EXAMPLES = Path(__file__).parent / "examples"


def _read_program(path: str, limit: int) -> Program:
    return parse_program(files.read_text(path, "program", limit))


def _shapes(specs: Sequence[str] | None) -> dict[str, tuple[int, ...]]:
    """``--shape NAME=8x128`` (an input's whole shape, or one dim symbol's extent) as
    ``shapes=``."""
    out: dict[str, tuple[int, ...]] = {}
    for spec in specs or ():
        name, sep, dims = spec.partition("=")
        try:
            extents = tuple(int(d) for d in dims.lower().split("x")) if dims else ()
        except ValueError:
            extents = ()
        if not sep or not name or not extents or any(d < 0 for d in extents):
            raise InputError(f"--shape {spec!r}", "expected NAME=AxBx... (non-negative integers)")
        out[name] = extents
    return out


def _import_onnx(path: str, shapes: Sequence[str] | None) -> Imported:
    from poot_onnx import import_model

    files.regular_file(path, "model")  # read whole: held to the memory budget
    return import_model(path, shapes=_shapes(shapes))


def _import_reference(ref: str, specs: Sequence[str] | None) -> ImportedFunction:
    """A JAX function ``module:function`` (``poot.pyref``) imported on its ``--shape``s; an
    unsupported one is refused with every blocker listed in the error, nothing run."""
    from poot_ir import UnsupportedJax

    from poot import pyref

    plain, dtypes = pyref.split_dtypes(specs)
    try:
        return pyref.import_reference(ref, _shapes(plain), dtypes)
    except UnsupportedJax as err:
        found = pyref.blockers(ref, _shapes(plain), dtypes)
        if len(found) > 1:
            listed = "; ".join(str(b) for b in found)
            raise UnsupportedJax(
                err.primitive, err.where, err.kind, f"{err.detail}; every blocker: {listed}"
            ) from None
        raise


def _load(
    path: str, shapes: Sequence[str] | None, limit: int
) -> tuple[Program, Imported | ImportedFunction | None]:
    """A program from a ``.poot`` file, or imported from an ``.onnx`` one or a JAX function
    ``module:function`` (with its weights)."""
    from poot import pyref

    if pyref.is_reference(path):
        function = _import_reference(path, shapes)
        return function.program, function
    if path.endswith(".onnx"):
        imported = _import_onnx(path, shapes)
        return imported.program, imported
    return _read_program(path, limit), None


def _read_inputs(path: str) -> dict[str, np.ndarray]:
    """The arrays of an ``.npz`` file, refused (one line) when it is missing, not a regular
    file, no ``.npz``, larger than the memory budget (unpacked, or as its headers declare), or
    holds anything but plain arrays."""
    what = f"inputs {path}"
    with files.open_regular(path, "inputs") as f:
        try:
            data = np.load(f, allow_pickle=False)
        except OSError as err:
            raise InputError(what, f"cannot read it: {err.strerror or err}") from None
        except (ValueError, EOFError) as err:  # pickled, or no numpy file at all
            raise InputError(what, f"not a plain .npz: {err}") from None
        if not isinstance(data, np.lib.npyio.NpzFile):
            raise InputError(what, "one array (.npy); expected an .npz of named arrays")
        with data:
            try:
                # what the members unpack to and the arrays they declare, before one is read
                check_alloc(what, _declared_bytes(data))
                return {k: data[k] for k in data.files}
            except (
                ValueError,  # an object array
                OSError,
                EOFError,
                KeyError,
                zipfile.BadZipFile,
                SyntaxError,  # a header numpy's literal_eval cannot read
                tokenize.TokenError,  # a header numpy's tokenizer cannot read
            ) as err:
                raise InputError(what, f"holds an array that is not plain data: {err}") from None


def _declared_bytes(data: np.lib.npyio.NpzFile) -> int:
    """The bytes an ``.npz``'s members unpack to, and the arrays their headers declare."""
    archive = data.zip
    if archive is None:
        return 0
    members = archive.infolist()
    total = sum(int(m.file_size) for m in members)
    for m in members:
        with archive.open(m) as f:
            version = np.lib.format.read_magic(f)
            # version 3.0 differs from 2.0 only in the header's text encoding
            read = np.lib.format.read_array_header_1_0
            if version != (1, 0):
                read = np.lib.format.read_array_header_2_0
            shape, _, dtype = read(f)
            total += math.prod(shape) * dtype.itemsize
    return total


def _origins(console: Console, p: Any, imported: Imported | ImportedFunction | None) -> None:
    """Each refused equation's ONNX node (by its result var, which planning keeps)."""
    if imported is None or not p.refusals:
        return
    by_var = {e.out.id: i for i, e in enumerate(imported.program.eqns)}
    for r in p.refusals:
        # a refusal names an equation of the plan's source (a legalized program's rewrites
        # take several equations each, so its indices are not the source's)
        if r.eqn < 0 or r.eqn >= len(p.source.eqns):
            continue
        src = by_var.get(p.source.eqns[r.eqn].out.id)
        where = imported.origin(src) if src is not None else ""
        if where:
            console.print(f"equation {r.eqn} ({r.primitive}) comes from {where}", highlight=False)


def _with_progress(device: Device, console: Console) -> None:
    """Long builds show progress: a device with a link step (XDNA2) reports each stage."""

    def show(stage: str, done: int, total: int) -> None:
        console.print(f"[dim]link {done}/{total}: {stage}[/]")

    device.report_progress(show)


def _demo(console: Console, args: argparse.Namespace) -> int:
    from poot_engine.run import run_program
    from poot_npu.registry import DEVICES

    from poot import render
    from poot.generate import generate, handoff_table

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
    # one handoff: prefill on an NPU stand-in where one is present, decode on the CPU
    here = {info.name for info, why in devices if why is None}
    prefill_on = next((d for d in ("vpu-cpu", "xdna-host") if d in here), "cpu")
    moved = generate("tiny-decoder", prefill_on, "cpu", steps=8, cache_dir=args.cache_dir)
    console.print(handoff_table([moved], "Handoff: tiny-decoder, prefill then 8 decode steps"))
    return 0 if ok and moved.ok else 1


def _generate(console: Console, args: argparse.Namespace) -> int:
    from poot.decoder import EXAMPLES as DECODERS
    from poot.generate import generate, render_report

    cfg = DECODERS[args.example]
    if args.prompt_len is not None:
        cfg = cfg.with_prompt(args.prompt_len)
    report = generate(
        args.example,
        args.prefill_device,
        args.decode_device,
        args.steps,
        args.cache_dir,
        cfg,
        host=args.host,
    )
    console.print(render_report(report))
    return 0 if report.ok else 1


def _plan(console: Console, args: argparse.Namespace) -> int:
    from poot_npu.registry import device_info
    from poot_planner import TARGETS, Span, partition, plan

    from poot import render

    program, imported = _load(
        args.file, args.shape, files.max_program_bytes(args.max_program_bytes)
    )
    targets = [args.target] if args.target else list(TARGETS)
    code = 0
    for t in targets:
        # an ONNX model's weights are known now: checked when planning, as `poot run` checks them
        p = plan(program, t, constants=imported.weights if imported is not None else None)
        spans: tuple[Span, ...] = ()
        if not p.admitted and p.source.eqns:
            # cut as `poot run` cuts it on the device it picks for the target: where that device
            # checks the attention scores, the partition makes the mask rewrite it relies on
            checks = device_info(_device_for(None, t)).checks_score_bound
            spans = partition(p.source, p.target, p, score_guard=checks)
        console.print(render.plan_panel(p, spans, every=args.guards))
        _origins(console, p, imported)
        if args.program and p.admitted:
            # what the device runs: after the target's passes (the Intel narrowing casts)
            console.print(format_program(p.program), highlight=False, markup=False)
        code |= 0 if p.admitted else 1
    return code


def _device_for(device: str | None, target: str | None) -> str:
    """The device ``poot run`` uses: ``--device``, whose target ``--target`` (when given) must
    be; else the first device present for ``--target``; else the CPU."""
    from poot_npu.registry import DEVICES, device_info

    if device is None:
        return next(
            (d.name for d in DEVICES if d.target == target and d.unavailable_reason() is None),
            "cpu",
        )
    runs = device_info(device).target
    if target is not None and runs != target:
        raise InputError(
            f"--target {target}", f"device {device!r} runs target {runs!r}, not {target!r}"
        )
    return device


def _run(console: Console, args: argparse.Namespace) -> int:
    from poot_engine.run import run_program
    from poot_ir import sample_inputs
    from poot_ir.sampling import sample_bytes
    from poot_npu.registry import host_device, make_device

    from poot import render

    limit = files.max_program_bytes(args.max_program_bytes)
    name = _device_for(args.device, args.target)
    if args.inputs:
        files.regular_file(args.inputs, "inputs")  # before the program is even read
    program, imported = _load(args.file, args.shape, limit)
    device = make_device(name)
    _with_progress(device, console)
    # a partition's host spans: on the compiled host device unless --host oracle (or the
    # device is the oracle or the host device itself)
    host = host_device(device.target, args.host) if args.partition else None
    try:
        inputs = None
        if args.inputs:
            given = _read_inputs(args.inputs)
            if imported is not None:  # slots by ONNX name or program name; the model's weights
                given = {imported.inputs.get(k, k): v for k, v in given.items()}
                given = {**imported.weights, **given}
            if extra := sorted(set(given) - {a.name for a in program.args}):
                raise InputError(
                    f"inputs {args.inputs}", f"{extra} are not arguments of the program"
                )
            inputs = [given]
        elif imported is not None:
            check_alloc(f"{args.steps} steps of samples", args.steps * sample_bytes(program))
            inputs = [{**sample_inputs(program, k), **imported.weights} for k in range(args.steps)]
        report = run_program(
            program,
            device,
            name,
            steps=args.steps,
            cache_dir=args.cache_dir,
            inputs=inputs,
            partition=args.partition,
            host=host,
        )
    finally:
        device.close()
        if host is not None:
            host.close()
    console.print(render.run_report(report))
    return 0 if report.ok else 1


def _devices(console: Console, args: argparse.Namespace) -> int:
    from poot_npu.registry import DEVICES, DeviceKind, device_info

    from poot import render

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
    from poot_planner.features import feature_matrix

    sys.stdout.write(feature_matrix())
    return 0


def _import(console: Console, args: argparse.Namespace) -> int:
    from poot import pyref

    reference = pyref.is_reference(args.model)
    if args.check:
        if reference:
            plain, dtypes = pyref.split_dtypes(args.shape)
            blockers: Sequence[object] = pyref.blockers(args.model, _shapes(plain), dtypes)
        else:
            from poot_onnx import check_model

            files.regular_file(args.model, "model")
            blockers = check_model(args.model, shapes=_shapes(args.shape))
        for b in blockers:
            console.print(str(b), highlight=False, markup=False, soft_wrap=True)
        console.print(f"{len(blockers)} blocker(s)" if blockers else "imports: no blockers")
        return 1 if blockers else 0
    out = weights = None
    if args.output:
        out = Path(args.output)
        if out.suffix == ".npz":
            raise InputError(
                f"-o {out}", "the weights go to FILE with .npz; name the program .poot"
            )
        # both outputs checked before the import's work
        out = files.check_output(out, "program")
        weights = files.check_output(out.with_suffix(".npz"), "weights")
    imported = (
        _import_reference(args.model, args.shape)
        if reference
        else _import_onnx(args.model, args.shape)
    )
    text = format_program(imported.program)
    if out is None or weights is None:
        sys.stdout.write(text)
        return 0
    files.write_text(out, text, "program")
    # Always written (empty for a model without weights), so `poot run` finds them.
    files.write_file(
        weights, "weights", lambda f: np.savez(f, allow_pickle=False, **imported.weights)
    )
    console.print(
        f"wrote {out} ({len(imported.program.eqns)} equations) and its weights {weights} "
        f"({len(imported.weights)} arrays)"
    )
    return 0


def _cache(console: Console, args: argparse.Namespace) -> int:
    from poot_engine import blob_cache
    from poot_engine.cache_root import cache_root

    from poot import render

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


def _acceptance(console: Console, args: argparse.Namespace) -> int:
    from poot.acceptance import cli as acceptance_cli

    return acceptance_cli.main(console, args)


_COMMANDS: dict[str, Callable[[Console, argparse.Namespace], int]] = {
    "demo": _demo,
    "plan": _plan,
    "run": _run,
    "generate": _generate,
    "features": _features,
    "devices": _devices,
    "import": _import,
    "cache": _cache,
    "acceptance": _acceptance,
}


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    console = Console()
    try:
        with budget_set(args.memory_budget) if args.memory_budget is not None else nullcontext():
            code = _COMMANDS[args.command](console, args)
    except PootError as err:
        Console(stderr=True).print(
            f"[bold red]error:[/] {type(err).__name__}: {escape(str(err))}",
            highlight=False,
            soft_wrap=True,
        )  # soft_wrap: one line, however long, for scripts that read it
        return int(exit_code(err))
    return code


if __name__ == "__main__":
    sys.exit(main())
