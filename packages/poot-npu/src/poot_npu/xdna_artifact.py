"""What the two XDNA2 devices put in an artifact source and a blob, and read back from it.

Both ``XdnaDevice`` (XRT) and ``XdnaHostDevice`` (the host stand-in) carry the region design
itself (``poot_codegen.xdna.ProgramDesign``) in every blob, so ``load`` rebuilds the runtime
from the design that was compiled (its arenas, offsets, chunking and regions) and reads the
artifact's signature back from the design's layout, never from the plan being loaded for.

- ``frame(kind, sections)``: a magic line, the kind, the sections (each u64-length-prefixed)
  and a trailing sha256 of everything before it. ``unframe`` refuses (``ValueError``) another
  kind, a bad magic, bad lengths, a truncation or a digest mismatch.
- ``encode_design`` / ``decode_design``: the design as canonical JSON (sorted keys, no
  whitespace), so equal designs encode to equal bytes. Decoding is strict (every field, exact
  types, known enum values) and the decoded design is validated again (``validate``), so a
  tampered design is refused rather than run.
- ``design_signature``: the artifact signature a design's layout binds: every argument in order
  (``IN``), then every result in order (``OUT``).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import struct
import types
import typing
from collections.abc import Sequence
from enum import Enum
from typing import Any, Final, cast

from poot_codegen.xdna import ProgramDesign
from poot_codegen.xdna.validate import validate
from poot_engine.device import ArgSpec, DeviceTraits, Direction, Signature
from poot_ir import CodegenError, TensorType

__all__ = ["decode_design", "design_signature", "encode_design", "frame", "unframe"]

_MAGIC: Final = b"POOT-XDNA2-1\n"
_DIGEST: Final = 32

#: What both XDNA2 devices (the NPU and its host stand-in) are: their kernels check a plan's
#: ``score_bound`` (``poot_codegen.xdna.guards``: each checked score outside the bound counts
#: into the region's flag word, and the run is refused), so a partition makes the F32
#: attention-mask rewrite for them (``poot_planner.fp16.prelude``).
XDNA_TRAITS = DeviceTraits(checks_score_bound=True)


def frame(kind: str, sections: Sequence[bytes]) -> bytes:
    """``sections`` framed under ``kind`` with a trailing sha256 (see the module)."""
    body = bytearray(_MAGIC)
    tag = kind.encode()
    body += struct.pack(">H", len(tag)) + tag + struct.pack(">I", len(sections))
    for s in sections:
        body += struct.pack(">Q", len(s)) + s
    return bytes(body) + hashlib.sha256(body).digest()


def unframe(kind: str, data: bytes) -> list[bytes]:
    """The sections ``frame(kind, ...)`` framed; ``ValueError`` naming what is wrong."""
    if len(data) < len(_MAGIC) + 2 + 4 + _DIGEST or not data.startswith(_MAGIC):
        raise ValueError("not a poot XDNA2 frame")
    body, digest = data[:-_DIGEST], data[-_DIGEST:]
    if hashlib.sha256(body).digest() != digest:
        raise ValueError("damaged or truncated: the digest does not match")
    at = len(_MAGIC)
    (n,) = struct.unpack_from(">H", body, at)
    tag = body[at + 2 : at + 2 + n]
    if tag != kind.encode():
        raise ValueError(f"a {tag.decode(errors='replace')!r} frame, not {kind!r}")
    at += 2 + n
    (count,) = struct.unpack_from(">I", body, at)
    at += 4
    out = []
    for _ in range(count):
        if at + 8 > len(body):
            raise ValueError("a section length past the end")
        (m,) = struct.unpack_from(">Q", body, at)
        if at + 8 + m > len(body):
            raise ValueError("a section past the end")
        out.append(body[at + 8 : at + 8 + m])
        at += 8 + m
    if at != len(body):
        raise ValueError("bytes after the last section")
    return out


# -- the design as JSON -----------------------------------------------------------------------


def encode_design(design: ProgramDesign) -> bytes:
    """``design`` as canonical JSON bytes."""
    return json.dumps(_encode(design), sort_keys=True, separators=(",", ":")).encode()


def decode_design(data: bytes) -> ProgramDesign:
    """The design ``encode_design`` encoded, validated; ``ValueError`` for anything else."""
    try:
        raw = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ValueError(f"not a design: {err}") from None
    design = cast(ProgramDesign, _decode(ProgramDesign, raw, "design"))  # a dataclass or ValueError
    try:
        return validate(design)
    except CodegenError as err:
        raise ValueError(f"an invalid design: {err}") from None


def _encode(value: object) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _encode(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, tuple):
        return [_encode(v) for v in value]
    if value is None or isinstance(value, bool | int | str):
        return value
    raise TypeError(f"cannot encode a {type(value).__name__} in a design")


def _decode(tp: Any, raw: Any, where: str) -> object:
    origin = typing.get_origin(tp)
    if origin is types.UnionType or origin is typing.Union:
        options = typing.get_args(tp)
        if raw is None and type(None) in options:
            return None
        (inner,) = [o for o in options if o is not type(None)]
        return _decode(inner, raw, where)
    if origin is tuple:
        item, dots = typing.get_args(tp)
        if dots is not Ellipsis or not isinstance(raw, list):
            raise ValueError(f"{where}: expected a list")
        return tuple(_decode(item, r, f"{where}[{i}]") for i, r in enumerate(raw))
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        hints, names = _fields(tp)
        if not isinstance(raw, dict) or sorted(raw) != sorted(names):
            raise ValueError(f"{where}: expected the fields {names}")
        return tp(**{n: _decode(hints[n], raw[n], f"{where}.{n}") for n in names})
    if isinstance(tp, type) and issubclass(tp, Enum):
        try:
            return tp(raw)
        except ValueError:
            raise ValueError(f"{where}: {raw!r} is no {tp.__name__}") from None
    if tp in (int, str, bool) and type(raw) is tp:
        return raw
    raise ValueError(f"{where}: expected {getattr(tp, '__name__', tp)}, got {raw!r}")


@functools.cache
def _fields(tp: type) -> tuple[dict[str, Any], list[str]]:
    """A dataclass's resolved field types and its field names (resolving is the slow part)."""
    return typing.get_type_hints(tp), [f.name for f in dataclasses.fields(tp)]


# -- the signature ----------------------------------------------------------------------------


def design_signature(design: ProgramDesign) -> Signature:
    """Every argument (``IN``), then every result (``OUT``), typed by its slot."""
    layout = design.layout
    specs = []
    for bindings, direction in ((layout.arguments, Direction.IN), (layout.results, Direction.OUT)):
        for b in bindings:
            s = layout.slot(b.value)
            specs.append(ArgSpec(b.name, direction, TensorType(s.shape, s.dtype)))
    return Signature(tuple(specs))
