"""What a target is: data. Capability rows, limits and the narrowing contract, and the
target's own layout step.

A target module (``poot_planner.targets.<name>``) builds one ``Target`` from these types. The
same rows drive admission, the feature matrix (``poot features``) and the conformance tests, so
a capability is declared exactly once. ``Target.__post_init__`` checks the table, so a malformed
one fails when its module is imported.

What a target plans beyond its table is its ``layout`` (``Layout``): xdna2's row kernels, tiles
and regions (``poot_planner.xdna2.layout``); a target without one (cpu, intel-npu4) runs the
admitted program as it is. ``plan`` calls the hook and never asks which target it plans for:
another NPU with a layout of the same kind sets its own ``Layout``; one of another kind adds
its products to ``LaidOut`` (and to ``Plan``), whose fields are XDNA2's tiles and regions
because the plan's are. The pieces of a target (``poot_planner.capability``) live below this
module so that those tile and region types can use them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from poot_ir import DType, Prim, Program, TargetTableError
from poot_ir.numerics import Contract

from poot_planner.capability import (
    AxisRule,
    Capability,
    CodeSize,
    KernelClass,
    NarrowingContract,
    RegionLimits,
)
from poot_planner.refusal import Refusal
from poot_planner.xdna2.regions import HostRelayout, Region
from poot_planner.xdna2.tiles import TileOp

__all__ = [
    "AxisRule",
    "Capability",
    "Claim",
    "CodeSize",
    "KernelClass",
    "LaidOut",
    "Layout",
    "NarrowingContract",
    "RegionLimits",
    "Target",
]


@dataclass(frozen=True, slots=True)
class LaidOut:
    """What a target's layout gives its plan: the tile jobs, regions and host relayouts (the
    ``Plan`` fields of the same names), the refusals of what does not fit, and ``placed``, each
    equation a tile computes as ``(equation, kernel class, tile index)`` in placing order."""

    tiles: tuple[TileOp, ...] = ()
    regions: tuple[Region, ...] = ()
    relayouts: tuple[HostRelayout, ...] = ()
    refusals: tuple[Refusal, ...] = ()
    placed: tuple[tuple[int, KernelClass, int], ...] = ()


class Claim(Protocol):
    """The equations a layout takes before admission (xdna2: the steps of its row kernels),
    which the capability table then does not admit or refuse, and the refusals among them. It
    keeps what it found for ``lay_out``, so one plan's claim is laid out by that plan alone."""

    @property
    def eqns(self) -> frozenset[int]: ...

    @property
    def refusals(self) -> tuple[Refusal, ...]: ...

    @property
    def wholes(self) -> tuple[frozenset[int], ...]:
        """Groups of equations that run together or not at all (xdna2: each row kernel's):
        a partition never cuts one into a device and a host span."""
        ...

    def lay_out(self, admitted: Mapping[int, KernelClass]) -> LaidOut:
        """The layout of the claimed equations and of ``admitted`` (each equation the table
        admitted, ascending, with its kernel class)."""
        ...


class Layout(Protocol):
    """A target's own planning step beside its capability table (``Target.layout``)."""

    def claim(self, program: Program, target: Target) -> Claim:
        """What the layout takes of ``program`` (the legalized program) before admission."""
        ...


@dataclass(frozen=True, slots=True)
class Target:
    name: str
    description: str
    capabilities: tuple[Capability, ...]
    region_limits: RegionLimits | None = None
    narrowing: NarrowingContract | None = None
    #: Primitives admitted only as steps of a recognized composite (xdna2's fused norm).
    fused_steps: frozenset[Prim] = frozenset()
    #: Program memory per tile and the code-size estimate (xdna2).
    code_size: CodeSize | None = None
    #: The most bytes one tensor may take on the device, at the dtype the device stores it in
    #: (a narrowed F32 as its ``device_dtype``): a larger one is refused (``tensor_bytes``).
    tensor_bytes: int | None = None
    #: The target's own planning after admission (xdna2: row kernels, tiles, regions); None:
    #: the admitted program runs as it is.
    layout: Layout | None = None
    #: The device flushes a subnormal constant to zero (host-cpu: OpenVINO's CPU plugin does,
    #: when it loads a graph): an equation with a subnormal F32 literal is refused (``DOMAIN``).
    flushes_subnormal_constants: bool = False

    def __post_init__(self) -> None:
        seen: set[tuple[Prim, DType]] = set()
        for c in self.capabilities:
            if not isinstance(c.prim, Prim):
                raise TargetTableError(self.name, f"{c.prim!r} is not a primitive of the IR")
            if not c.dtypes:
                raise TargetTableError(self.name, f"{c.prim.value} admits no dtype")
            if not isinstance(c.contract, Contract):
                raise TargetTableError(self.name, f"{c.prim.value} has no contract")
            if c.contract.domain is None:
                raise TargetTableError(self.name, f"{c.prim.value}: a contract without a domain")
            for d in c.dtypes:
                if (c.prim, d) in seen:
                    raise TargetTableError(
                        self.name, f"{c.prim.value} on {d.value} is declared twice"
                    )
                seen.add((c.prim, d))

        if self.code_size is not None:
            known = {p for p, _, _ in self.code_size.bodies}
            routines = {r for r, _ in self.code_size.routines}
            # a host relayout runs on no tile, so it has no program memory to estimate
            tiled = [c for c in self.capabilities if c.kernel is not KernelClass.HOST_RELAYOUT]
            needed = {c.prim for c in tiled} | self.fused_steps
            for p in sorted(needed - known, key=lambda q: q.value):
                raise TargetTableError(self.name, f"no code-size figure for {p.value}")
            for p, calls, _ in self.code_size.bodies:
                for r in calls:
                    if r not in routines:
                        raise TargetTableError(self.name, f"{p.value} calls unknown routine {r}")

    def capability(self, prim: Prim, dtype: DType) -> Capability | None:
        return _lookup(self.capabilities)[0].get((prim._value_, dtype._value_))

    def admits_prim(self, prim: Prim) -> bool:
        return prim._value_ in _lookup(self.capabilities)[1]


# The capability table indexed by (primitive, dtype) values, per table: admission asks once or
# twice per equation, and a scan hashes an Enum (a Python call) per entry. Keyed by the table's
# identity; the entry holds the table, so its id is not reused while the entry lives.
_Index = tuple[dict[tuple[str, str], Capability], frozenset[str]]
_INDEX: dict[int, tuple[tuple[Capability, ...], _Index]] = {}


def _lookup(caps: tuple[Capability, ...]) -> _Index:
    hit = _INDEX.get(id(caps))
    if hit is not None and hit[0] is caps:
        return hit[1]
    table: dict[tuple[str, str], Capability] = {}
    for c in caps:
        for d in c.dtypes:
            table.setdefault((c.prim._value_, d._value_), c)  # the first, as a scan finds
    index = (table, frozenset(c.prim._value_ for c in caps))
    _INDEX[id(caps)] = (caps, index)
    return index
