"""The ``cpu`` target: the numpy oracle itself. It admits every primitive on every dtype the
oracle defines it for (type checking already refused the rest), bit for bit by definition."""

from __future__ import annotations

from poot_ir import Prim
from poot_ir.numerics import AnyInput, BitExact, Contract
from poot_ir.typing_rules import DTYPES_OF

from poot_planner.target import Capability, KernelClass, Target

TARGET = Target(
    name="cpu",
    description="The numpy CPU oracle: the reference semantics, always present",
    capabilities=tuple(
        Capability(p, DTYPES_OF[p], KernelClass.ORACLE, Contract(p, BitExact(), AnyInput()))
        for p in Prim
    ),
)
