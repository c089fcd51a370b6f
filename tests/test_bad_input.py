"""Every bad input is a typed error: on the command line exit status 2 and one line on stderr
naming what is wrong; through the API a ``PootError``. Each case below once printed a traceback
or raised a built-in exception. A hypothesis test then drives the public API and the argument
parser with ill-typed and out-of-range arguments."""

from __future__ import annotations

import contextlib
import math
import pickle
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from cli_errors import check_error_lines
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from poot_engine import CpuDevice, Engine
from poot_ir import Builder, DType, PootError, Program, format_program, parse_program
from poot_ir.budget import BudgetExceeded, set_budget
from poot_planner import plan

from poot.cli import EXAMPLES, main

LAYERNORM = str(EXAMPLES / "layernorm.poot")


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    """Run the command line; it must exit 2 with exactly one line on stderr. Returns it."""
    try:
        code = main(list(argv))
    except SystemExit as done:  # a usage error from the argument parser
        code = int(done.code or 0)
    err = capsys.readouterr().err
    assert code == 2, (argv, code, err)
    lines = err.strip("\n").split("\n")
    assert len(lines) == 1 and lines[0], (argv, err)
    check_error_lines(lines[0])
    return lines[0]


def _program_file(tmp_path: Path) -> Path:
    path = tmp_path / "p.poot"
    path.write_text("program p\n  slot x %0: f32[2]\n  %1: f32[2] = neg %0\n  output y = %1\nend\n")
    return path


# -- the command line ---------------------------------------------------------------------------


