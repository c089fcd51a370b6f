"""A fake ``pyxrt``: exactly the surface ``xdna-toolchain.md`` section 4 lists, recording every
call, executing each kernel call with the host stand-in's executor on the buffer objects'
memory.

Installed as ``sys.modules["pyxrt"]`` by the tests. What it checks, as the amdxdna shim would:
``bo.normal`` is rejected; a ``hw_context`` needs a registered xclbin and at most 16 exist at
once; the kernel is ``"MLIR_AIE"``; a kernel call is ``(3, insts, n_words, *arenas)`` with the
instruction buffer ``cacheable`` in group 1, synced to the device and ``n_words`` long, and arena
``i`` ``host_only`` in group ``3 + i``. Each buffer object has a host and a device copy that
only ``sync`` moves between, so a missing or misdirected sync gives wrong results.

An xclbin is what the fake ``aiecc`` (``FAKE_AIECC``) writes: ``FAKE-XCLBIN`` and the sha256 of
the region's MLIR; its instruction stream is eight words of that sha256 and a region-specific
tail. ``install(plan, cache_dir)`` maps each region's MLIR digest to the region's design and its
host-built kernels, and each region to the digest of its artifact's module (regions reused
across identical layers, ``poot_codegen.xdna.reuse``): a run executes the region its
*instruction buffer* names, and is refused unless the kernel it is called on belongs to the
hardware context of that region's artifact. ``STATE.runs_of`` records, for each hardware
context, the regions run on it and the instruction and arena buffers of each run. ``STATE.script`` lists the states the next ``run.wait`` calls return
(``COMPLETED`` once the list is empty): a ``TIMEOUT`` or ``ERROR`` there runs nothing.
"""

from __future__ import annotations

import ctypes
import hashlib
import sys
import weakref
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

import numpy as np
from poot_codegen.xdna import design_program, program_source, render_program
from poot_codegen.xdna.design import RegionDesign
from poot_codegen.xdna.execute import run_region
from poot_codegen.xdna.hostbuild import load_library
from poot_engine.blob_cache import BlobCache
from poot_planner import Plan

MAGIC = b"FAKE-XCLBIN\n"
CONTEXT_LIMIT = 16
GROUP_BASE = 0x40  # group_id(i) is GROUP_BASE + i for every kernel, as one host memory bank


class ert_cmd_state(Enum):
    ERT_CMD_STATE_NEW = 1
    ERT_CMD_STATE_QUEUED = 2
    ERT_CMD_STATE_RUNNING = 3
    ERT_CMD_STATE_COMPLETED = 4
    ERT_CMD_STATE_ERROR = 5
    ERT_CMD_STATE_ABORT = 6
    ERT_CMD_STATE_SUBMITTED = 7
    ERT_CMD_STATE_TIMEOUT = 8


class xclBOSyncDirection(Enum):
    XCL_BO_SYNC_BO_TO_DEVICE = 0
    XCL_BO_SYNC_BO_FROM_DEVICE = 1


class _Flags(Enum):
    normal = 0
    cacheable = 1
    host_only = 2


@dataclass
class _State:
    log: list[tuple[Any, ...]] = field(default_factory=list)
    regions: dict[str, tuple[RegionDesign, ctypes.CDLL]] = field(default_factory=dict)
    script: list[ert_cmd_state] = field(default_factory=list)
    absent: bool = False
    contexts: int = 0
    bos: weakref.WeakSet[bo] = field(default_factory=weakref.WeakSet)
    runs: weakref.WeakSet[run] = field(default_factory=weakref.WeakSet)
    executed: int = 0
    artifact_of: dict[str, str] = field(default_factory=dict)  # region key -> its xclbin key
    runs_of: dict[str, list[tuple[int, int, tuple[int, ...]]]] = field(default_factory=dict)


STATE = _State()


def reset() -> None:
    global STATE
    STATE = _State()
    bo._next = 0


def install(plan: Plan, cache_dir: Path) -> None:
    """Make the xclbins of ``plan``'s regions runnable: their designs and host-built kernels."""
    design = design_program(plan)
    lib = load_library(program_source(plan), BlobCache(cache_dir))
    keys = [hashlib.sha256(m.encode()).hexdigest() for m in render_program(design)]
    for region, key in zip(design.regions, keys, strict=True):
        STATE.regions[key] = (region, lib)
        STATE.artifact_of[key] = keys[region.runs]


