# mlir-aie (IRON, aiecc) as the Python wheel of the Xilinx/mlir-aie GitHub release that
# packages/poot-codegen/src/poot_codegen/xdna/toolchain.json pins: the version, URL and hash
# are read from there, so the shell and the MLIR renderer name the same release.
#
# Installed as a wheel (nix/pkgs/prebuilt-wheel.nix): the wheel's console script `aiecc.py`
# (aie.compiler.aiecc.main:main, utils/mlir_aie_wheels/pyproject.toml) is created, and its
# top-level aie.pth (which puts site-packages/mlir_aie/python on sys.path, where the `aie`
# package lives) lands in the virtualenv's own site-packages, where Python reads it. The tools
# in mlir_aie/bin (aie-opt, aie-translate, bootgen, ...) are linked into $out/bin for PATH.
#
# aie.extras: the v1.1 wheel ships aie/extras with upstream MLIR's types.py and meta.py (which
# aie.dialects.aie imports) but not the mlir-python-extras fork's modules that aiecc imports
# (aie.extras.runtime.passes, aie.extras.util; python/compiler/aiecc/main.py) and that
# aie.dialects.aie imports (aie.extras.dialects.ext); Xilinx/mlir-aie PR #2811 (2026-01-20) is
# the first to vendor them. The manifest's mlir_python_extras names the tree this release pairs
# with (nix/pkgs/mlir-python-extras.nix); nix/pkgs/merge-extras.sh merges its mlir/extras into
# the wheel's aie/extras, refusing to overwrite any file of the wheel's, and checks that
# types.py, meta.py, util.py and runtime/passes.py are all there afterwards.
#
# This package goes into aiecc's own virtualenv (nix/devshells.nix, aieccEnv: the wheel's
# requirements, numpy<2, from nix/aiecc/uv.lock), and its bin/ onto the shell's PATH.
{
  lib,
  stdenv,
  callPackage,
  python,
  mlir-python-extras,
  zlib,
  ncurses,
  libxml2,
}:
let
  pin = (builtins.fromJSON (builtins.readFile ../../packages/poot-codegen/src/poot_codegen/xdna/toolchain.json)).mlir_aie;
in
callPackage ./prebuilt-wheel.nix { } {
  pname = "mlir-aie";
  inherit pin;
  buildInputs = [
    stdenv.cc.cc.lib
    zlib
    ncurses
    libxml2
  ];
  # the wheel's native libraries link each other by relative rpath
  autoPatchelfIgnoreMissingDeps = [
    "libMLIR*"
    "libLLVM*"
    "libclang*"
  ];
  postInstall = ''
    site=$out/${python.sitePackages}/mlir_aie/python
    bash ${./merge-extras.sh} ${mlir-python-extras}/mlir/extras "$site/aie/extras"
    mkdir -p $out/bin
    for tool in $out/${python.sitePackages}/mlir_aie/bin/*; do
      if [ -x "$tool" ] && [ ! -e "$out/bin/$(basename "$tool")" ]; then
        ln -s "$tool" "$out/bin/$(basename "$tool")"
      fi
    done
  '';
  meta = {
    description = "MLIR-based toolchain for AMD AI Engines (IRON, aiecc), prebuilt wheel";
    homepage = "https://github.com/Xilinx/mlir-aie";
    license = lib.licenses.asl20;
    platforms = [ "x86_64-linux" ];
  };
}
