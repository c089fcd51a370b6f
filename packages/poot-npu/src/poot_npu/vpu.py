"""``VpuDevice``: the Intel NPU4 (Lunar Lake) through OpenVINO, and its hardware-free stand-in.

``VpuDevice("NPU")`` compiles a program's one OpenVINO IR graph with the NPU plugin (the
plugin's or the driver's graph compiler, as the plugin's ``NPU_COMPILER_TYPE`` picks) and runs
it through the driver. The device must be present: a compile "for" a platform without one
(``NPU_PLATFORM``) is not what runs, so a missing NPU is ``DeviceUnavailable`` at construction.

``VpuDevice("CPU")`` is the stand-in: the same lowering with ``emulate_f16=True`` (every FP16
rounding done inside the graph, since the CPU plugin computes F16 in f32), compiled and run by
OpenVINO's CPU plugin with ``CPU_STANDIN_CONFIG``. It proves the IR, the lowering, the blob
cache and the engine path; it does not prove the NPU's compiler, FP16 units or driver
(``stand_in``, ``describe()``). No device is ever ``"AUTO"``, which silently falls back to CPU.

The artifact, buffers, binding, deadlines and the guard's check after a run are
``poot_npu.openvino_device`` (``OpenVinoDevice``, which ``HostDevice`` shares).

The FP16 guard. A narrowed graph (``plan.narrowing``) is lowered with the in-graph guards of
``poot_planner.fp16.checks``: one extra boolean result after the program's, named by the
equations it checks, which is not part of the artifact's signature. After every run, before any
output is copied, a set flag is ``NarrowingRangeIntermediate`` naming the source equation (an
intermediate that overflowed FP16, or a saturated sentinel that stopped dominating); the engine
then commits nothing. ``overflow_guard=False`` drops it, for the benchmark only.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Final

import numpy as np
from poot_codegen.intel import graph as intel_graph
from poot_codegen.intel.quiet import ov
from poot_engine.device import ArtifactSource, DeviceTraits
from poot_ir import DeviceUnavailable, UnsupportedDevice
from poot_planner.fp16.checks import RangeCheck
from poot_planner.fp16.narrowing import intermediate_guards

from poot_npu import vpu_identity
from poot_npu.openvino_device import (
    OpenVinoDevice,
    frame_ir,
    unframe_ir,
)

if TYPE_CHECKING:
    from poot_planner import Plan

__all__ = ["DEVICES", "NPU_CONFIG", "TARGET", "VpuDevice", "frame_ir", "unframe_ir"]

TARGET: Final = "intel-npu4"
DEVICES: Final = ("NPU", "CPU")
"""The OpenVINO devices a VpuDevice runs on. Never ``"AUTO"``: it falls back to CPU silently."""

NPU_CONFIG: Final[dict[str, str]] = {}
"""Compile options on the NPU: none. The plugin picks its compiler (``NPU_COMPILER_TYPE``,
recorded in the identity) and the present device's platform; FP16 is the NPU's only float."""


class VpuDevice(OpenVinoDevice):
    """The Intel NPU4 device (``"NPU"``) or its stand-in on OpenVINO's CPU plugin (``"CPU"``);
    see the module docstring. ``runs`` counts completed dispatches."""

    def __init__(self, device: str = "NPU", *, overflow_guard: bool = True) -> None:
        if device not in DEVICES:
            raise UnsupportedDevice(device, f"VpuDevice runs on {' or '.join(DEVICES)} only")
        config = intel_graph.CPU_STANDIN_CONFIG if device == "CPU" else NPU_CONFIG
        super().__init__(f"VpuDevice({device})", device, config, ov.Core())
        # the in-graph FP16 guard of narrowed graphs (module docstring); off only to measure it
        self._guard = overflow_guard
        why = vpu_identity.probe(self._core, device, self._config)
        if why is not None:
            raise DeviceUnavailable(self._name, why)
        self._identity = vpu_identity.identity(self._core, device, self._config, self.stand_in)

    @staticmethod
    def probe(device: str) -> str | None:
        """None when ``device`` is here and compiles, else the reason it is unavailable
        (``vpu_identity.probe``: on the NPU, a compiler that loads and a graph that runs)."""
        if device not in DEVICES:
            return f"VpuDevice runs on {' or '.join(DEVICES)}, not {device!r}"
        config = intel_graph.CPU_STANDIN_CONFIG if device == "CPU" else NPU_CONFIG
        return vpu_identity.probe(ov.Core(), device, dict(config))

    @property
    def stand_in(self) -> bool:
        """True on ``"CPU"``: the hardware-free stand-in, not the NPU."""
        return self._device == "CPU"

    @property
    def target(self) -> str:
        return TARGET

    def describe(self) -> str:
        i = self._identity
        if self.stand_in:
            cpu = vpu_identity.prop(self._core, "CPU", "FULL_DEVICE_NAME")
            return (
                f"{self._name}: hardware-free stand-in for the Intel NPU4: the same OpenVINO IR "
                f"with in-graph FP16 rounding, compiled and run by OpenVINO {ov.get_version()}'s "
                f"CPU plugin on {cpu}; proves the IR, its lowering and the engine path, not the "
                f"NPU's compiler, FP16 units or driver"
            )
        return f"{self._name}: Intel NPU4 ({i.part}), compiled by {i.compiler} {i.compiler_version}"

    @property
    def traits(self) -> DeviceTraits:
        """Its narrowed graphs check a plan's ``score_bound`` when the in-graph FP16 guard is
        on: ``poot_planner.partition`` makes the unproven mask rewrite for it. It bakes an
        entry's weights into the graph as constants (``lower_baked``), as the NPU compiler
        bakes them into its blob; on the stand-in the CPU plugin then lays a convolution's
        kernel out once at compile, not at every run, and folds what only weights feed."""
        return DeviceTraits(checks_score_bound=self._guard, bakes_weights=True)

    # -- artifacts -----------------------------------------------------------------------------

    def lower(self, plan: Plan) -> ArtifactSource:
        return self._lower(plan, None)

    def lower_baked(self, plan: Plan, weights: Mapping[str, np.ndarray]) -> ArtifactSource:
        """``lower`` with ``weights`` as constants of the graph (``intel_graph.lower``'s
        ``constants``): the IR, and so the blob-cache key, holds their values."""
        return self._lower(plan, weights)

    def _lower(self, plan: Plan, weights: Mapping[str, np.ndarray] | None) -> ArtifactSource:
        self._usable()
        if plan.target.name != TARGET:
            raise UnsupportedDevice(self._name, f"it runs {TARGET} plans, not {plan.target.name}")
        if plan.score_bound and not (self._guard and plan.narrowing is not None):
            # the prelude's -2^15 mask is right only where the graph checks the scores
            raise UnsupportedDevice(self._name, "the plan's score-bound guard needs its FP16 guard")
        guards: tuple[tuple[int, RangeCheck], ...] = ()
        if self._guard and plan.narrowing is not None:
            # of the program the graph is lowered from (narrowed from the legalized one): the
            # source's equation indices no longer match once legalization rewrote it
            guards = intermediate_guards(plan.legalized, plan.narrowing, plan.score_bound)
        model = intel_graph.lower(
            plan.program, emulate_f16=self.stand_in, guards=guards, constants=weights
        )
        return self._source(model)
