"""XDNA2 (AMD AIE2P) code generation: Peano C kernels, region designs, MLIR-AIE, the link step.

From an admitted ``poot_planner.Plan`` for ``xdna2``:

- ``kernels``: one C kernel per tile job, a fixed ABI (``kernel_signature``), and each region's
  kernels as one translation unit (``region_source``); ``cexpr`` and ``fused`` build the bodies
  over ``csrc/poot_math.h``.
- ``design``: the design as data (``ProgramDesign``: host layout, regions, cores, FIFOs, runtime
  sequence) and its execution contract; ``designer.design_program`` builds it, ``arenas`` lays
  out the host arenas, ``validate`` checks every bound.
- ``mlir``: the design as MLIR-AIE text, one module per region.
- ``lower``: the one lowering of a plan (``lower_program``: design, MLIR, kernel C) that both
  XDNA2 devices' artifact sources carry, so compiling never plans or designs again.
- ``link``: Peano and aiecc, giving an xclbin and an instruction stream per region
  (``link.link``; the modules ``link`` and ``validate`` are not shadowed by their functions).
- ``hostbuild``: the same kernels built by the host C compiler (ctypes); ``execute`` runs a
  design over numpy arenas exactly as its execution contract says: the one executor that
  ``XdnaHostDevice``, the fake pyxrt of the tests and codegen's own tests share.
"""

from poot_codegen.xdna.design import (
    Arena,
    ArenaRole,
    Binding,
    Core,
    DesignError,
    Fifo,
    HostLayout,
    Port,
    ProgramDesign,
    RegionDesign,
    Relayout,
    RelayoutKind,
    Slot,
    Transfer,
    TransferDirection,
)
from poot_codegen.xdna.designer import build_design, design_program
from poot_codegen.xdna.kernels import (
    kernel_signature,
    kernel_symbol,
    program_source,
    region_object,
    region_source,
)
from poot_codegen.xdna.link import (
    RegionArtifact,
    artifact_identity,
    artifact_source,
    identity_fields,
)
from poot_codegen.xdna.lower import Lowered, from_parts, lower_program
from poot_codegen.xdna.mlir import render_program, render_region

__all__ = [
    "Arena",
    "ArenaRole",
    "Binding",
    "Core",
    "DesignError",
    "Fifo",
    "HostLayout",
    "Lowered",
    "Port",
    "ProgramDesign",
    "RegionArtifact",
    "RegionDesign",
    "Relayout",
    "RelayoutKind",
    "Slot",
    "Transfer",
    "TransferDirection",
    "artifact_identity",
    "artifact_source",
    "build_design",
    "design_program",
    "from_parts",
    "identity_fields",
    "kernel_signature",
    "kernel_symbol",
    "lower_program",
    "program_source",
    "region_object",
    "region_source",
    "render_program",
    "render_region",
]