def test_a_file_that_is_not_utf8(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    bad = tmp_path / "latin1.poot"
    bad.write_bytes("program caf\xe9\nend\n".encode("latin-1"))
    for command in ("plan", "run"):
        assert "not UTF-8" in _cli(capsys, command, str(bad))


@pytest.mark.parametrize("quoted", ['program "p\\udc80"', 'program p\n  slot "x\\udc80"'])
def test_a_name_with_a_lone_surrogate(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, quoted: str
) -> None:
    text = f"{quoted} %0: f32[2]\n  output y = %0\nend\n" if "slot" in quoted else quoted + "\n"
    if "slot" not in quoted:
        text += "  slot x %0: f32[2]\n  output y = %0\nend\n"
    path = tmp_path / "s.poot"
    path.write_text(text)
    line = _cli(capsys, "run", str(path), "--target", "intel-npu4", "--device", "vpu-cpu")
    assert "lone surrogate" in line


@pytest.mark.parametrize("steps", ["0", "-1", "x", "1.5"])
def test_steps_must_be_a_positive_count(capsys: pytest.CaptureFixture[str], steps: str) -> None:
    assert "--steps" in _cli(capsys, "run", LAYERNORM, "--steps", steps)


def test_too_many_steps_is_refused_by_the_budget(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    line = _cli(capsys, "--cache-dir", str(tmp_path), "run", LAYERNORM, "--steps", str(10**20))
    assert "BudgetExceeded" in line and str(10**20) in line


def test_large_dims_are_refused_by_the_budget(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    big = tmp_path / "big.poot"
    big.write_text("program big\n  slot x %0: f32[7,1000000000]\n  output y = %0\nend\n")
    line = _cli(capsys, "--memory-budget", "1G", "--cache-dir", str(tmp_path), "run", str(big))
    assert "BudgetExceeded" in line and "1.0 GiB" in line
    huge = tmp_path / "huge.poot"
    huge.write_text("program huge\n  slot x %0: f32[4611686018427387904]\n  output y = %0\nend\n")
    assert "no target holds" in _cli(capsys, "plan", str(huge))


@pytest.mark.parametrize("budget", ["", "0", "-3", "lots"])
def test_a_bad_memory_budget(capsys: pytest.CaptureFixture[str], budget: str) -> None:
    assert "--memory-budget" in _cli(capsys, "--memory-budget", budget, "plan", LAYERNORM)


def _inputs_cases(tmp_path: Path) -> dict[str, Path]:
    cases = {"missing": tmp_path / "missing.npz"}
    text = tmp_path / "text.npz"
    text.write_text("not numpy")
    cases["not an npz"] = text
    pickled = tmp_path / "pickled.npz"
    pickled.write_bytes(pickle.dumps({"x": [1.0, 2.0]}))
    cases["pickled"] = pickled
    objects = tmp_path / "objects.npz"
    np.savez(objects, x=np.array([1.0, None], dtype=object))
    cases["object array"] = objects
    extra = tmp_path / "extra.npz"
    np.savez(extra, x=np.zeros(2, np.float32), z=np.zeros(2, np.float32))
    cases["extra array"] = extra
    npy = tmp_path / "one.npy"
    np.save(npy, np.zeros(2, np.float32))
    cases["npy"] = npy
    return cases


@pytest.mark.parametrize(
    "case", ["missing", "not an npz", "pickled", "object array", "extra array", "npy"]
)
def test_bad_inputs_files(capsys: pytest.CaptureFixture[str], tmp_path: Path, case: str) -> None:
    program = _program_file(tmp_path)
    path = _inputs_cases(tmp_path)[case]
    line = _cli(
        capsys, "--cache-dir", str(tmp_path / "c"), "run", str(program), "--inputs", str(path)
    )
    assert "inputs" in line and path.name in line
    if case == "extra array":
        assert "'z'" in line


@pytest.mark.parametrize(
    ("value", "why"),
    [
        (np.zeros(2, np.int32), "dtype int32"),
        (np.zeros(2, ">f4"), "dtype >f4"),
        (np.zeros(3, np.float32), "shape (3,)"),
        (np.float32(1), "shape ()"),
        (None, "missing"),
    ],
)
def test_inputs_of_the_wrong_dtype_or_shape(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, value: object, why: str
) -> None:
    path = tmp_path / "in.npz"
    np.savez(path, **({} if value is None else {"x": value}))
    argv = ["--cache-dir", str(tmp_path / "c"), "run", str(_program_file(tmp_path))]
    line = _cli(capsys, *argv, "--inputs", str(path))
    assert "argument 'x'" in line and why in line


def test_import_output_into_a_directory_or_an_unwritable_path(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    from onnx import TensorProto, helper, save

    graph = helper.make_graph(
        [helper.make_node("Neg", ["x"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
    )
    model = tmp_path / "m.onnx"
    save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(model))
    a_file = tmp_path / "a_file"
    a_file.write_text("")
    for out in (tmp_path, a_file / "under_a_file.poot"):
        assert "cannot write" in _cli(capsys, "import", str(model), "-o", str(out))


def _fill_model(path: Path, n: int) -> Path:
    """y = x + ConstantOfShape([n]) (f32): folding it holds 4n bytes."""
    from onnx import TensorProto, helper, numpy_helper, save

    graph = helper.make_graph(
        [
            helper.make_node("ConstantOfShape", ["s"], ["c"], name="fill"),
            helper.make_node("Add", ["x", "c"], ["y"]),
        ],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.asarray([n], np.int64), "s")],
    )
    save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), str(path))
    return path


def test_import_refuses_a_fold_over_the_budget(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    huge = _fill_model(tmp_path / "huge.onnx", 10**12)
    line = _cli(capsys, "import", str(huge), "-o", str(tmp_path / "huge.poot"))
    assert "BudgetExceeded" in line and "'fill'" in line and str(4 * 10**12) in line
    modest = _fill_model(tmp_path / "modest.onnx", 1000)
    out = str(tmp_path / "modest.poot")
    line = _cli(capsys, "--memory-budget", "3999", "import", str(modest), "-o", out)
    assert "'fill'" in line and "(4000 bytes)" in line and "(3999 bytes" in line
    assert main(["import", str(modest), "-o", out]) == 0  # the default budget admits it
    capsys.readouterr()


@pytest.mark.parametrize("action", ["ls", "verify", "clear"])
def test_cache_commands_on_a_file_or_a_symlink(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, action: str
) -> None:
    """A file where the cache directory should be, a symlink to a directory, and a dangling
    one: each refused in one line, nothing followed or changed."""
    afile = tmp_path / "afile"
    afile.write_text("mine")
    real = tmp_path / "real"
    real.mkdir()
    (real / "x.blob").write_text("mine too")
    (tmp_path / "link").symlink_to(real)
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    for root, why in (("afile", "not a directory"), ("link", "symlink"), ("dangling", "symlink")):
        line = _cli(capsys, "--cache-dir", str(tmp_path / root), "cache", action)
        assert "CacheError" in line and why in line, line
    assert afile.read_text() == "mine" and (real / "x.blob").read_text() == "mine too"
    assert sorted(p.name for p in real.iterdir()) == ["x.blob"]
    assert not (tmp_path / "nowhere").exists()


# -- the API ------------------------------------------------------------------------------------


def _neg_program() -> Program:
    b = Builder("p")
    x = b.slot("x", DType.F32, (2,))
    b.output("y", b.neg(x))
    return b.build()


def _engine(tmp_path: Path) -> tuple[Engine, object]:
    engine = Engine(CpuDevice(), cache_dir=tmp_path)
    return engine, engine.add_entry(_neg_program())


def test_api_cases_are_typed(tmp_path: Path) -> None:
    engine, entry = _engine(tmp_path)
    x = np.zeros(2, np.float32)
    cases: list[Callable[[], object]] = [
        lambda: engine.step(entry, [x]),  # type: ignore[arg-type]
        lambda: engine.step(entry, None),  # type: ignore[arg-type]
        lambda: engine.load_weights([x]),  # type: ignore[arg-type]
        lambda: engine.add_entry("text"),  # type: ignore[arg-type]
        lambda: plan("text", "cpu"),  # type: ignore[arg-type]
        lambda: parse_program(b"program p\nend\n"),  # type: ignore[arg-type]
        lambda: parse_program(None),  # type: ignore[arg-type]
        lambda: Engine(CpuDevice(), cache_dir=tmp_path, deadline_s="abc"),  # type: ignore[arg-type]
        lambda: Builder("q").literal(math.nan, DType.I32),
        lambda: Builder("q").literal(2**40, DType.I32),
        lambda: Builder("q").slot("x", "f32", (2,)),  # type: ignore[arg-type]
        lambda: Builder("q\udc80"),
        lambda: Builder("q").slot("x\udc80", DType.F32, (2,)),
    ]
    for i, case in enumerate(cases):
        with pytest.raises(PootError):
            case()
        assert i >= 0
    engine.close()


# -- fuzzing ------------------------------------------------------------------------------------

_JUNK = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=6),
    st.binary(max_size=6),
    st.lists(st.integers(min_value=-3, max_value=2**64), max_size=3),
    st.tuples(st.integers(min_value=-(2**63), max_value=2**63)),
    st.just(DType.F32),
    st.just(DType.I32),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)
_FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))


