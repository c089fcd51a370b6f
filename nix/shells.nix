# The Nix shells of poot, as pure data: importable with no inputs (`import ./nix/shells.nix`)
# and exported by the flake as `shellManifest`, so an offline CI can evaluate and check it.
# nix/devshells.nix builds one `devShells.<system>.<name>` per entry, from these fields only:
#
#   description   what the shell is for
#   python        the nixpkgs interpreter attribute of the uv2nix package set
#   nixpkgs       nixpkgs attribute paths put on PATH
#   workspace     uv workspace packages installed (editable) in the shell's virtualenv, each with
#                 the extras and dependency groups it installs (the names in pyproject.toml)
#   pythonExtras  Python packages outside uv.lock, added to the same virtualenv (nix/pkgs/)
#   flakePackages packages taken from a pinned flake input, as "<input>#<package>"
#   nox           the nox session this shell exists to run (a function in noxfile.py)
#   noxAlso       further nox sessions that run in it
#   env           environment variables with fixed values (exported by the shellHook)
#   envFromBuild  environment variables whose values are store paths, named here and filled in
#                 by nix/devshells.nix (evaluation fails if it cannot fill one of them)
#   aiecc         (npu) aiecc's own Python environment: `project`, the uv project whose lock holds
#                 the mlir-aie wheel's declared requirements (numpy<2), and `pythonExtras`, the
#                 packages outside that lock added to it; its interpreter is $POOT_AIECC_PYTHON
#   toolchain     (npu) the XDNA2 toolchain manifest, read from the file the MLIR renderer and
#                 the link step read (builtins.fromJSON: pure, so this file stays offline data):
#                 the mlir-aie and Peano pins, the aiecc drivers, the tools aiecc runs and the
#                 Python modules the link step imports
#
# Every shellHook also runs `unset PYTHONPATH` and `export REPO_ROOT=$(git rev-parse --show-toplevel)`.
let
  # the one record of the XDNA2 toolchain (also read by poot_codegen.xdna.toolchain)
  xdnaToolchain = builtins.fromJSON (
    builtins.readFile ../packages/poot-codegen/src/poot_codegen/xdna/toolchain.json
  );
  # the one record of the Intel NPU driver/compiler release (also read by nix/pkgs/intel-npu-*.nix)
  intelNpu = builtins.fromJSON (builtins.readFile ./intel-npu.json);
  uvEnv = {
    UV_NO_SYNC = "1";
    UV_PYTHON_DOWNLOADS = "never";
  };
  uvFromBuild = {
    UV_PYTHON = "the interpreter of the shell's uv2nix Python package set";
  };
  # The root project with its dev group; the root's own dependencies already pull
  # poot-onnx, poot-codegen[vpu] and poot-npu[vpu] (numpy, ml_dtypes, onnx, openvino wheels).
  workspace = {
    poot = [ "dev" ];
    poot-ir = [ ];
    poot-onnx = [ ];
    poot-planner = [ ];
    poot-codegen = [ "vpu" ];
    poot-engine = [ ];
    poot-npu = [ "vpu" ];
  };
in
{
  default = {
    description = "The hardware-free workspace: CPU oracle, OpenVINO CPU stand-in, XDNA host stand-in";
    python = "python312";
    nixpkgs = [
      "uv"
      "gcc"
      "git"
    ];
    inherit workspace;
    pythonExtras = [ ];
    flakePackages = [ ];
    nox = "tests";
    noxAlso = [
      "conformance"
      "lint"
      "typecheck"
      "bench"
      "nix"
    ];
    env = uvEnv // {
      POOT_NIX_SHELL = "default";
    };
    envFromBuild = uvFromBuild;
  };

  npu = {
    description = "AMD XDNA2: XRT with the amdxdna shim and pyxrt, mlir-aie (IRON), Peano (llvm-aie)";
    python = "python312"; # the mlir-aie wheel and pyxrt are cp312
    nixpkgs = [
      "uv"
      "gcc"
      "git"
    ];
    workspace = workspace // {
      poot-npu = [
        "vpu"
        "xdna"
      ];
    };
    pythonExtras = [
      "llvm-aie" # nix/pkgs/llvm-aie.nix: the Peano wheel the toolchain manifest pins
      "poot-npu-site" # nix/pkgs/npu-site-paths.nix: puts pyxrt on the venv's path
    ];
    aiecc = {
      project = "nix/aiecc"; # its pyproject.toml and uv.lock: the wheel's requirements, numpy<2
      pythonExtras = [
        "mlir-aie" # nix/pkgs/mlir-aie.nix: the mlir-aie wheel the manifest pins, installed as a wheel
      ];
    };
    flakePackages = [
      "nix-amd-npu#xrt-amdxdna" # XRT + amdxdna shim 202610.2.21.21, built from source, with pyxrt
    ];
    toolchain = xdnaToolchain;
    nox = "xdna";
    noxAlso = [ "tests" ];
    env = uvEnv // {
      POOT_NIX_SHELL = "npu";
    };
    envFromBuild = uvFromBuild // {
      XILINX_XRT = "<xrt-amdxdna>/opt/xilinx/xrt";
      PEANO_INSTALL_DIR = "<llvm-aie>/<site-packages>/llvm-aie";
      MLIR_AIE_DIR = "<mlir-aie>/<site-packages>/mlir_aie";
      POOT_AIECC_PYTHON = "<aiecc's own virtualenv>/bin/python (nix/aiecc/uv.lock and the mlir-aie wheel)";
    };
  };

  npu-intel = {
    description = "Intel NPU4: Level Zero loader, the Intel NPU user-mode driver and its graph compiler (one linux-npu-driver release), OpenVINO wheel";
    python = "python312";
    nixpkgs = [
      "uv"
      "gcc"
      "git"
      "level-zero"
      "intel-npu-driver"
    ];
    inherit workspace;
    pythonExtras = [ ];
    flakePackages = [ ];
    nox = "npu_intel";
    noxAlso = [ "tests" ];
    env = uvEnv // {
      POOT_NIX_SHELL = "npu-intel";
      # the linux-npu-driver release of the driver and compiler (nix/intel-npu.json): the probe
      # names it when the host's firmware is older (poot_npu.vpu_firmware)
      POOT_NPU_RELEASE = intelNpu.release;
    };
    envFromBuild = uvFromBuild // {
      LD_LIBRARY_PATH = "<level-zero>/lib:<intel-npu-driver>/lib:<intel-npu-compiler>/lib (libze_loader finds the NPU driver, the driver's dlopen its graph compiler: nix/pkgs/intel-npu-compiler.nix; both from nix/intel-npu.json's release)";
      POOT_NPU_FIRMWARE = "<intel-npu-driver.firmware>/lib/firmware/intel/vpu: the NPU firmware of that release, for a host whose linux-firmware is older";
    };
  };
}
