"""Measure each poot_math.h contract on the host, against an independent f64 reference.

Every function is called from C over an array (one extern function per op, built through
hostbuild) and compared with numpy or math in f64 on the same f32 inputs. Inputs reach the edges
of each domain: dense sweeps near zero, tiny and subnormal values, the domain limits, the
largest and smallest normal numbers, and random bit patterns across the whole range (a fixed
seed). Each test prints the worst error it found beside the bound.
"""

from __future__ import annotations

import ctypes
import math
import os
import re
import shutil
import stat
import subprocess
from pathlib import Path

import numpy as np
import pytest
from numpy.typing import NDArray
from poot_codegen.xdna import hostbuild
from poot_codegen.xdna.hostbuild import CSRC_DIR, build_library, load_library
from poot_engine.blob_cache import BlobCache, EntryStatus, clear, verify
from poot_ir.errors import CacheError, CompileFailed, ToolchainUnavailable

F32 = NDArray[np.float32]
F64 = NDArray[np.float64]

HEADER = CSRC_DIR / "poot_math.h"
FLT_MIN = float(np.finfo(np.float32).tiny)
FLT_MAX = float(np.finfo(np.float32).max)
N_RANDOM = 2**20

UNARY = ("expf", "logf", "tanhf", "erff", "sqrtf", "absf", "negf", "recipf")
BINARY = ("maxf", "minf", "copysignf")

TEST_SOURCE = "\n".join(
    [
        "#include <stdint.h>",
        '#include "poot_math.h"',
        *(
            f"extern void t_{op}(const float* in, float* out, int32_t n);\n"
            f"void t_{op}(const float* in, float* out, int32_t n) "
            f"{{ for (int32_t i = 0; i < n; i++) out[i] = poot_{op}(in[i]); }}"
            for op in UNARY
        ),
        *(
            f"extern void t_{op}(const float* a, const float* b, float* out, int32_t n);\n"
            f"void t_{op}(const float* a, const float* b, float* out, int32_t n) "
            f"{{ for (int32_t i = 0; i < n; i++) out[i] = poot_{op}(a[i], b[i]); }}"
            for op in BINARY
        ),
        "",
    ]
)


@pytest.fixture(scope="module")
def lib(tmp_path_factory: pytest.TempPathFactory) -> ctypes.CDLL:
    return load_library(TEST_SOURCE, BlobCache(tmp_path_factory.mktemp("poot_math")))


def call(lib: ctypes.CDLL, op: str, *args: F32) -> F32:
    """Run ``poot_<op>`` elementwise over ``args`` in C."""
    ins = [np.ascontiguousarray(a, dtype=np.float32) for a in args]
    out = np.empty_like(ins[0])
    fn = getattr(lib, f"t_{op}")
    fn.argtypes = [ctypes.c_void_p] * (len(ins) + 1) + [ctypes.c_int32]
    fn.restype = None
    fn(*(a.ctypes.data for a in ins), out.ctypes.data, out.size)
    return out


def f32(values: object) -> F32:
    return np.asarray(values, dtype=np.float32).ravel()


def random_bits(
    lo_exponent: int, hi_exponent: int, *, signed: bool = True, seed: int = 2026
) -> F32:
    """Random f32 bit patterns with the exponent field uniform in [lo, hi] (1..254 = normals)."""
    rng = np.random.default_rng(seed)
    mantissa = rng.integers(0, 1 << 23, N_RANDOM, dtype=np.uint32)
    exponent = rng.integers(lo_exponent, hi_exponent + 1, N_RANDOM, dtype=np.uint32)
    sign = rng.integers(0, 2, N_RANDOM, dtype=np.uint32) if signed else np.uint32(0)
    return ((sign << 31) | (exponent << 23) | mantissa).view(np.float32)


def tiny_values() -> F32:
    """Powers of two from the smallest subnormal up to 1, each with its neighbours."""
    powers = f32(np.ldexp(1.0, np.arange(-149, 1)))
    return np.concatenate(
        [powers, np.nextafter(powers, np.float32(0)), np.nextafter(powers, np.float32(1))]
    )


def symmetric(x: F32) -> F32:
    return np.concatenate([x, -x])