def _insts_key(words: np.ndarray) -> str:
    """The MLIR digest the fake aiecc wrote into an instruction stream's first eight words."""
    return words[:8].astype("<u4").tobytes().hex()


def _log(*entry: Any) -> None:
    STATE.log.append(entry)


class uuid:
    def __init__(self, key: str) -> None:
        self.key = key

    def to_string(self) -> str:
        return self.key[:32]


class _XclbinKernel:
    def get_name(self) -> str:
        return "MLIR_AIE"


class xclbin:
    def __init__(self, path: str) -> None:
        data = Path(path).read_bytes()
        if not data.startswith(MAGIC):
            raise RuntimeError(f"{path}: not an xclbin")
        self.key = data[len(MAGIC) :].decode().strip()
        _log("xclbin", self.key[:12])

    def get_kernels(self) -> list[_XclbinKernel]:
        return [_XclbinKernel()]

    def get_uuid(self) -> uuid:
        return uuid(self.key)


class device:
    def __init__(self, index: int) -> None:
        if STATE.absent or index != 0:
            raise RuntimeError(f"No such device: {index}")
        self.registered: set[str] = set()
        _log("device", index)

    def register_xclbin(self, xb: xclbin) -> None:
        self.registered.add(xb.key)
        _log("register_xclbin", xb.key[:12])


class hw_context:
    def __init__(self, dev: device, id: uuid) -> None:
        if id.key not in dev.registered:
            raise RuntimeError("hw_context: xclbin not registered")
        if STATE.contexts >= CONTEXT_LIMIT:
            raise RuntimeError("hw_context: no free hardware context")
        STATE.contexts += 1
        weakref.finalize(self, _release_context)
        self.key = id.key
        _log("hw_context", id.key[:12])


def _release_context() -> None:
    STATE.contexts -= 1