def _typed(call: Callable[[], object]) -> None:
    with contextlib.suppress(PootError):
        call()


@_FUZZ
@given(method=st.sampled_from(["slot", "weight", "state"]), args=st.tuples(_JUNK, _JUNK, _JUNK))
def test_fuzz_builder_arguments(method: str, args: tuple[object, object, object]) -> None:
    b = Builder("f")
    _typed(lambda: getattr(b, method)(*args))
    _typed(b.build)


@_FUZZ
@given(
    method=st.sampled_from(
        ["add", "mul", "reduce_sum", "transpose", "reshape", "gather", "iota", "literal", "select"]
    ),
    args=st.lists(_JUNK, max_size=3),
)
def test_fuzz_builder_operations(method: str, args: list[object]) -> None:
    b = Builder("f")
    x = b.slot("x", DType.F32, (2, 3))
    _typed(lambda: getattr(b, method)(x, *args))
    _typed(lambda: getattr(b, method)(*args))


@_FUZZ
@given(text=_JUNK, target=_JUNK)
def test_fuzz_parse_and_plan(text: object, target: object) -> None:
    _typed(lambda: parse_program(text))  # type: ignore[arg-type]
    _typed(lambda: plan(text, target))  # type: ignore[arg-type]
    b = Builder("p")
    b.output("y", b.neg(b.slot("x", DType.F32, (2,))))
    _typed(lambda: plan(b.build(), target))  # type: ignore[arg-type]


def _onnx_bytes() -> bytes:
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Neg", ["x"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    return bytes(model.SerializeToString())


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(model=_JUNK, shapes=_JUNK, constants=_JUNK, n=_JUNK)
def test_fuzz_import_model(model: object, shapes: object, constants: object, n: object) -> None:
    """``import_model`` and ``check_model`` with ill-typed and out-of-range arguments: a junk
    model (a str is a path that does not exist), junk ``shapes=``/``constants=``, and a valid
    model whose dynamic dim is bound to junk."""
    import onnx
    from poot_onnx import check_model, import_model

    good = onnx.load_model_from_string(_ONNX)
    _typed(lambda: import_model(model))  # type: ignore[arg-type]
    _typed(lambda: check_model(model))  # type: ignore[arg-type]
    _typed(lambda: import_model(good, shapes=shapes))  # type: ignore[arg-type]
    _typed(lambda: import_model(good, constants=constants))  # type: ignore[arg-type]
    _typed(lambda: import_model(good, shapes={"n": n}))  # type: ignore[dict-item]
    _typed(lambda: import_model(good, shapes={"x": n}))  # type: ignore[dict-item]
    _typed(lambda: import_model(good, constants={"x": n}))  # type: ignore[dict-item]
    _typed(lambda: import_model(good, name=n))  # type: ignore[arg-type]