def check_mixed_bound(name: str, x: F32, y: F32, ref: F64) -> float:
    """Assert |y - ref| <= 2e-6 + 1e-5 |ref| everywhere; print the worst case."""
    err = np.abs(y.astype(np.float64) - ref)
    ratio = err / (2e-6 + 1e-5 * np.abs(ref))
    worst = int(np.argmax(ratio))
    print(
        f"\n{name}: worst |err| / (2e-6 + 1e-5 |ref|) = {ratio[worst]:.4f} (bound 1) at x = "
        f"{x[worst]!r}: |err| = {err[worst]:.3g}; worst |err| overall {err.max():.3g}, "
        f"worst relative {np.max(err / np.maximum(np.abs(ref), FLT_MIN)):.3g}"
    )
    assert ratio[worst] <= 1.0, f"{name} at x = {x[worst]!r}: {y[worst]!r} vs {ref[worst]!r}"
    return float(ratio[worst])


def bits(x: F32) -> NDArray[np.uint32]:
    return x.view(np.uint32)


# exp


def test_expf_contract_over_its_domain(lib: ctypes.CDLL) -> None:
    everything = random_bits(1, 254)
    x = np.concatenate(
        [
            f32(np.linspace(-87.0, 88.0, N_RANDOM)),
            everything[np.abs(everything) <= 88.0],
            symmetric(tiny_values()),
            f32([-87.0, 88.0, np.nextafter(np.float32(88.0), np.float32(0))]),
            f32(np.arange(-125, 128) * math.log(2) + 0.5 * math.log(2)),  # where k rounds
        ]
    )
    x = x[(x >= -87.0) & (x <= 88.0)]
    check_mixed_bound("expf", x, call(lib, "expf", x), np.exp(x.astype(np.float64)))


def test_expf_contract_below_minus_87(lib: ctypes.CDLL) -> None:
    # the domain goes on down to -inf: the exact value there is below FLT_MIN, so the bound's
    # absolute part holds whatever the kernel returns in [0, FLT_MIN]; it returns a normal
    # result or exactly +0 (never a subnormal, which every later step's result guard flags)
    everything = random_bits(1, 254)
    x = np.concatenate(
        [
            f32(np.linspace(-110.0, -87.0, N_RANDOM)),
            everything[everything < -87.0],
            f32([-87.0, -87.3, -87.33654, -87.33655, -87.5, -88.0, -103.97, -104.0, -1e30]),
            f32([-FLT_MAX, -np.inf]),
        ]
    )
    y = call(lib, "expf", x)
    check_mixed_bound("expf", x, y, np.exp(x.astype(np.float64)))
    assert np.all((y == 0.0) | (y >= FLT_MIN)) and not np.any(np.signbit(y))
    flushed = x[y == 0.0]
    assert flushed.min() == -np.inf and flushed.max() < -87.3  # only where exp(x) < FLT_MIN
    assert call(lib, "expf", f32([-np.inf]))[0] == 0.0


def test_expf_saturates_beyond_88(lib: ctypes.CDLL) -> None:
    big = f32([88.0, 88.5, 100.0, 1e10, FLT_MAX, np.inf])
    y_big = call(lib, "expf", big)
    assert np.all(y_big == y_big[0]) and np.isfinite(y_big[0])
    assert np.all(call(lib, "expf", -big) == 0.0)  # flushed: exp(-88) is subnormal
    print(f"\nexpf: exp(100) = exp(88) = {y_big[2]!r}")
    assert np.isnan(call(lib, "expf", f32([np.nan]))[0])


# log


def test_logf_contract_over_positive_normals(lib: ctypes.CDLL) -> None:
    one = np.float32(1.0)
    near_one = np.nextafter(one, f32(np.full(64, np.inf)))
    x = np.concatenate(
        [
            random_bits(1, 254, signed=False),
            f32(np.linspace(0.5, 2.0, 200_001)),
            f32(1.0 + np.linspace(-1e-3, 1e-3, 20_001)),
            f32([FLT_MIN, FLT_MAX, 1.0, np.nextafter(one, np.float32(0)), near_one[0]]),
            f32(np.ldexp(1.0, np.arange(-126, 128))),
            f32(np.ldexp(math.sqrt(2.0), np.arange(-126, 127))),  # where m is renormalized
        ]
    )
    check_mixed_bound("logf", x, call(lib, "logf", x), np.log(x.astype(np.float64)))


def test_logf_special_values(lib: ctypes.CDLL) -> None:
    y = call(lib, "logf", f32([0.0, np.inf, -1.0, np.nan]))
    assert y[0] == -np.inf and y[1] == np.inf and np.isnan(y[2]) and np.isnan(y[3])


# tanh and erf


def odd_sweep() -> F32:
    return np.concatenate(
        [
            random_bits(0, 254),
            symmetric(tiny_values()),
            f32(np.linspace(-12.0, 12.0, 400_001)),
            f32([0.0, -0.0, FLT_MAX, -FLT_MAX, FLT_MIN, -FLT_MIN]),
        ]
    )


