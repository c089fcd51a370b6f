"""Getting a device's artifact for a lowered source: from the blob cache, or compiled.

A cached blob is used only when the cache vouches for it (its digest, key, owner and mode) and
the device loads it with the signature the source asks for. Anything else is compiled,
published over the old entry and loaded, and the result says whether that repaired an entry.
"""

from __future__ import annotations

from enum import Enum

from poot_ir import BlobRefused, SignatureMismatch

from poot_engine.blob_cache import BlobCache, EntryStatus, blob_key
from poot_engine.checks import check_signature
from poot_engine.device import Artifact, ArtifactSource, Device

__all__ = ["Fetch", "artifact_key", "load_artifact"]


class Fetch(Enum):
    """How ``load_artifact`` got the artifact."""

    HIT = "loaded from the cache"
    COMPILED = "compiled (no entry)"
    REPAIRED = "compiled over a damaged, foreign, unsafe or refused entry"


def artifact_key(device: Device, source: ArtifactSource) -> str:
    """The blob-cache key of ``source`` on ``device``: its full identity."""
    i = device.identity
    return blob_key(i.part, i.compiler, i.compiler_version, i.options, source.data)


def load_artifact(
    cache: BlobCache, device: Device, source: ArtifactSource
) -> tuple[Artifact, Fetch]:
    """The loaded artifact of ``source`` and how it was got (see the module). Raises the
    compiler's ``CompileFailed`` and ``SignatureMismatch`` when a fresh compile's signature is
    not the source's."""
    key = artifact_key(device, source)
    found = cache.get(key)
    if found.blob is not None:
        try:
            artifact = device.load(found.blob)
        except BlobRefused:
            pass
        else:
            if artifact.signature == source.signature:
                return artifact, Fetch.HIT
            device.unload(artifact)
    blob = device.compile(source)
    ident = device.identity
    cache.put(
        key,
        blob,
        {"part": ident.part, "compiler": ident.compiler, "version": ident.compiler_version},
    )
    artifact = device.load(blob)
    try:
        check_signature(source.signature, artifact.signature, "the compiled artifact")
    except SignatureMismatch:
        device.unload(artifact)
        raise
    return artifact, Fetch.COMPILED if found.status is EntryStatus.MISSING else Fetch.REPAIRED
