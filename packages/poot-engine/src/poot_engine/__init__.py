"""poot_engine: the ``Device`` protocol, ``Engine`` (weights, entries, record and replay, checks,
deadlines), the compiled-blob cache and ``CpuDevice``, the hardware-free default.

Entries: ``Engine.add_entry(plan)`` (a ``Program`` is planned for the device's target) and
``Engine.add_partitioned(plan)`` (refused spans on the host oracle; the engine partitions).
``poot_engine.run.run_program`` plans, runs and checks a program step by step.

The kit for a device author (``tests/test_null_device.py`` is a whole device built from it, and
a new device starts as a copy of it):

- ``HostMemory``: the base class. Subclass it, call ``super().__init__(name)`` and write
  ``target``, ``identity``, ``lower``, ``compile``, ``load``, ``unload`` and ``dispatch``; it
  gives the buffers (``HostBuffers``), the lifecycle (``Lifecycle``), ``bind_step``
  (``HostStep``), ``traits`` (``DeviceTraits``), ``use_cache``, ``report_progress`` and
  ``close`` (override ``_release`` for what else the device holds).
- ``Lifecycle``: open, poisoned, closed, with the typed errors (``DeviceFailed``,
  ``DevicePoisoned``); ``Lifecycle.missed`` poisons and gives the ``DeadlineExceeded``.
- ``DeadlineRunner``: a run that can hang, on a worker thread waited on for the deadline.
- ``check_dispatch``: the refusals of a dispatch that need no hardware. ``next_id``: handle ids
  no other device issues.
- ``HostStep``, ``ProtocolStep``: bindings of a recorded step (``StepCommands``) as
  ``BoundStep``; a device that changes what ``write``, ``read``, ``copy`` or ``dispatch`` do
  binds with ``ProtocolStep``.
"""

from poot_engine.blob_cache import BlobCache, CacheEntry, EntryStatus, default_cache_dir
from poot_engine.cpu import CpuDevice
from poot_engine.deadline import DeadlineRunner
from poot_engine.device import (
    ArgSpec,
    Artifact,
    ArtifactSource,
    BoundStep,
    Buffer,
    CompileProgress,
    Device,
    DeviceIdentity,
    DeviceTraits,
    Direction,
    Signature,
    StepCommands,
    check_dispatch,
    signature_of,
)
from poot_engine.engine import DEFAULT_DEADLINE_S, Engine, Entry, HostSpans, Stats, Weights
from poot_engine.handoff import Handoff, handoff
from poot_engine.host_buffers import HostBuffers, HostMemory, HostStep, next_id
from poot_engine.lifecycle import Lifecycle
from poot_engine.steps import ProtocolStep

__all__ = [
    "DEFAULT_DEADLINE_S",
    "ArgSpec",
    "Artifact",
    "ArtifactSource",
    "BlobCache",
    "BoundStep",
    "Buffer",
    "CacheEntry",
    "CompileProgress",
    "CpuDevice",
    "DeadlineRunner",
    "Device",
    "DeviceIdentity",
    "DeviceTraits",
    "Direction",
    "Engine",
    "Entry",
    "EntryStatus",
    "Handoff",
    "HostBuffers",
    "HostMemory",
    "HostSpans",
    "HostStep",
    "Lifecycle",
    "ProtocolStep",
    "Signature",
    "Stats",
    "StepCommands",
    "Weights",
    "check_dispatch",
    "default_cache_dir",
    "handoff",
    "next_id",
    "signature_of",
]
