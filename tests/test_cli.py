"""The ``poot`` command line, end to end through ``poot.cli.main``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from cli_errors import check_error_lines, is_public, public_errors
from poot_ir import parse_program
from poot_planner import feature_matrix, plan

from poot.cli import EXAMPLES, main

ROOT = Path(__file__).resolve().parents[1]


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    check_error_lines(out.err)
    return code, out.out, out.err


def test_every_example_parses_and_the_cpu_admits_it() -> None:
    examples = sorted(EXAMPLES.glob("*.poot"))
    assert len(examples) >= 8
    for path in examples:
        assert plan(parse_program(path.read_text()), "cpu").admitted, path.name


@pytest.mark.slow
def test_demo_runs_every_example_on_every_present_device(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, out, _ = _run(capsys, "--cache-dir", str(tmp_path), "demo")
    assert code == 0, out
    for path in EXAMPLES.glob("*.poot"):
        assert path.stem in out
    for device in ("cpu", "vpu-cpu", "xdna-host"):
        assert device in out
    assert "FAILED" not in out
    assert "refused" in out  # layernorm on xdna2, tanh on intel-npu4: typed refusals
    assert "Handoff: tiny-decoder" in out  # one prefill-to-decode handoff, checked


def test_plan_shows_rewrites_and_the_partition(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "g.poot"
    path.write_text(
        "program g\n  slot x %0: f32[4,8]\n  %1: f32[4,8] = erf %0\n"
        "  %2: i32[4,8] = convert %1 {dtype=i32}\n  output y = %2\nend\n"
    )
    code, out, _ = _run(capsys, "plan", str(path), "--target", "intel-npu4")
    assert code == 1
    flat = " ".join(out.replace("│", " ").split())
    assert "legalized: erf -> sign(x) m, m = 2/sqrt(pi) a (1 - a^2/3" in flat
    assert "bound abs 9.47e-08 + rel 0.00409 (equation 0: 71 equations)" in flat
    assert (
        "partitioned: 2 spans (1 device, 1 oracle); per step: 1 graphs, 1 compiles, 1 host round trips"
        in flat
    )


def test_plan_prints_regions_refusals_and_numerics(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, "plan", str(EXAMPLES / "rmsnorm_step.poot"), "--target", "xdna2")
    assert (
        code == 0 and "admitted" in out and "regions (1 hardware contexts; 1 before reuse)" in out
    )
    code, out, _ = _run(capsys, "plan", str(EXAMPLES / "layernorm.poot"), "--target", "xdna2")
    assert code == 1 and "MISSING_BOUND" in out and "subtraction" in out
    code, out, _ = _run(
        capsys, "plan", str(EXAMPLES / "rmsnorm_step.poot"), "--target", "intel-npu4", "--program"
    )
    narrowed = parse_program(out[out.index("program rmsnorm_step") :])
    assert code == 0 and narrowed.eqns[0].prim.value == "convert"  # the cast on entry


def test_plan_shows_the_derived_fp16_contract(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """A narrowed plan's contract is derived per step, not a figure: ``poot plan`` shows its
    form (how each equation lowers) and names a result it cannot bound with the equation."""
    code, out, _ = _run(
        capsys, "plan", str(EXAMPLES / "rmsnorm_step.poot"), "--target", "intel-npu4"
    )
    flat = " ".join(out.replace("│", " ").split())
    assert code == 0 and "NarrowStorage: derived per result on each step's inputs" in flat
    assert "rounded once x" in flat and "design figure normwise 0.00391" in flat
    path = tmp_path / "m.poot"
    path.write_text(
        "program m\n  slot x %0: f32[4]\n  %1: f32[4] = add %0 -1e9:f32\n"
        "  %2: f32[4] = max %1 %0\n  output y = %2\nend\n"
    )
    code, out, _ = _run(capsys, "plan", str(path), "--target", "intel-npu4")
    flat = " ".join(out.replace("│", " ").split())
    assert "unbounded: y: unbounded by equation 0 (add): a saturated mask sentinel" in flat, flat


def test_run_checks_against_the_oracle(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, out, _ = _run(
        capsys,
        "--cache-dir",
        str(tmp_path),
        "run",
        str(EXAMPLES / "row_stats.poot"),
        "--target",
        "xdna2",
        "--device",
        "xdna-host",
        "--steps",
        "2",
    )
    assert code == 0 and "ok" in out and "FAILED" not in out


def test_run_with_inputs_from_an_npz(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    x = rng.standard_normal((32, 48)).astype(np.float32)
    np.savez(tmp_path / "in.npz", x=x)
    code, out, _ = _run(
        capsys, "--cache-dir", str(tmp_path), "run", str(EXAMPLES / "row_stats.poot"),
        "--inputs", str(tmp_path / "in.npz"), "--steps", "1",
    )  # fmt: skip
    assert code == 0 and "ok" in out


def test_a_device_of_another_target_is_a_typed_error(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _run(
        capsys, "run", str(EXAMPLES / "row_stats.poot"), "--target", "xdna2", "--device", "vpu-cpu"
    )
    assert code == 2 and "runs target 'intel-npu4', not 'xdna2'" in err
    assert check_error_lines(err) == ["InputError"]


def test_the_target_defaults_to_the_devices(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """The README's first command: the device fixes the target, so --target is not needed
    (it defaulted to cpu, and the device of another target was refused)."""
    program = str(EXAMPLES / "rmsnorm_step.poot")
    cache = ["--cache-dir", str(tmp_path)]
    code, out, err = _run(capsys, *cache, "run", program, "--device", "xdna-host", "--steps", "1")
    assert code == 0 and "xdna2" in out and not err
    # still settable: the device's own target is accepted
    code, out, err = _run(
        capsys, *cache, "run", program, "--device", "xdna-host", "--target", "xdna2", "--steps", "1"
    )
    assert code == 0 and not err


def test_import_help_loads_no_engine_devices_or_planner() -> None:
    """`poot import` needs the ONNX importer, not the engine, the devices or the planner: its
    --help must not load them (each subcommand imports what it needs)."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "poot", "import", "--help"],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert done.returncode == 0 and "usage: poot import" in done.stdout
    # -X importtime: "import time: self [us] | cumulative | imported package" on stderr
    loaded = [line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines() if "|" in line]
    assert "poot.cli" in loaded
    heavy = [m for m in loaded if m.split(".")[0] in {"poot_engine", "poot_npu", "poot_planner"}]
    assert not heavy, heavy


