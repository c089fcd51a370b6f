"""The memory budget and the static size limit, at their edges, on every entry point that
sizes an allocation from user input."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from poot_ir import Builder, DType, ParseError, parse_program, sample_inputs
from poot_ir import budget as budget_module
from poot_ir.budget import (
    MAX_DIM,
    MAX_TENSOR_BYTES,
    BudgetExceeded,
    DimsTooLarge,
    InvalidBudget,
    budget,
    check_alloc,
    check_array,
    check_dims,
    headroom,
    nbytes,
    parse_budget,
    set_budget,
)


@pytest.fixture
def small_budget() -> Iterator[int]:
    set_budget(10_000)
    try:
        yield 10_000
    finally:
        set_budget(None)


def _mem_available() -> int:
    with open("/proc/meminfo", encoding="ascii") as f:
        line = next(x for x in f if x.startswith("MemAvailable:"))
    return int(line.split()[1]) * 1024


def test_the_static_limit_at_its_edge() -> None:
    check_dims([MAX_TENSOR_BYTES // 4], "x", 4)  # exactly 1 TiB of f32 is allowed
    with pytest.raises(DimsTooLarge, match="x: shape"):
        check_dims([MAX_TENSOR_BYTES // 4 + 1], "x", 4)
    check_dims([MAX_DIM, 0], "empty", 4)  # no bytes, but the dim is at the limit
    with pytest.raises(DimsTooLarge):
        check_dims([MAX_DIM + 1, 0], "empty", 4)
    assert nbytes([2**62, 2**62], 4) == 2**126  # exact: never wraps


def test_huge_dims_are_refused_at_the_builder_and_the_parser() -> None:
    b = Builder("p")
    with pytest.raises(DimsTooLarge, match="argument 'x'"):
        b.slot("x", DType.F32, (2**62,))
    y = b.slot("y", DType.F32, (2**20,))
    with pytest.raises(DimsTooLarge, match="equation 0"):  # an intermediate result too
        b.broadcast_in_dim(y, (2**21, 2**20), (1,))
    text = "program p\n  slot x %0: f32[4611686018427387904]\n  output y = %0\nend\n"
    with pytest.raises(ParseError, match=r"line 2.*no target holds"):
        parse_program(text)


def test_default_budget_is_half_the_available_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    """Half of what the process can take: the available memory, or its own limit's room
    where that is less (the tests below); never more than half the available memory."""
    monkeypatch.delenv("POOT_MEMORY_BUDGET", raising=False)
    before, got, after = _mem_available(), budget(), _mem_available()
    assert got <= max(before, after) * 0.55
    own_limit = (
        budget_module._rlimit_room(budget_module.PROC_SELF),
        budget_module._cgroup_room(budget_module.PROC_SELF, budget_module.CGROUP_FS),
    )
    if own_limit == (None, None):  # no limit of its own on this machine
        assert min(before, after) * 0.45 <= got


@pytest.mark.parametrize(
    ("text", "value"), [("1", 1), ("2K", 2048), ("1.5m", 3 << 19), ("3G", 3 << 30)]
)
def test_the_budget_is_settable_by_environment(
    monkeypatch: pytest.MonkeyPatch, text: str, value: int
) -> None:
    monkeypatch.setenv("POOT_MEMORY_BUDGET", text)
    assert budget() == value


@pytest.mark.parametrize("text", ["", "abc", "0", "-1", "inf", "nan", "1X", "0.5"])
def test_a_bad_budget_is_a_typed_error(text: str) -> None:
    with pytest.raises(InvalidBudget):
        parse_budget(text) if text else set_budget(0)


@pytest.mark.parametrize("bad", [0, -5, 1.5, True, "1G", None])
def test_set_budget_checks_its_argument(bad: object) -> None:
    if bad is None:
        set_budget(None)  # back to the default
        return
    with pytest.raises(InvalidBudget):
        set_budget(bad)  # type: ignore[arg-type]


def test_an_allocation_over_the_budget_names_value_size_and_budget(small_budget: int) -> None:
    check_alloc("ten thousand bytes", 10_000)  # at the budget: allowed
    with pytest.raises(BudgetExceeded) as caught:
        check_alloc("the weights", 10_001)
    err = caught.value
    assert (err.what, err.size, err.limit) == ("the weights", 10_001, 10_000)
    assert "the weights" in str(err) and "10001 bytes" in str(err) and "10000 bytes" in str(err)
    with pytest.raises(BudgetExceeded):
        check_array("a folded constant", [2501], 4)


def test_sample_inputs_are_checked_before_anything_is_drawn(small_budget: int) -> None:
    b = Builder("big")
    x = b.slot("x", DType.F32, (1000,))  # 4000 bytes, drawn from 8000 bytes of float64
    b.output("y", b.neg(x))
    with pytest.raises(BudgetExceeded, match="sample inputs of program 'big'") as caught:
        sample_inputs(b.build())
    assert caught.value.size == 12_000
    b = Builder("fits")
    x = b.slot("x", DType.F32, (500,))
    b.output("y", b.neg(x))
    assert sample_inputs(b.build())["x"].shape == (500,)


UNDER_RLIMIT_AS = """
import resource
import sys
from poot_ir import Builder, DType, sample_inputs
from poot_ir.budget import BudgetExceeded, budget, headroom