def check_odd_and_saturating(lib: ctypes.CDLL, op: str, x: F32, y: F32, threshold: float) -> None:
    assert np.array_equal(bits(call(lib, op, -x)), bits(-y)), f"{op} is not exactly odd"
    big = f32([threshold, 2 * threshold, 1e10, FLT_MAX, np.inf])
    assert np.all(call(lib, op, big) == 1.0) and np.all(call(lib, op, -big) == -1.0)
    saturated = np.abs(x) >= threshold
    assert np.all(np.abs(y[saturated]) == 1.0)
    assert np.all(np.abs(y) <= 1.0)
    zeros = call(lib, op, f32([0.0, -0.0]))
    assert np.array_equal(bits(zeros), bits(f32([0.0, -0.0])))


def test_tanhf_contract_over_every_finite_input(lib: ctypes.CDLL) -> None:
    x = odd_sweep()
    y = call(lib, "tanhf", x)
    check_mixed_bound("tanhf", x, y, np.tanh(x.astype(np.float64)))
    check_odd_and_saturating(lib, "tanhf", x, y, 9.1)


def test_erff_contract_over_every_finite_input(lib: ctypes.CDLL) -> None:
    x = odd_sweep()
    y = call(lib, "erff", x)
    ref = np.array([math.erf(v) for v in x.tolist()], dtype=np.float64)
    check_mixed_bound("erff", x, y, ref)
    check_odd_and_saturating(lib, "erff", x, y, 4.0)


# sqrt


def test_sqrtf_relative_error_over_positive_normals(lib: ctypes.CDLL) -> None:
    x = np.concatenate(
        [
            random_bits(1, 254, signed=False),
            f32(np.linspace(0.25, 4.0, 200_001)),
            f32([FLT_MIN, FLT_MAX, np.nextafter(np.float32(FLT_MIN), np.float32(1))]),
            f32(np.ldexp(1.0, np.arange(-126, 128))),
        ]
    )
    y = call(lib, "sqrtf", x)
    ref = np.sqrt(x.astype(np.float64))
    rel = np.abs(y.astype(np.float64) - ref) / ref
    worst = int(np.argmax(rel))
    print(f"\nsqrtf: worst relative error {rel[worst]:.3g} (bound 4e-7) at x = {x[worst]!r}")
    assert rel[worst] <= 4e-7


def test_sqrtf_exact_on_perfect_squares(lib: ctypes.CDLL) -> None:
    roots = f32(np.arange(1, 4097))
    scaled = np.concatenate([roots * f32(np.ldexp(1.0, e)) for e in range(-50, 51, 10)])
    assert np.array_equal(call(lib, "sqrtf", scaled * scaled), scaled)
    powers = f32(np.ldexp(1.0, np.arange(-126, 128, 2)))
    assert np.array_equal(call(lib, "sqrtf", powers), f32(np.ldexp(1.0, np.arange(-63, 64))))


def test_sqrtf_special_values(lib: ctypes.CDLL) -> None:
    y = call(lib, "sqrtf", f32([0.0, -0.0, np.inf, -1.0, np.nan]))
    assert np.array_equal(bits(y[:2]), bits(f32([0.0, -0.0])))
    assert y[2] == np.inf and np.isnan(y[3]) and np.isnan(y[4])


# helpers: exact


def test_helpers_are_exact(lib: ctypes.CDLL) -> None:
    a = random_bits(0, 255, seed=1)  # every bit pattern class, NaN and infinities included
    b = random_bits(0, 255, seed=2)
    assert np.array_equal(bits(call(lib, "absf", a)), bits(a) & np.uint32(0x7FFFFFFF))
    assert np.array_equal(bits(call(lib, "negf", a)), bits(a) ^ np.uint32(0x80000000))
    assert np.array_equal(bits(call(lib, "copysignf", a, b)), bits(np.copysign(a, b)))
    ordered = ~(np.isnan(a) | np.isnan(b))
    a, b = a[ordered], b[ordered]
    assert np.array_equal(call(lib, "maxf", a, b), np.maximum(a, b))
    assert np.array_equal(call(lib, "minf", a, b), np.minimum(a, b))
    normal = random_bits(2, 252)
    with np.errstate(over="ignore"):
        assert np.array_equal(bits(call(lib, "recipf", normal)), bits(np.float32(1.0) / normal))


# the header itself