class kernel:
    def __init__(self, ctx: hw_context, name: str) -> None:
        if name != "MLIR_AIE":
            raise RuntimeError(f"no kernel {name!r} in the xclbin")
        self.ctx = ctx
        _log("kernel", ctx.key[:12], name)

    def group_id(self, index: int) -> int:
        return GROUP_BASE + index

    def __call__(self, *args: Any) -> run:
        opcode, insts, n_words, *arenas = args
        _log("call", self.ctx.key[:12], opcode, insts.id, n_words, tuple(b.id for b in arenas))
        region = _insts_key(insts.device.view("<u4")) if insts.size >= 32 else ""
        STATE.runs_of.setdefault(self.ctx.key, []).append(
            (
                STATE.regions[region][0].index if region in STATE.regions else -1,
                insts.id,
                tuple(b.id for b in arenas),
            )
        )
        checks = [
            (opcode == 3, "opcode 3"),
            (insts.flags is _Flags.cacheable, "insts cacheable"),
            (insts.group == self.group_id(1), "insts in group 1"),
            (n_words == insts.size // 4, "n_words is the instruction word count"),
            (np.array_equal(insts.host, insts.device), "insts synced to the device"),
            (len(arenas) <= 5, "at most 5 arenas"),
            (region in STATE.regions, "instructions of a region aiecc made"),
            (
                STATE.artifact_of.get(region) == self.ctx.key,
                "instructions on the hardware context of their region's artifact",
            ),
        ]
        for i, a in enumerate(arenas):
            checks.append((a.flags is _Flags.host_only, f"arena {i} host_only"))
            checks.append((a.group == self.group_id(3 + i), f"arena {i} in group {3 + i}"))
        for ok, what in checks:
            if not ok:
                raise RuntimeError(f"fake XRT: kernel call breaks {what!r}")
        return run(self, arenas, region)


class run:
    def __init__(self, k: kernel, arenas: list[bo], region: str) -> None:
        self.kernel = k
        self.arenas = arenas
        self.region = region
        self.done = False
        STATE.runs.add(self)

    def wait(self, timeout_ms: int) -> ert_cmd_state:
        state = STATE.script.pop(0) if STATE.script else ert_cmd_state.ERT_CMD_STATE_COMPLETED
        _log("wait", timeout_ms, state.name)
        if state is ert_cmd_state.ERT_CMD_STATE_COMPLETED and not self.done:
            region, lib = STATE.regions[self.region]
            run_region(region, lib, [a.device for a in self.arenas])
            self.done = True
            STATE.executed += 1
        return state


class bo:
    normal = _Flags.normal
    cacheable = _Flags.cacheable
    host_only = _Flags.host_only
    _next = 0

    def __init__(self, dev: device, size: int, flags: _Flags, group: int) -> None:
        if flags is _Flags.normal:
            raise RuntimeError("amdxdna: bo.normal is not supported")
        bo._next += 1
        self.id = bo._next
        self.size, self.flags, self.group = size, flags, group
        self.host = np.zeros(size, np.uint8)
        self.device = np.zeros(size, np.uint8)
        STATE.bos.add(self)
        _log("bo", self.id, size, flags.name, group)

    def write(self, buf: Any, seek: int) -> None:
        data = np.frombuffer(memoryview(buf).cast("B"), np.uint8)
        self.host[seek : seek + data.size] = data
        _log("write", self.id, data.size, seek)

    def read(self, size: int, skip: int) -> np.ndarray:
        _log("read", self.id, size, skip)
        return self.host[skip : skip + size].view(np.int8).copy()  # pyxrt returns char

    def map(self) -> memoryview:
        return self.host.data

    def sync(self, direction: xclBOSyncDirection, size: int | None = None, offset: int = 0) -> None:
        end = self.size if size is None else offset + size
        if direction is xclBOSyncDirection.XCL_BO_SYNC_BO_TO_DEVICE:
            self.device[offset:end] = self.host[offset:end]
        else:
            self.host[offset:end] = self.device[offset:end]
        if size is None:
            _log("sync", self.id, direction.name)
        else:  # a range: what a host relayout syncs
            _log("sync", self.id, direction.name, size, offset)


FAKE_AIECC = """\
import hashlib, sys
from pathlib import Path
if sys.argv[1:2] == ["--version"]:
    print("aiecc 0.0 (fake)")
    sys.exit(0)
mlir = Path(sys.argv[-1]).read_bytes()
if not list(Path(".").glob("*.o")):
    sys.exit("no kernel object")
named = dict(a[2:].split("=", 1) for a in sys.argv[1:-1] if "=" in a)
digest = hashlib.sha256(mlir).digest()
if "--aie-generate-xclbin" in sys.argv:
    Path(named["xclbin-name"]).write_bytes(b"FAKE-XCLBIN\\n" + digest.hex().encode())
words = 4 + len(mlir) % 7  # a region-specific instruction count after the digest
tail = b"".join(i.to_bytes(4, "little") for i in range(words))
Path(named["npu-insts-name"]).write_bytes(digest + tail)
"""

FAKE_CLANG = """\
import sys
from pathlib import Path
if sys.argv[1:2] == ["--version"]:
    print("clang version 0.0 (fake peano)")
    sys.exit(0)
Path(sys.argv[sys.argv.index("-o") + 1]).write_bytes(b"obj")
"""


FAKE_PYTHON3 = """\
import sys
# the link step's module probe (python3 -c PROBE modules...): every module imports
sys.exit(0)
"""


def fake_toolchain(root: Path) -> dict[str, str]:
    """An environment whose Peano clang++, aiecc, python3 (the link step's module probe: every
    module imports), xclbinutil and bootgen are fakes."""

    def script(path: Path, body: str) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"#!{sys.executable}\n{body}")
        path.chmod(0o755)

    script(root / "peano" / "bin" / "clang++", FAKE_CLANG)
    script(root / "bin" / "aiecc.py", FAKE_AIECC)
    script(root / "bin" / "python3", FAKE_PYTHON3)
    for tool in ("xclbinutil", "bootgen"):
        script(root / "bin" / tool, "")
    return {"PATH": f"{root / 'bin'}:/usr/bin:/bin", "PEANO_INSTALL_DIR": str(root / "peano")}