with open("/proc/self/status") as f:
    vm = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmSize:"))
limit = vm + (1 << 30)  # one GiB of address space left
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
print(headroom() <= 1 << 30, budget() <= 1 << 29)
b = Builder("big")
b.output("y", b.neg(b.slot("x", DType.F32, (1 << 28,))))  # 1 GiB, sampled from 2 GiB of float64
try:
    sample_inputs(b.build())
except BudgetExceeded:
    print("BudgetExceeded")
except MemoryError:
    print("MemoryError")
"""


def test_the_default_budget_respects_the_address_space_limit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """issue 26: under a process limit (``RLIMIT_AS``) below the machine's available memory,
    an allocation past the limit raised numpy's ``MemoryError``: the budget read available
    memory only. In a subprocess: the limit stays there."""
    monkeypatch.delenv("POOT_MEMORY_BUDGET", raising=False)
    done = subprocess.run(
        [sys.executable, "-c", UNDER_RLIMIT_AS], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "True", "BudgetExceeded"]


@pytest.fixture
def available(monkeypatch: pytest.MonkeyPatch) -> int:
    """The machine's available memory, held still: the real one moves between two reads
    while other work runs, and the tests below compare two reads."""
    held = 64 * GIB
    monkeypatch.setattr(budget_module, "_available", lambda: held)
    return held


def _fake_cgroups(tmp_path: Path, membership: str, files: dict[str, str]) -> tuple[Path, Path]:
    proc, fs = tmp_path / "proc", tmp_path / "cgroup"
    proc.mkdir()
    (proc / "cgroup").write_text(membership)
    for name, text in files.items():
        (fs / name).parent.mkdir(parents=True, exist_ok=True)
        (fs / name).write_text(text)
    return proc, fs


GIB = 1 << 30


@pytest.mark.parametrize(
    ("membership", "files", "room"),
    [
        # v2: the cgroup's own memory.max is "max", its parent's is 3 GiB with 1 GiB used
        (
            "0::/user.slice/job\n",
            {
                "user.slice/job/memory.max": "max\n",
                "user.slice/job/memory.current": "123\n",
                "user.slice/memory.max": f"{3 * GIB}\n",
                "user.slice/memory.current": f"{GIB}\n",
            },
            2 * GIB,
        ),
        # v2, a container: the cgroup's path is "/" and its limit is at the mount's root
        ("0::/\n", {"memory.max": f"{GIB}\n", "memory.current": "0\n"}, GIB),
        # v1 (hybrid, as on this machine's kind): memory's own hierarchy, v1's "unlimited"
        (
            "4:memory:/process_api/abc\n0::/\n",
            {
                "memory/process_api/abc/memory.limit_in_bytes": "9223372036854771712\n",
                "memory/process_api/memory.limit_in_bytes": f"{GIB + 5}\n",
                "memory/process_api/memory.usage_in_bytes": "5\n",
                "memory.max": "max\n",
            },
            GIB,
        ),
    ],
    ids=["v2-parent", "v2-container", "v1"],
)
def test_the_default_budget_respects_the_cgroup_limit(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    available: int,
    membership: str,
    files: dict[str, str],
    room: int,
) -> None:
    proc, fs = _fake_cgroups(tmp_path, membership, files)
    assert headroom(proc, fs) == min(room, headroom(proc, tmp_path / "none"))
    monkeypatch.delenv("POOT_MEMORY_BUDGET", raising=False)
    monkeypatch.setattr(budget_module, "PROC_SELF", proc)
    monkeypatch.setattr(budget_module, "CGROUP_FS", fs)
    assert budget() <= room // 2
    with pytest.raises(BudgetExceeded):
        check_alloc("a buffer", room // 2 + 1)


def test_no_cgroup_limit_leaves_available_memory(tmp_path: Path, available: int) -> None:
    proc, fs = _fake_cgroups(tmp_path, "0::/a\n", {"a/memory.max": "max\n"})
    assert headroom(proc, fs) == headroom(proc, tmp_path / "none")
