"""Render an XDNA2 region design as MLIR-AIE text, in the placed ``aie`` dialect IRON prints,
in the syntax of the mlir-aie version ``toolchain.json`` pins (1.1.4).

One module per region, as rendered for the pinned version (a region that runs an earlier
identical region's artifact, ``reuse``, renders that region's device body with its own runtime
sequence: its xclbin is the artifact's, its instruction stream its own)::

    module {
      aie.device(npu2) {
        func.func private @poot_t0(memref<512xf32>, ..., i32, i32)
        %shim_noc_tile_0_0 = aie.tile(0, 0)
        %tile_0_2 = aie.tile(0, 2)
        aie.objectfifo @v0(%shim_noc_tile_0_0, {%tile_0_2}, 2 : i32) : !aie.objectfifo<memref<512xf32>>
        %core_0_2 = aie.core(%tile_0_2) {
          scf.for (forever) { acquire resident; scf.for (n_chunks) { acquire, func.call, release } }
          (a K-streamed operand: scf.for (pieces) { acquire, func.call, release } inside)
          aie.end
        } {link_with = "region0.o"}
        aie.runtime_sequence(%arg0: memref<Nxi8>, ...) {
          aiex.npu.dma_memcpy_nd(%arg1[0, 0, 0, off][1, 1, 1, bytes][0, 0, 0, 1]) {id = 0 : i64, metadata = @v0} : memref<Nxi8>
          aiex.npu.dma_wait {symbol = @v9}
        }
      }
    }

Version-dependent syntax (``toolchain.LinkWith``, ``Toolchain.runtime_sequence``): before
Xilinx/mlir-aie PR #2922 (2026-03) the ld-script emitter (lib/Targets/AIETargetLdScript.cpp,
``coreOp.getLinkWith()``) reads ``link_with`` only on ``aie.core`` (``} {link_with = "x.o"}``, as
in the 2025 tests); since, on each ``func.func`` (``attributes {link_with = ...}``), and both at
once is rejected. The runtime sequence op is ``aiex.runtime_sequence @sequence(...)`` before PR
#2708 (2025-11-18) and ``aie.runtime_sequence(...)`` since (its symbol defaults to ``sequence``);
1.1.4 is after #2708 (``toolchain.json`` records why). Read, for 1.1.4, in Xilinx/mlir-aie at
19cce64c (2025-11-21) and 011d9659 (2025-12-19), the two ends of the window the v1.1.4 tag lies
in (no snapshot carries the tag itself): include/aie/Dialect/AIE/IR/AIEOps.td,
include/aie/Dialect/AIEX/IR/AIEX.td, lib/Targets/AIETargetLdScript.cpp, test/npu-xrt/*/aie.mlir,
test/Conversion/DmaToNpu/dma_to_npu.mlir: the syntax below is the same at both. The rest matched
against Xilinx/mlir-aie (read, not copied): test/npu-xrt/vector_scalar_using_dma/aie.mlir (the
forever loop, the ``{id = N : i64, issue_token = true, metadata = @of}`` transfer attributes,
``aiex.npu.dma_wait {symbol = ...}``); include/aie/Dialect/AIEX/IR/AIEX.td (the
``npu.dma_memcpy_nd`` assembly format, offsets in memref elements). Each arena is an ``i8``
memref, so offsets and sizes are bytes; every one is a whole number of 32-bit words, as the shim
DMA requires.

The flag path (``design.FlagPath``) is rendered as ordinary depth-1 object FIFOs of
``memref<1xi32>``: one per core, to the next core of the chain (memory neighbours, so
mlir-aie's objectFifo transform makes it shared memory: ``requiresDMAs`` in
lib/Dialect/AIE/Transforms/AIEObjectFifoStatefulTransform.cpp), the last one to a shim; each
core, after its run's calls, acquires the word it takes (Consume) and the one it makes
(Produce), calls ``poot_flag_first`` or ``poot_flag_next`` and releases both; the runtime
sequence drains the last word into the flags arena (``issue_token``) and waits on it after the
results. A one-word core-to-shim FIFO of depth 1 is as in Xilinx/mlir-aie's npu2 tests
(``aie.objectfifo @objfifo_out (%t02, {%t00}, 1 : i32) : !aie.objectfifo<memref<1xi32>>``), and
one-word flag FIFOs between neighbour cores as in its ``of_up_down_flag_FIFO_*`` designs.
"""

from __future__ import annotations

from poot_ir import DType

from poot_codegen.xdna.design import (
    Core,
    DesignError,
    Fifo,
    FlagPath,
    HostLayout,
    Port,
    ProgramDesign,
    RegionDesign,
    TransferDirection,
)
from poot_codegen.xdna.guards import FLAG_FIRST, FLAG_NEXT
from poot_codegen.xdna.reuse import on_artifact
from poot_codegen.xdna.toolchain import LinkWith, Toolchain, manifest
from poot_codegen.xdna.validate import validate, validate_region