def test_every_error_class_of_the_library_is_public() -> None:
    """The class an `error:` line names is a PootError subclass exported where it is defined:
    every one the library defines (after importing each of its modules that imports here)."""
    import importlib
    import pkgutil

    import poot_codegen
    import poot_engine
    import poot_ir
    import poot_npu
    import poot_onnx
    import poot_planner

    import poot

    for package in (poot, poot_codegen, poot_engine, poot_ir, poot_npu, poot_onnx, poot_planner):
        for m in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            if m.name.endswith(".__main__"):  # runs the command line
                continue
            try:
                importlib.import_module(m.name)
            except ImportError:  # an optional runtime (OpenVINO, XRT) not installed here
                continue
    errors = public_errors()
    assert {"InputError", "BudgetExceeded", "ParseError"} <= set(errors)
    private = sorted(f"{c.__module__}.{n}" for n, c in errors.items() if not is_public(c))
    assert not private, private


def test_the_error_tree_draws_every_error() -> None:
    """poot_ir.errors' docstring draws the tree: every class it exports is drawn, under its
    own base."""
    from poot_ir import errors

    lines = [line.strip() for line in (errors.__doc__ or "").splitlines()]
    drawn = {line.lstrip("│├└─ ").split()[0] for line in lines if line.lstrip("│├└─ ")[:1]}
    assert set(errors.__all__) <= drawn, set(errors.__all__) - drawn