def code_of_header() -> str:
    """The header with its comments removed."""
    text = HEADER.read_text()
    return re.sub(r"/\*.*?\*/|//[^\n]*", " ", text, flags=re.DOTALL)


def test_header_has_no_f64_and_no_unsuffixed_float_literal() -> None:
    code = code_of_header()
    assert not re.search(r"\bdouble\b", code)
    assert not re.search(r"#\s*include\s*<math\.h>", code)
    libm = r"(?<![\w.])(?:exp|log|sqrt|tanh|erf|pow|fabs|floor|ldexp|frexp|copysign)f?\s*\("
    assert not re.search(libm, code)
    # C pp-numbers; a float literal has a '.' or a decimal exponent and must end in f.
    numbers = re.findall(r"(?<![\w.])\.?\d(?:[eEpP][+-]|[\w.])*", code)
    floats = [n for n in numbers if not n.lower().startswith("0x") and re.search(r"[.eE]", n)]
    assert floats, "the pattern found no float literals at all"
    unsuffixed = [n for n in floats if not n.endswith(("f", "F"))]
    assert not unsuffixed, f"float literals without the f suffix: {unsuffixed}"


@pytest.mark.parametrize(
    ("compiler", "flags"),
    [
        ("cc", ["-x", "c", "-std=c99", "-pedantic"]),
        ("c++", ["-x", "c++", "-std=c++20", "-pedantic"]),
    ],
)
def test_header_compiles_as_c99_and_cxx20_without_f64_promotion(
    compiler: str, flags: list[str]
) -> None:
    exe = shutil.which(compiler)
    if exe is None:
        pytest.skip(f"{compiler} unavailable")
    warnings = ["-Wall", "-Wextra", "-Wdouble-promotion", "-Wfloat-conversion", "-Werror"]
    done = subprocess.run(
        [exe, *flags, *warnings, "-fsyntax-only", str(HEADER)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr


# hostbuild


@pytest.fixture
def counting_cc(tmp_path: Path) -> tuple[str, Path]:
    """A compiler wrapper that logs each compile (a -shared invocation) and runs the real cc."""
    real = shutil.which("cc") or shutil.which("gcc")
    if real is None:
        pytest.skip("no host C compiler")
    log = tmp_path / "compiles.log"
    log.touch()
    wrapper = tmp_path / "bin" / "counting-cc"
    wrapper.parent.mkdir()
    wrapper.write_text(
        f'#!/bin/sh\ncase " $* " in *" -shared "*) echo x >> "{log}" ;; esac\nexec "{real}" "$@"\n'
    )
    wrapper.chmod(0o755)
    return str(wrapper), log


def compiles(log: Path) -> int:
    return len(log.read_text().splitlines())


SMALL = '#include "poot_math.h"\nfloat f(float x) { return poot_expf(x); }\n'


def _f(lib: ctypes.CDLL) -> float:
    f = lib.f
    f.argtypes, f.restype = [ctypes.c_float], ctypes.c_float
    return float(f(0.0))


def test_cache_hit_does_not_recompile(tmp_path: Path, counting_cc: tuple[str, Path]) -> None:
    cache = BlobCache(tmp_path / "cache")
    cc, log = counting_cc
    first = build_library(SMALL, cache, compiler=cc)
    second = build_library(SMALL, cache, compiler=cc)
    assert first == second and compiles(log) == 1
    assert _f(load_library(SMALL, cache, compiler=cc)) == 1.0 and compiles(log) == 1
    # one blob-cache entry, owner-only; the private copy dlopen read is gone
    names = sorted(p.name for p in cache.root.iterdir())
    assert names == sorted([first + ".blob", "CACHEDIR.TAG"])
    assert stat.S_IMODE(cache.path(first).stat().st_mode) == 0o600
    # poot cache ls|verify|clear cover it
    (entry,) = verify(cache.root)
    assert entry.key == first and entry.status is EntryStatus.OK
    assert dict(entry.meta)["part"] == "host kernel library"
    assert dict(entry.meta)["compiler"] == cc
    assert clear(cache.root).removed == (cache.path(first),)


def test_changed_source_or_header_recompiles(
    tmp_path: Path, counting_cc: tuple[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = BlobCache(tmp_path / "cache")
    cc, log = counting_cc
    first = build_library(SMALL, cache, compiler=cc)
    second = build_library(SMALL.replace("expf", "logf"), cache, compiler=cc)
    assert first != second and compiles(log) == 2
    headers = tmp_path / "csrc"
    shutil.copytree(CSRC_DIR, headers)
    monkeypatch.setattr(hostbuild, "CSRC_DIR", headers)
    assert build_library(SMALL, cache, compiler=cc) == first  # same contents
    (headers / "poot_math.h").write_text(HEADER.read_text() + "\n/* changed */\n")
    assert build_library(SMALL, cache, compiler=cc) != first
    assert compiles(log) == 3
    # the compiler's identity is part of the key: another path to the same compiler
    other = tmp_path / "bin" / "other-cc"
    shutil.copy(cc, other)
    assert build_library(SMALL, cache, compiler=str(other)) != first


def _edit(path: Path, at: int, new: bytes) -> None:
    data = bytearray(path.read_bytes())
    data[at : at + len(new)] = new
    path.write_bytes(bytes(data))


DAMAGE = {
    # four bytes of the library changed: the digest catches it (this once gave wrong results)
    "four bytes": lambda p: _edit(p, p.stat().st_size // 2, b"\xde\xad\xbe\xef"),
    # a truncated library once gave SIGBUS on every later run
    "truncated": lambda p: p.write_bytes(p.read_bytes()[: p.stat().st_size // 3]),
    "empty": lambda p: p.write_bytes(b""),
    "group readable": lambda p: p.chmod(0o640),
}


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_a_damaged_entry_is_never_loaded_but_rebuilt_and_replaced(
    tmp_path: Path, counting_cc: tuple[str, Path], damage: str
) -> None:
    cache = BlobCache(tmp_path / "cache")
    cc, log = counting_cc
    key = build_library(SMALL, cache, compiler=cc)
    DAMAGE[damage](cache.path(key))
    assert verify(cache.root)[0].status is not EntryStatus.OK
    assert _f(load_library(SMALL, cache, compiler=cc)) == 1.0 and compiles(log) == 2
    assert verify(cache.root)[0].status is EntryStatus.OK  # replaced


def test_a_verified_entry_that_does_not_load_is_rebuilt(
    tmp_path: Path, counting_cc: tuple[str, Path]
) -> None:
    cache = BlobCache(tmp_path / "cache")
    cc, log = counting_cc
    key = build_library(SMALL, cache, compiler=cc)
    cache.put(key, b"not a shared library")  # a valid entry of the wrong bytes
    assert _f(load_library(SMALL, cache, compiler=cc)) == 1.0 and compiles(log) == 2
    assert cache.get(key).blob != b"not a shared library"


def test_syntax_error_raises_compile_failed_with_the_compiler_log(tmp_path: Path) -> None:
    cache = BlobCache(tmp_path / "cache")
    with pytest.raises(CompileFailed) as caught:
        build_library("float f(float x) { return x +; }\n", cache)
    assert "error" in caught.value.log and "kernel.c" in caught.value.log
    assert [p.name for p in cache.root.iterdir()] == ["CACHEDIR.TAG"]  # nothing published


def test_missing_compiler_raises_toolchain_unavailable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = BlobCache(tmp_path / "cache")
    missing = str(tmp_path / "no-such-cc")
    with pytest.raises(ToolchainUnavailable) as caught:
        build_library(SMALL, cache, compiler=missing)
    assert caught.value.tool == missing
    (tmp_path / "empty").mkdir()
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(ToolchainUnavailable) as caught:
        build_library(SMALL, cache)
    assert caught.value.tool == "cc" and "gcc" in str(caught.value)


@pytest.mark.skipif(os.geteuid() != 0, reason="planting a file as another uid needs root")
def test_a_library_planted_by_another_user_is_never_loaded(
    tmp_path: Path, counting_cc: tuple[str, Path]
) -> None:
    """A valid entry of another library (f returns 2), published under this source's key by
    someone else: another user's entry is never loaded; the real library is rebuilt."""
    cache = BlobCache(tmp_path / "cache")
    cc, log = counting_cc
    key = build_library(SMALL, cache, compiler=cc)
    other = build_library("float f(float x) { return x + 2.0f; }\n", cache, compiler=cc)
    planted = cache.get(other).blob
    assert planted is not None
    cache.put(key, planted)
    os.chown(cache.path(key), 12345, 12345)
    assert _f(load_library(SMALL, cache, compiler=cc)) == 1.0 and compiles(log) == 3
    assert cache.path(key).stat().st_uid == os.geteuid()  # replaced by ours
    # and a cache directory another user owns is refused outright
    os.chown(cache.root, 12345, 12345)
    with pytest.raises(CacheError, match="owned by uid 12345"):
        BlobCache(cache.root)
