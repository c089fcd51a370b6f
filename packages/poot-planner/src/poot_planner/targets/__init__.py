"""The registry of targets: one module each, one explicit line here per target."""

from __future__ import annotations

from poot_ir import UnknownTarget

from poot_planner.target import Target
from poot_planner.targets import cpu, host_cpu, intel_npu4, xdna2

__all__ = ["TARGETS", "get_target"]

TARGETS: dict[str, Target] = {
    t.name: t for t in (cpu.TARGET, xdna2.TARGET, intel_npu4.TARGET, host_cpu.TARGET)
}


def get_target(target: str | Target) -> Target:
    if isinstance(target, Target):
        return target
    try:
        return TARGETS[target]
    except (KeyError, TypeError):  # TypeError: an unhashable name, e.g. a list
        raise UnknownTarget(target, tuple(TARGETS)) from None