_ONNX = _onnx_bytes()


@pytest.fixture(scope="module")
def fuzz_engine(tmp_path_factory: pytest.TempPathFactory) -> tuple[Engine, object]:
    return _engine(tmp_path_factory.mktemp("fuzz_engine"))


@_FUZZ
@given(inputs=_JUNK, deadline=_JUNK, weights=_JUNK, x=_JUNK)
def test_fuzz_engine_arguments(
    fuzz_engine: tuple[Engine, object], inputs: object, deadline: object, weights: object, x: object
) -> None:
    engine, entry = fuzz_engine
    _typed(lambda: engine.step(entry, inputs))  # type: ignore[arg-type]
    _typed(lambda: engine.step(entry, {"x": x}))  # type: ignore[dict-item]
    _typed(lambda: engine.load_weights(weights))  # type: ignore[arg-type]
    _typed(lambda: engine.add_entry(inputs))  # type: ignore[arg-type]
    _typed(lambda: Engine(CpuDevice(), cache_dir=engine.cache.root, deadline_s=deadline))  # type: ignore[arg-type]
    _typed(lambda: engine.add_entry(_neg_program(), weights))  # type: ignore[arg-type]
    _typed(lambda: engine.remove_entry(inputs))  # type: ignore[arg-type]
    _typed(lambda: engine.reset_state(x))  # type: ignore[arg-type]
    _typed(lambda: Engine(x))  # type: ignore[arg-type]
    if not isinstance(x, str):  # a str is a valid (relative) directory name: it would be made
        _typed(lambda: Engine(CpuDevice(), cache_dir=x))  # type: ignore[arg-type]


_WORDS = st.sampled_from(
    ["run", "plan", "cache", "ls", "clear", "--steps", "--target", "--device", "--inputs",
     "--cache-dir", "--memory-budget", "-o", "import", "devices", "--require", "0", "-1",
     "1e99", "", "\x00", "xdna2", "cpu", LAYERNORM, "/", "/dev/null", "--bad"]
)  # fmt: skip


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(argv=st.lists(_WORDS, max_size=5))
def test_fuzz_the_argument_parser(
    capsys: pytest.CaptureFixture[str], tmp_path_factory: pytest.TempPathFactory, argv: list[str]
) -> None:
    """Whatever the words, the command line exits 0, 1 or 2, and 2 with one line on stderr.
    A small memory budget keeps every run the fuzzer finds cheap."""
    cache = str(tmp_path_factory.getbasetemp() / "fuzz-cli-cache")
    set_budget(1 << 20)
    try:
        code = main(["--cache-dir", cache, *argv])
    except SystemExit as done:
        code = int(done.code or 0)
    finally:
        set_budget(None)
    err = capsys.readouterr().err
    assert code in (0, 1, 2), (argv, code)
    if code == 2:
        assert len(err.strip("\n").split("\n")) == 1, (argv, err)


def test_a_huge_intermediate_is_refused_before_the_oracle_runs(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Small inputs, a 64 GiB broadcast: refused by the budget, not numpy's MemoryError."""
    b = Builder("wide")
    x = b.slot("x", DType.F32, (1 << 17,))
    b.output("y", b.reduce_sum(b.broadcast_in_dim(x, (1 << 17, 1 << 17), (1,)), 0))
    path = tmp_path / "wide.poot"
    path.write_text(format_program(b.build()))
    line = _cli(capsys, "--memory-budget", "1G", "--cache-dir", str(tmp_path), "run", str(path))
    assert "BudgetExceeded" in line and "oracle" in line


def test_device_buffers_are_checked_against_the_budget(tmp_path: Path) -> None:
    """Weights and every buffer an entry allocates are refused over the budget, before numpy
    is asked; under it they work."""
    engine = Engine(CpuDevice(), cache_dir=tmp_path)
    set_budget(4000)
    try:
        with pytest.raises(BudgetExceeded, match=r"buffer of f32\[1001\] needs .*4004 bytes"):
            engine.load_weights({"w": np.zeros(1001, np.float32)})
        engine.load_weights({"w": np.zeros(1000, np.float32)})
        b = Builder("big_slot")
        b.output("y", b.neg(b.slot("x", DType.F32, (1001,))))
        with pytest.raises(BudgetExceeded):
            engine.add_entry(b.build())
    finally:
        set_budget(None)
        engine.close()
