# The dev shells: one per entry of the pure manifest nix/shells.nix, following the uv2nix
# pattern for a `packages/*` workspace (pyproject-nix/uv2nix templates/hello-world). Needs the
# flake inputs and nixpkgs, so it cannot be evaluated offline; nix/shells.nix can.
{
  system,
  manifest,
  workspaceRoot,
  nixpkgs,
  pyproject-nix,
  uv2nix,
  pyproject-build-systems,
  nix-amd-npu,
}:
let
  inherit (nixpkgs) lib;
  # nixpkgs with its intel-npu-driver moved to the release of nix/intel-npu.json, the one the
  # graph compiler comes from (nix/pkgs/intel-npu-driver.nix): every use below sees the override
  pkgs = nixpkgs.legacyPackages.${system}.extend (
    final: prev: {
      intel-npu-driver = final.callPackage ./pkgs/intel-npu-driver.nix {
        inherit (prev) intel-npu-driver;
      };
    }
  );

  # Flakes whose packages a shell may name as "<input>#<package>".
  flakeInputs = {
    inherit nix-amd-npu;
  };
  flakePackage =
    ref:
    let
      parts = lib.splitString "#" ref;
    in
    flakeInputs.${builtins.head parts}.packages.${system}.${lib.last parts};
  amd = nix-amd-npu.packages.${system};
  # The NPU graph compiler nixpkgs' driver lacks, from the driver's release (pkgs/intel-npu-compiler.nix).
  intelNpuCompiler = pkgs.callPackage ./pkgs/intel-npu-compiler.nix { };
  intelNpuPaired = import ./intel-npu-pair.nix {
    driver = pkgs.intel-npu-driver.version;
    compiler = intelNpuCompiler.version;
  };

  workspace = uv2nix.lib.workspace.loadWorkspace { inherit workspaceRoot; };
  overlay = workspace.mkPyprojectOverlay { sourcePreference = "wheel"; };
  editableOverlay = workspace.mkEditablePyprojectOverlay { root = "$REPO_ROOT"; };

  # Python packages that are not in uv.lock (the manifest's pythonExtras).
  extrasOverlay = final: _prev: {
    llvm-aie = final.callPackage ./pkgs/llvm-aie.nix { };
    mlir-aie = final.callPackage ./pkgs/mlir-aie.nix { };
    mlir-python-extras = final.callPackage ./pkgs/mlir-python-extras.nix { };
    poot-npu-site = final.callPackage ./pkgs/npu-site-paths.nix {
      paths = [ "${amd.xrt-amdxdna}/opt/xilinx/xrt/python" ];
    };
  };

  # aiecc's own environment: the mlir-aie wheel with the Python requirements it declares
  # (numpy<2), locked in nix/aiecc/uv.lock, apart from the workspace's numpy 2; the link step
  # runs aiecc with its interpreter ($POOT_AIECC_PYTHON, poot_codegen/xdna/link.py).
  aieccWorkspace = uv2nix.lib.workspace.loadWorkspace { workspaceRoot = ./aiecc; };
  aieccSetFor =
    spec:
    (pkgs.callPackage pyproject-nix.build.packages { python = pkgs.${spec.python}; }).overrideScope (
      lib.composeManyExtensions [
        pyproject-build-systems.overlays.wheel
        (aieccWorkspace.mkPyprojectOverlay { sourcePreference = "wheel"; })
        extrasOverlay
      ]
    );
  aieccEnvFor =
    spec: aiecc:
    (aieccSetFor spec).mkVirtualEnv "poot-aiecc-env" (
      aieccWorkspace.deps.default // lib.genAttrs aiecc.pythonExtras (_: [ ])
    );

  pythonSetFor =
    spec:
    (pkgs.callPackage pyproject-nix.build.packages { python = pkgs.${spec.python}; }).overrideScope (
      lib.composeManyExtensions [
        pyproject-build-systems.overlays.wheel
        overlay
        extrasOverlay
        editableOverlay
      ]
    );

  # Values of the manifest's envFromBuild names; a name missing here fails evaluation.
  builtEnv = spec: set: {
    UV_PYTHON = set.python.interpreter;
    XILINX_XRT = "${amd.xrt-amdxdna}/opt/xilinx/xrt";
    PEANO_INSTALL_DIR = "${set.llvm-aie}/${set.python.sitePackages}/llvm-aie";
    MLIR_AIE_DIR = "${(aieccSetFor spec).mlir-aie}/${set.python.sitePackages}/mlir_aie";
    POOT_AIECC_PYTHON = "${aieccEnvFor spec spec.aiecc}/bin/python";
    # libze_loader finds the NPU driver, and the driver's dlopen finds the compiler, here
    LD_LIBRARY_PATH =
      assert intelNpuPaired;
      lib.makeLibraryPath [
        pkgs.level-zero
        pkgs.intel-npu-driver
        intelNpuCompiler
      ];
    # the firmware of the driver's release, for a host whose linux-firmware is older
    POOT_NPU_FIRMWARE = "${lib.getOutput "firmware" pkgs.intel-npu-driver}/lib/firmware/intel/vpu";
  };

  # uv.lock records no entry for an extra without dependencies (poot-npu[xdna]: pyxrt comes with
  # XRT), and pyproject.nix refuses an extra it cannot find, so such extras are dropped here.
  # tools/check_nix.py checks offline that every manifest extra exists in pyproject.toml.
  lockedExtras =
    set: package: extras:
    let
      inherit (set.${package}) passthru;
    in
    builtins.filter (
      e: (passthru.optional-dependencies or { }) ? ${e} || (passthru.dependency-groups or { }) ? ${e}
    ) extras;

  mkShellFor =
    name: spec:
    let
      set = pythonSetFor spec;
      venv = set.mkVirtualEnv "poot-${name}-env" (
        builtins.mapAttrs (lockedExtras set) spec.workspace // lib.genAttrs spec.pythonExtras (_: [ ])
      );
      env = spec.env // lib.getAttrs (lib.attrNames spec.envFromBuild) (builtEnv spec set);
    in
    assert lib.assertMsg (spec.env.POOT_NIX_SHELL == name) "nix/shells.nix: ${name} sets POOT_NIX_SHELL to ${spec.env.POOT_NIX_SHELL}";
    pkgs.mkShell {
      packages =
        [ venv ]
        # each extra's own bin on PATH too (mlir-aie: aiecc.py, aie-opt, bootgen, ...)
        ++ map (name: set.${name}) spec.pythonExtras
        # aiecc's own packages' tools (mlir-aie: aie-opt, aie-translate, bootgen, ...), not its
        # virtualenv, whose python must not shadow the workspace's
        ++ map (name: (aieccSetFor spec).${name}) (spec.aiecc.pythonExtras or [ ])
        ++ map (attr: lib.getAttrFromPath (lib.splitString "." attr) pkgs) spec.nixpkgs
        ++ map flakePackage spec.flakePackages;
      inherit env;
      shellHook = ''
        unset PYTHONPATH
        export REPO_ROOT=$(git rev-parse --show-toplevel)
      ''
      + lib.concatStrings (lib.mapAttrsToList (k: v: "export ${k}=${lib.escapeShellArg v}\n") env);
    };
in
builtins.mapAttrs mkShellFor manifest