def test_bad_files_are_typed_errors_naming_what_is_wrong(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, _, err = _run(capsys, "plan", str(tmp_path / "missing.poot"))
    assert code == 2 and "missing.poot" in err
    bad = tmp_path / "bad.poot"
    bad.write_text("program p\n  slot x %0: f33[2]\nend\n")
    code, _, err = _run(capsys, "plan", str(bad))
    assert code == 2 and "ParseError" in err and "line 2" in err


def test_features_prints_the_committed_matrix(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, "features")
    assert code == 0 and out == feature_matrix()
    assert out == (ROOT / "docs/features.md").read_text()


def test_devices_reports_stand_ins_and_missing_hardware(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, "devices")
    assert code == 0 and "xdna-host" in out and "vpu-cpu" in out
    code, out, _ = _run(capsys, "devices", "--require", "xdna")
    assert code == 1 and "hardware unavailable" in out


def test_cache_ls_verify_clear(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    cache = str(tmp_path / "cache")
    code, _, _ = _run(
        capsys, "--cache-dir", cache, "run", str(EXAMPLES / "embedding.poot"), "--steps", "1"
    )
    assert code == 0
    code, out, _ = _run(capsys, "--cache-dir", cache, "cache", "ls")
    assert code == 0 and "1 entries" in out
    code, out, _ = _run(capsys, "--cache-dir", cache, "cache", "verify")
    assert code == 0 and "ok" in out
    blob = next(Path(cache).glob("*.blob"))
    data = bytearray(blob.read_bytes())
    data[-1] ^= 0xFF
    blob.write_bytes(bytes(data))
    code, out, _ = _run(capsys, "--cache-dir", cache, "cache", "verify")
    assert code == 1 and "damaged" in out
    code, out, _ = _run(capsys, "--cache-dir", cache, "cache", "clear")
    assert code == 0 and "removed 1 file" in out and blob.name in out


def test_import_an_onnx_model(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from onnx import TensorProto, helper, save

    w = helper.make_tensor("w", TensorProto.FLOAT, [4], [1.0, 2.0, 3.0, 4.0])
    graph = helper.make_graph(
        [helper.make_node("Mul", ["x", "w"], ["y"]), helper.make_node("Exp", ["y"], ["z"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, [2, 4])],
        [w],
    )
    model = tmp_path / "m.onnx"
    save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(model))
    out_file = tmp_path / "m.poot"
    code, _, _ = _run(capsys, "import", str(model), "-o", str(out_file))
    assert code == 0 and out_file.exists()
    program = parse_program(out_file.read_text())
    assert [e.prim.value for e in program.eqns][-2:] == ["mul", "exp"]
    weights = np.load(tmp_path / "m.npz")
    np.testing.assert_array_equal(weights["w"], [1.0, 2.0, 3.0, 4.0])
    code, _, err = _run(capsys, "import", str(tmp_path / "nope.onnx"))
    assert code == 2 and "nope.onnx" in err


def test_plan_says_how_each_gather_keeps_its_indices_in_the_axis(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, _ = _run(capsys, "plan", str(EXAMPLES / "embedding.poot"), "--target", "xdna2")
    assert code == 0
    assert "gather at equation 0: indices checked on the host before each run" in out


def test_plan_shows_a_rewrite_made_at_many_equations_once(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # three tanh steps and one erf on intel-npu4: one tanh line naming its equations, the
    # erf's whole (its equation and its length); each tanh's own line with --guards
    lines = ["program few", "  slot x %0: f32[4,8]"]
    lines += [f"  %{i + 1}: f32[4,8] = tanh %{i}" for i in range(3)]
    lines += ["  %4: f32[4,8] = erf %3", "  output y = %4", "end", ""]
    path = tmp_path / "few.poot"
    path.write_text("\n".join(lines))
    code, out, _ = _run(capsys, "plan", str(path), "--target", "intel-npu4")
    assert code == 0
    flat = " ".join(out.replace("│", " ").split())
    assert flat.count("legalized: tanh") == 1 and "(equations 0, 1, 2)" in flat
    assert flat.count("legalized: erf") == 1 and "(equation 3:" in flat
    code, every, _ = _run(capsys, "plan", str(path), "--target", "intel-npu4", "--guards")
    assert code == 0
    assert " ".join(every.replace("│", " ").split()).count("legalized: tanh") == 3


@pytest.mark.slow
def test_plan_of_a_long_program_summarises_its_rewrites_and_guards(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # 80 tanh steps: 80 rewrites and hundreds of guards on intel-npu4; one line or row per
    # kind unless --guards (a 20,000-equation chain printed 3.9 MB, one row per guard)
    lines = ["program chain", "  slot x %0: f32[4,8]"]
    lines += [f"  %{i + 1}: f32[4,8] = tanh %{i}" for i in range(80)]
    path = tmp_path / "chain.poot"
    path.write_text("\n".join([*lines, "  output y = %80", "end", ""]))
    p = plan(parse_program(path.read_text()), "intel-npu4")
    assert len(p.rewrites) == 80 and len(p.guards) > 200
    code, out, _ = _run(capsys, "plan", str(path), "--target", "intel-npu4")
    assert code == 0
    flat = " ".join(out.replace("│", " ").split())
    assert f"domain guards ({len(p.guards)}, one row per kind" in flat
    assert flat.count("legalized: tanh") == 1 and "(80)" in flat
    assert len(out.splitlines()) < 100
    code, every, _ = _run(capsys, "plan", str(path), "--target", "intel-npu4", "--guards")
    assert code == 0
    every_flat = " ".join(every.replace("│", " ").split())
    assert every_flat.count("legalized: tanh") == 80
    rows = [ln for ln in every.splitlines() if ln.strip("│ ").split(" ")[0].isdigit()]
    assert len(rows) >= len(p.guards)


def test_a_summarised_plan_checks_every_argument_in_one_row(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # a model's weights are each checked on the host before the run: summarised, that is one
    # kind of guard whichever argument (each weight was a row of its own, hundreds for a
    # detector); --guards names each
    n = 50
    lines = ["program weights", "  slot x %0: f32[4,8]"]
    lines += [f"  weight w{i} %{i + 1}: f32[4,8]" for i in range(n)]
    acc = 0
    for i in range(n):
        lines.append(f"  %{n + 1 + i}: f32[4,8] = exp %{i + 1}")
        lines.append(f"  %{2 * n + 1 + i}: f32[4,8] = add %{acc} %{n + 1 + i}")
        acc = 2 * n + 1 + i
    path = tmp_path / "weights.poot"
    path.write_text("\n".join([*lines, f"  output y = %{acc}", "end", ""]))
    p = plan(parse_program(path.read_text()), "intel-npu4")
    hosted = [g for g in p.guards if g.argument is not None]
    assert len(hosted) >= n and len(p.guards) > 40
    code, out, _ = _run(capsys, "plan", str(path), "--target", "intel-npu4")
    assert code == 0
    flat = " ".join(out.replace("│", " ").split())
    assert flat.count("host: an argument, before the run") == 1, flat
    assert "'w7'" not in flat
    code, every, _ = _run(capsys, "plan", str(path), "--target", "intel-npu4", "--guards")
    flat = " ".join(every.replace("│", " ").split())
    assert all(f"host: argument 'w{i}', before the run" in flat for i in range(n))


def test_a_long_programs_host_relayouts_are_summarised(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # 50 transposes between negations: 50 host relayouts on xdna2, one row per kind (a
    # detector's convolutions, a slice per kernel tap, printed 265 rows); --guards lists each
    lines = ["program relayouts", "  slot x %0: f32[4,4]"]
    for i in range(50):
        lines.append(f"  %{2 * i + 1}: f32[4,4] = neg %{2 * i}")
        lines.append(f"  %{2 * i + 2}: f32[4,4] = transpose %{2 * i + 1} {{perm=(1,0)}}")
    path = tmp_path / "relayouts.poot"
    path.write_text("\n".join([*lines, "  output y = %100", "end", ""]))
    p = plan(parse_program(path.read_text()), "xdna2")
    assert p.admitted and len(p.relayouts) == 50
    code, out, _ = _run(capsys, "plan", str(path), "--target", "xdna2")
    assert code == 0
    flat = " ".join(out.replace("│", " ").split())
    assert "host relayouts (no tile, no hardware context) (50, one row per kind" in flat
    assert flat.count("transpose") == 1 and "(50)" in flat  # one row: the relayouts' only kind
    code, every, _ = _run(capsys, "plan", str(path), "--target", "xdna2", "--guards")
    assert code == 0
    every_flat = " ".join(every.replace("│", " ").split())
    assert every_flat.count("transpose") == 50
