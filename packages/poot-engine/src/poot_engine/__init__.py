"""poot_engine: the ``Device`` protocol, ``Engine`` (weights, entries, record and replay, checks,
deadlines), the compiled-blob cache and ``CpuDevice``, the hardware-free default."""

from poot_engine.blob_cache import BlobCache, CacheEntry, EntryStatus, default_cache_dir
from poot_engine.cpu import CpuDevice
from poot_engine.device import (
    ArgSpec,
    Artifact,
    ArtifactSource,
    Buffer,
    Device,
    DeviceIdentity,
    Direction,
    Signature,
    check_dispatch,
    signature_of,
)
from poot_engine.engine import DEFAULT_DEADLINE_S, Engine, Entry, Stats, Weights
from poot_engine.handoff import Handoff, handoff

__all__ = [
    "DEFAULT_DEADLINE_S",
    "ArgSpec",
    "Artifact",
    "ArtifactSource",
    "BlobCache",
    "Buffer",
    "CacheEntry",
    "CpuDevice",
    "Device",
    "DeviceIdentity",
    "Direction",
    "Engine",
    "Entry",
    "EntryStatus",
    "Handoff",
    "Signature",
    "Stats",
    "Weights",
    "check_dispatch",
    "default_cache_dir",
    "handoff",
    "signature_of",
]
