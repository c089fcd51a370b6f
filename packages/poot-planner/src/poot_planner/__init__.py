"""poot_planner: targets as data, admission with typed refusals, XDNA2 row kernels and regions,
Intel narrowing, and the feature matrix.

``plan(program, target)`` always returns a ``Plan``; ``Plan.check()`` raises ``PlanRefused``.
"""

from poot_planner.features import feature_matrix
from poot_planner.fp16.narrowing import narrow_to_device_precision
from poot_planner.partition import PartitionSummary, Span, partition, summarize
from poot_planner.plan import Admission, Plan, plan
from poot_planner.refusal import Refusal, RefusalKind
from poot_planner.target import (
    AxisRule,
    Capability,
    KernelClass,
    NarrowingContract,
    RegionLimits,
    Target,
)
from poot_planner.targets import TARGETS, get_target
from poot_planner.xdna2.regions import HostRelayout, Region
from poot_planner.xdna2.tiles import IndexGuard, TileOp, TileOperand

__all__ = [
    "TARGETS",
    "Admission",
    "AxisRule",
    "Capability",
    "HostRelayout",
    "IndexGuard",
    "KernelClass",
    "NarrowingContract",
    "PartitionSummary",
    "Plan",
    "Refusal",
    "RefusalKind",
    "Region",
    "RegionLimits",
    "Span",
    "Target",
    "TileOp",
    "TileOperand",
    "feature_matrix",
    "get_target",
    "narrow_to_device_precision",
    "partition",
    "plan",
    "summarize",
]
