# mlir-aie (IRON, aiecc) as the Python wheel of the Xilinx/mlir-aie GitHub release that
# packages/poot-codegen/src/poot_codegen/xdna/toolchain.json pins: the version, URL and hash
# are read from there, so the shell and the MLIR renderer name the same release.
#
# Installed as a wheel (nix/pkgs/prebuilt-wheel.nix): the wheel's console script `aiecc`
# (aie.compiler.aiecc.main:main) is created, and its top-level aie.pth (which puts
# site-packages/mlir_aie/python on sys.path, where the `aie` package lives) lands in the
# virtualenv's own site-packages, where Python reads it. The tools in mlir_aie/bin (aiecc.py,
# aie-opt, aie-translate, bootgen, ...) are linked into $out/bin for PATH.
#
# aie.extras: the v1.1 wheels do not carry it (Xilinx/mlir-aie PR #2811, 2026-01-20, is the
# first to vendor it), yet aiecc imports aie.extras.runtime.passes and aie.extras.util
# (python/compiler/aiecc/main.py) and aie.dialects.aie imports aie.extras.dialects.ext. The
# manifest's mlir_python_extras names the source tree this release pairs with
# (nix/pkgs/mlir-python-extras.nix); its mlir/extras is copied into mlir_aie/python/aie/extras,
# the place `HOST_MLIR_PYTHON_PACKAGE_PREFIX=aie pip install` maps it to and where #2811
# later vendors it. Its Python requirements (PyYAML, bytecode, cloudpickle) are in uv.lock.
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
    if [ -e "$site/aie/extras" ]; then
      echo "mlir-aie ${pin.version} ships aie/extras itself: drop mlir_python_extras from the manifest" >&2
      exit 1
    fi
    cp -r ${mlir-python-extras}/mlir/extras "$site/aie/extras"
    chmod -R u+w "$site/aie/extras"
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
