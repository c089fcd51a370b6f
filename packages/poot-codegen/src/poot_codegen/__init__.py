"""poot_codegen: code generation from an admitted ``poot_planner.Plan``.

- XDNA2 (``poot_codegen.xdna``): region designs, Peano C kernels, MLIR-AIE, the link step, and
  the host build and executor the stand-ins share. Exported here: ``design_program``,
  ``render_program``, ``program_source``, ``ProgramDesign``, ``RegionDesign``, ``HostLayout``,
  ``ArenaRole`` and ``TransferDirection`` (a shim transfer's way, to or from the device).
- Intel NPU4 (``poot_codegen.intel.graph``): the OpenVINO IR graph. Exported here (imported on
  first use, so importing ``poot_codegen`` does not load OpenVINO): ``lower_openvino``,
  ``serialize``, ``deserialize``, ``model_signature``, ``ArgSignature`` and ``PortDirection``
  (a model port's ``"in"`` or ``"out"``).

Every name has one meaning across the packages: the engine's ``poot_engine.Direction`` is an
artifact argument's direction, ``poot_ir.Operand`` a builder operand and
``poot_planner.TileOperand`` a tensor a tile reads.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from poot_ir.lazy import lazy_exports

from poot_codegen.xdna import (
    ArenaRole,
    HostLayout,
    ProgramDesign,
    RegionDesign,
    TransferDirection,
    design_program,
    program_source,
    render_program,
)

if TYPE_CHECKING:
    from poot_codegen.intel.graph import ArgSignature, deserialize, model_signature, serialize
    from poot_codegen.intel.graph import Direction as PortDirection
    from poot_codegen.intel.graph import lower as lower_openvino

__all__ = [
    "ArenaRole",
    "ArgSignature",
    "HostLayout",
    "PortDirection",
    "ProgramDesign",
    "RegionDesign",
    "TransferDirection",
    "deserialize",
    "design_program",
    "lower_openvino",
    "model_signature",
    "program_source",
    "render_program",
    "serialize",
]

__getattr__ = lazy_exports(
    __name__,
    {
        name: ("poot_codegen.intel.graph", attr)
        for name, attr in {
            "ArgSignature": "ArgSignature",
            "PortDirection": "Direction",
            "deserialize": "deserialize",
            "lower_openvino": "lower",
            "model_signature": "model_signature",
            "serialize": "serialize",
        }.items()
    },
)
