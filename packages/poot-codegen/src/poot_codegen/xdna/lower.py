"""Lower once: an admitted XDNA2 ``Plan`` to everything both XDNA2 devices build from.

``lower_program(plan)`` builds the region design once (``design_program``), renders each
region's MLIR from it and generates each region's kernel C (a region reused across identical
layers: its artifact's); a ``Lowered`` carries all of it.
The artifact sources of ``XdnaDevice`` and ``XdnaHostDevice`` carry a ``Lowered``'s parts, so
compiling an artifact (the Peano/aiecc link step, the host C build) never plans the program or
builds its design again. ``from_parts`` rebuilds a ``Lowered`` from a source's parts, and
checks that the MLIR is its design's (rendering is cheap; a design is not rebuilt).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from poot_planner import Plan

from poot_codegen.xdna.design import DesignError, ProgramDesign
from poot_codegen.xdna.designer import design_program
from poot_codegen.xdna.kernels import kernel_symbol, program_source, region_source
from poot_codegen.xdna.mlir import render_program
from poot_codegen.xdna.reuse import canonical_kernels

__all__ = ["Lowered", "from_parts", "lower_program"]


@dataclass(frozen=True, slots=True)
class Lowered:
    """A lowered program: its validated design, each region's MLIR-AIE module and kernel C
    (what Peano builds into the region's ``link_with`` object), and every kernel as one
    translation unit (what the host stand-in builds)."""

    design: ProgramDesign
    mlir: tuple[str, ...]
    kernels: tuple[str, ...]
    program_c: str

    @property
    def regions(self) -> int:
        return len(self.design.regions)

    @property
    def artifacts(self) -> tuple[int, ...]:
        """The regions whose artifacts are built and loaded (one xclbin and hardware context
        each); every other region runs one of them with its own instruction stream."""
        return tuple(r.index for r in self.design.regions if r.artifact is None)


def lower_program(plan: Plan) -> Lowered:
    """The one lowering of an admitted XDNA2 plan (``PlanRefused`` if it has refusals)."""
    design = design_program(plan)
    return Lowered(design, render_program(design), _region_sources(plan), program_source(plan))


def _region_sources(plan: Plan) -> tuple[str, ...]:
    """Each region's kernel C: a region running an earlier one's artifact (``reuse``) links
    that region's object, so its source is that region's, after checking that its own kernels
    are the same C up to comments and symbols (``DesignError`` otherwise: the planner's
    ``artifact_key`` and the kernels disagree)."""
    sources: list[str] = []
    for r in plan.regions:
        own = region_source(plan, r)
        if r.runs != r.index:
            of = plan.regions[r.runs]
            mine = canonical_kernels(own, tuple(kernel_symbol(t) for t in r.tiles))
            theirs = canonical_kernels(sources[r.runs], tuple(kernel_symbol(t) for t in of.tiles))
            if mine != theirs:
                raise DesignError(
                    f"runs region {r.runs}'s artifact, but its kernels differ",
                    where=f"region {r.index}",
                )
            own = sources[r.runs]
        sources.append(own)
    return tuple(sources)


def from_parts(
    design: ProgramDesign, mlir: Sequence[str], kernels: Sequence[str], program_c: str = ""
) -> Lowered:
    """A ``Lowered`` read back from an artifact source; ``DesignError`` when the parts are not
    one per region or an MLIR module is not the one its design renders to."""
    n = len(design.regions)
    if len(mlir) != n or len(kernels) != n:
        raise DesignError(f"{n} regions, but {len(mlir)} MLIR modules and {len(kernels)} sources")
    if tuple(mlir) != render_program(design):
        raise DesignError("an MLIR module is not its design's")
    return Lowered(design, tuple(mlir), tuple(kernels), program_c)