__all__ = ["RUNTIME_SEQUENCE_OP", "render_program", "render_region"]

RUNTIME_SEQUENCE_OP = manifest().runtime_sequence
"""The pinned mlir-aie's runtime sequence op (``toolchain.json``): ``aiex.runtime_sequence``
before Xilinx/mlir-aie PR #2708 (2025-11-18), ``aie.runtime_sequence`` since (1.1.4 included)."""

_FOREVER = 9223372036854775807  # IRON's ``while_true`` worker loop bound (INT64_MAX)
_ELEMENT = {DType.F32: "f32", DType.I32: "i32", DType.BOOL: "i8"}
_WORD = "memref<1xi32>"  # a flag word
_WORD_VIEW = f"!aie.objectfifosubview<{_WORD}>"


def _memref(p: Port | Fifo) -> str:
    return f"memref<{p.nbytes // p.dtype.itemsize}x{_ELEMENT[p.dtype]}>"


def _kernel_types(c: Core) -> str:
    """The kernel's argument types: its ports, ``units`` and ``first_unit``, and ``piece``
    when it takes a K-streamed operand (``kernels``' ABI)."""
    ints = ["i32"] * (2 if c.pieces == 1 else 3)
    return ", ".join([_memref(p) for p in (*c.inputs, c.output)] + ints)


def _tile(column: int, row: int) -> str:
    return f"%shim_noc_tile_{column}_0" if row == 0 else f"%tile_{column}_{row}"


def render_program(design: ProgramDesign, toolchain: Toolchain | None = None) -> tuple[str, ...]:
    """The MLIR text of every region, in order (the design is validated first), in the syntax
    of ``toolchain``'s mlir-aie (default: the pinned one, ``toolchain.json``)."""
    validate(design)
    tc = toolchain or manifest()
    return tuple(_render(design, _as_run(design, r), tc) for r in design.regions)


def render_region(design: ProgramDesign, index: int, toolchain: Toolchain | None = None) -> str:
    """The MLIR text of region ``index`` (validated first)."""
    region = design.regions[index]
    validate_region(region, design.layout, design.limits)
    return _render(design, _as_run(design, region), toolchain or manifest())


def _as_run(design: ProgramDesign, region: RegionDesign) -> RegionDesign:
    """What ``region``'s module is rendered from: itself, or for a region running an earlier
    one's artifact, that region's device body with its own runtime sequence
    (``reuse.on_artifact``): the module's xclbin is the artifact's and only its instruction
    stream is its own."""
    if region.artifact is None:
        return region
    return on_artifact(design.regions[region.artifact], region)


def _render(design: ProgramDesign, region: RegionDesign, tc: Toolchain) -> str:
    layout = design.layout
    cores = {c.tile: c for c in region.cores}
    out: list[str] = [
        f"// poot region {region.index} of {design.program!r}: generated by "
        "poot_codegen.xdna.mlir; do not edit.",
        f"// eqns {', '.join(map(str, region.eqns))}; kernels in {region.object_file}; "
        "kernel call: opcode 3, instructions, instruction words, then the arenas "
        + ", ".join(f"{a.index} ({a.role.value}, {a.nbytes} B)" for a in layout.arenas),
        *(
            [
                f"// runs region {region.artifact}'s artifact (its xclbin and hardware "
                "context); only this runtime sequence (its instruction stream) is its own"
            ]
            if region.artifact is not None
            else []
        ),
        "module {",
        f"  aie.device({design.device}) {{",
    ]
    # where link_with goes depends on the mlir-aie version; both at once is rejected (PR #2922)
    link = f'{{link_with = "{region.object_file}"}}'
    on_func = f" attributes {link}" if tc.link_with is LinkWith.FUNC else ""
    on_core = f" {link}" if tc.link_with is LinkWith.CORE else ""
    for c in region.cores:
        out.append(f"    func.func private @{c.symbol}({_kernel_types(c)}){on_func}")
    out.append(f"    func.func private @{FLAG_FIRST}({_WORD}){on_func}")
    if len(region.cores) > 1:
        out.append(f"    func.func private @{FLAG_NEXT}({_WORD}, {_WORD}){on_func}")
    shims = {f.shim for f in region.fifos if f.shim is not None} | {region.flag.transfer.shim}
    for col in sorted(shims):
        out.append(f"    {_tile(col, 0)} = aie.tile({col}, 0)")
    for c in region.cores:
        out.append(f"    {_tile(c.column, c.row)} = aie.tile({c.column}, {c.row})")
    for f in region.fifos:
        out += _fifo(f, cores, layout)
    out += _flag_fifos(region, cores)
    for c in region.cores:
        out += _core(c, on_core, region.flag)
    out += _sequence(region, layout, tc.runtime_sequence)
    out += ["  }", "}", ""]
    return "\n".join(out)


