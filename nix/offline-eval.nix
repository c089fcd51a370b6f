# What `nox -s nix` (tools/check_nix.py) evaluates of the shells' derivation graph without the
# network. nixpkgs cannot be fetched offline (and needs a newer Nix than Debian's), so every
# nix/pkgs/*.nix is called with stand-ins for what nixpkgs would pass (`stub`, built from each
# function's own arguments), which is as far as the graph goes without it: each derivation's
# own expression evaluates, takes its pins from the manifests, and its hash is either known or
# a placeholder (nix/placeholder.nix's throw, caught here and reported). The stand-in for
# nixpkgs' intel-npu-driver is the locked nixpkgs' (nix/intel-npu.json `nixpkgs_at_lock`: its
# version), so the npu-intel shell's pairing assert (nix/intel-npu-pair.nix) is evaluated as
# the pinned nixpkgs would trip it: once as the shell overrides the driver, once without.
let
  intelNpu = builtins.fromJSON (builtins.readFile ./intel-npu.json);
  locked = intelNpu.nixpkgs_at_lock;

  mkDerivation =
    attrs:
    let
      a = if builtins.isFunction attrs then attrs a else attrs;
    in
    a
    // {
      name = "${a.pname}-${a.version}";
      overrideAttrs = f: mkDerivation (a // f a);
    };
  stdenv = {
    inherit mkDerivation;
    cc.cc.lib = "stub-libstdc++";
  };
  # nixpkgs' intel-npu-driver at the locked rev, as far as the override reads it
  lockedDriver = mkDerivation {
    pname = "intel-npu-driver";
    version = locked.intel-npu-driver;
    src = {
      tag = "v${locked.intel-npu-driver}";
    };
  };
  known = {
    lib = {
      licenses = {
        asl20 = "asl20";
        mit = "mit";
      };
      escapeShellArgs = builtins.concatStringsSep " ";
    };
    inherit stdenv;
    stdenvNoCC = stdenv;
    fetchurl = args: args;
    fetchFromGitHub = args: args;
    python = {
      sitePackages = "lib/python3.12/site-packages";
    };
    pythonManylinuxPackages.manylinux2014 = [ ];
    mlir-python-extras = "/stub/mlir-python-extras";
    intel-npu-driver = lockedDriver;
    callPackage = path: over: call path over;
    paths = [ ];
  };
  stub = name: known.${name} or "stub-${name}";
  call =
    path: over:
    let
      f = import path;
    in
    f (builtins.mapAttrs (name: _: stub name) (builtins.functionArgs f) // over);

  # a fixed-output hash: the value, or "placeholder" where nix/placeholder.nix throws
  hashOf =
    src:
    let
      h = builtins.tryEval src.hash;
    in
    if h.success then h.value else "placeholder";
  described = drv: {
    inherit (drv) name version;
    url = drv.src.url or "github:${drv.src.owner}/${drv.src.repo}@${drv.src.tag}";
    hash = hashOf drv.src;
  };

  driver = call ./pkgs/intel-npu-driver.nix { };
  compiler = call ./pkgs/intel-npu-compiler.nix { };
  mlirAie = call ./pkgs/mlir-aie.nix { };
  pair = d: builtins.tryEval (import ./intel-npu-pair.nix { driver = d; compiler = compiler.version; });
in
{
  npu-intel = {
    driver = described driver;
    compiler = described compiler;
    paired = (pair driver.version).success;
    # the assert the locked nixpkgs' own driver would trip, were the shell not to override it
    lockedDriver = locked.intel-npu-driver;
    lockedDriverPairs = (pair locked.intel-npu-driver).success;
  };
  npu = {
    mlir-aie = described mlirAie // {
      mergesExtras = builtins.match ".*bash [^ ]*merge-extras.sh [^ ]*/mlir/extras \"[$]site/aie/extras\".*" (
        builtins.replaceStrings [ "\n" ] [ " " ] mlirAie.postInstall
      ) != null;
    };
    llvm-aie = described (call ./pkgs/llvm-aie.nix { });
    mlir-python-extras = described (call ./pkgs/mlir-python-extras.nix { });
    poot-npu-site = (call ./pkgs/npu-site-paths.nix { }).name;
  };
}