def _fifo(f: Fifo, cores: dict[int, Core], layout: HostLayout) -> list[str]:
    if f.producer is not None:
        p = cores[f.producer]
        src, what = _tile(p.column, p.row), f"output of {p.symbol}"
    elif f.shim is not None and f.source is not None:
        src = _tile(f.shim, 0)
        what = f"from arena {f.source.arena} at {f.source.offset}"
    else:  # validate() refuses this design before rendering
        raise DesignError("neither a producer nor a host source on a shim", where=f"FIFO {f.name}")
    dsts = [_tile(cores[t].column, cores[t].row) for t in f.consumers]
    if f.sink is not None:
        if f.shim is None:  # as above
            raise DesignError("a drain with no shim", where=f"FIFO {f.name}")
        dsts.append(_tile(f.shim, 0))
        what += f", to arena {f.sink.arena} at {f.sink.offset}"
    kind = "resident" if f.resident else f"{f.n_objects} object(s) of {f.elems}"
    if f.pieces > 1:
        kind = f"{f.pieces} pieces of {f.elems} per pass, {f.repeats} pass(es)"
    shape = f"{f.dtype.value}[{','.join(map(str, f.shape))}]"
    return [
        f"    // %{f.value} {shape}: {what}; {kind}",
        f"    aie.objectfifo @{f.name}({src}, {{{', '.join(dsts)}}}, {f.depth} : i32) "
        f": !aie.objectfifo<{_memref(f)}>",
    ]


def _flag_fifos(region: RegionDesign, cores: dict[int, Core]) -> list[str]:
    t = region.flag.transfer
    out = [
        f"    // flag path: tiles {', '.join(map(str, region.flag.order))}, one word each; "
        f"to arena {t.arena} at {t.offset}"
    ]
    for name, producer, consumer in region.flag.links():
        p = cores[producer]
        dst = (
            _tile(t.shim, 0)
            if consumer is None
            else _tile(cores[consumer].column, cores[consumer].row)
        )
        out.append(
            f"    aie.objectfifo @{name}({_tile(p.column, p.row)}, {{{dst}}}, 1 : i32) "
            f": !aie.objectfifo<{_WORD}>"
        )
    return out


def _flag_step(c: Core, flag: FlagPath) -> list[str]:
    """After the run's calls: take the previous core's word, hand on the sum, release both."""
    taken, made = flag.feeds(c.tile)
    indent = "        "
    lines = [
        f"{indent}%fo = aie.objectfifo.acquire @{made}(Produce, 1) : {_WORD_VIEW}",
        f"{indent}%fwo = aie.objectfifo.subview.access %fo[0] : {_WORD_VIEW} -> {_WORD}",
    ]
    if taken is None:
        lines.append(f"{indent}func.call @{FLAG_FIRST}(%fwo) : ({_WORD}) -> ()")
    else:
        lines += [
            f"{indent}%fi = aie.objectfifo.acquire @{taken}(Consume, 1) : {_WORD_VIEW}",
            f"{indent}%fwi = aie.objectfifo.subview.access %fi[0] : {_WORD_VIEW} -> {_WORD}",
            f"{indent}func.call @{FLAG_NEXT}(%fwi, %fwo) : ({_WORD}, {_WORD}) -> ()",
            f"{indent}aie.objectfifo.release @{taken}(Consume, 1)",
        ]
    lines.append(f"{indent}aie.objectfifo.release @{made}(Produce, 1)")
    return lines


def _core(c: Core, attributes: str, flag: FlagPath) -> list[str]:
    """The core body: forever, take the resident objects, make ``n_chunks`` calls, release,
    then the flag step."""
    t = _tile(c.column, c.row)
    sub = {p.fifo: f"!aie.objectfifosubview<{_memref(p)}>" for p in (*c.inputs, c.output)}
    # a batch-held operand (``Port.hold`` calls an object): a loop over its objects, each
    # acquired around the calls of its batch (``%calls`` of them)
    held = [p for p in c.inputs if p.hold > 1]
    lines = [
        f"    %core_{c.column}_{c.row} = aie.core({t}) {{",
        "      %c0 = arith.constant 0 : index",
        "      %c1 = arith.constant 1 : index",
        f"      %c{_FOREVER} = arith.constant {_FOREVER} : index",
        f"      %calls = arith.constant {held[0].hold if held else c.n_chunks} : index",
        f"      %units = arith.constant {c.chunk} : i32",
        f"      scf.for %arg0 = %c0 to %c{_FOREVER} step %c1 {{",
    ]
    names: dict[str, str] = {}
    ports = [(c.output, "Produce"), *((p, "Consume") for p in c.inputs)]

    def acquire(p: Port, port: str, indent: str) -> None:
        n = len(names)
        names[p.fifo] = f"%e{n}"
        lines.append(f"{indent}%s{n} = aie.objectfifo.acquire @{p.fifo}({port}, 1) : {sub[p.fifo]}")
        lines.append(
            f"{indent}%e{n} = aie.objectfifo.subview.access %s{n}[0] : {sub[p.fifo]} -> {_memref(p)}"
        )

    for p, port in ports:
        if p.resident:
            acquire(p, port, "        ")
    if held:
        lines += [
            f"        %held = arith.constant {c.n_chunks // held[0].hold} : index",
            "        scf.for %arg3 = %c0 to %held step %c1 {",
        ]
        acquire(held[0], "Consume", "        ")
    inner = len(lines) - 2 * bool(held)  # the held loop's body, indented once more at its end
    lines.append("        scf.for %arg1 = %c0 to %calls step %c1 {")
    pieced = [p for p in c.inputs if p.pieces > 1]  # a K-streamed operand: a loop per call
    for p, port in ports:
        if not p.resident and p.pieces == 1 and p.hold == 1:
            acquire(p, port, "          ")
    if held:  # the call's index over the run: its batch's first call, then this one
        lines += [
            "          %base = arith.muli %arg3, %calls : index",
            "          %at = arith.addi %base, %arg1 : index",
            "          %call = arith.index_cast %at : index to i32",
        ]
    else:
        lines.append("          %call = arith.index_cast %arg1 : index to i32")
    lines.append("          %first = arith.muli %call, %units : i32")
    ints, call_indent = ["%units", "%first"], "          "
    if pieced:
        lines += [
            f"          %pieces = arith.constant {c.pieces} : index",
            "          scf.for %arg2 = %c0 to %pieces step %c1 {",
        ]
        acquire(pieced[0], "Consume", "            ")
        lines.append("            %piece = arith.index_cast %arg2 : index to i32")
        ints, call_indent = [*ints, "%piece"], "            "
    args = [names[p.fifo] for p in (*c.inputs, c.output)] + ints
    lines.append(
        f"{call_indent}func.call @{c.symbol}({', '.join(args)}) : ({_kernel_types(c)}) -> ()"
    )
    if pieced:
        lines += [
            f"            aie.objectfifo.release @{pieced[0].fifo}(Consume, 1)",
            "          }",
        ]
    for p, port in reversed(ports):
        if not p.resident and p.pieces == 1 and p.hold == 1:
            lines.append(f"          aie.objectfifo.release @{p.fifo}({port}, 1)")
    lines.append("        }")
    if held:
        lines += [f"        aie.objectfifo.release @{held[0].fifo}(Consume, 1)"]
        lines[inner:] = ["  " + line for line in lines[inner:]]
        lines.append("        }")
    for p, port in reversed(ports):
        if p.resident:
            lines.append(f"        aie.objectfifo.release @{p.fifo}({port}, 1)")
    lines += _flag_step(c, flag)
    lines += ["      }", "      aie.end", f"    }}{attributes}"]
    return lines


def _sequence(region: RegionDesign, layout: HostLayout, op: str) -> list[str]:
    arenas = {a.index: f"memref<{a.nbytes}xi8>" for a in layout.arenas}
    params = ", ".join(f"%arg{i}: {t}" for i, t in arenas.items())
    # the aiex op's tests name it (``aiex.runtime_sequence @sequence(...)``); the aie one's not
    name = " @sequence" if op.startswith("aiex.") else ""
    lines = [f"    {op}{name}({params}) {{"]
    for t in (*region.transfers, region.flag.transfer):
        token = ", issue_token = true" if t.direction is TransferDirection.FROM_DEVICE else ""
        # the repeat size: a K-streamed operand's tensor passed once per call, stride 0
        lines.append(
            f"      aiex.npu.dma_memcpy_nd(%arg{t.arena}[0, 0, 0, {t.offset}]"
            f"[{t.repeats}, 1, 1, {t.nbytes}][0, 0, 0, 1]) "
            f"{{id = {t.bd} : i64{token}, metadata = @{t.fifo}}} : {arenas[t.arena]}"
        )
    waits = (*region.waits, region.flag.drain)  # the flag word is written after the results
    lines += [f"      aiex.npu.dma_wait {{symbol = @{w}}}" for w in waits]
    lines.append("    }")
    return lines
