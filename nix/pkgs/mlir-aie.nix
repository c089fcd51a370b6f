# mlir-aie (IRON, aiecc) as the Python wheel of the Xilinx/mlir-aie GitHub release that
# packages/poot-codegen/src/poot_codegen/xdna/toolchain.json pins: the version, URL and hash
# are read from there, so the shell and the MLIR renderer name the same release.
#
# Installed as a wheel (pyprojectWheelHook), not unzipped: the wheel's console script `aiecc`
# (aie.compiler.aiecc.main:main) is created, and its top-level aie.pth (which puts
# site-packages/mlir_aie/python on sys.path, where the `aie` package lives) lands in the
# virtualenv's own site-packages, where Python reads it. The tools in mlir_aie/bin (aiecc.py,
# aie-opt, aie-translate, bootgen, ...) are linked into $out/bin for PATH.
{
  lib,
  stdenv,
  fetchurl,
  autoPatchelfHook,
  pyprojectWheelHook,
  python,
  zlib,
  ncurses,
  libxml2,
}:
let
  pin = (builtins.fromJSON (builtins.readFile ../../packages/poot-codegen/src/poot_codegen/xdna/toolchain.json)).mlir_aie;
in
stdenv.mkDerivation {
  pname = "mlir-aie";
  inherit (pin) version;

  src = fetchurl {
    inherit (pin) url;
    # a null hash in the manifest is a placeholder (`nox -s nix` lists it)
    hash = if pin.hash == null then lib.fakeHash else pin.hash;
  };

  nativeBuildInputs = [
    pyprojectWheelHook
    autoPatchelfHook
  ];
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
  dontStrip = true;

  postInstall = ''
    mkdir -p $out/bin
    for tool in $out/${python.sitePackages}/mlir_aie/bin/*; do
      if [ -x "$tool" ] && [ ! -e "$out/bin/$(basename "$tool")" ]; then
        ln -s "$tool" "$out/bin/$(basename "$tool")"
      fi
    done
  '';

  # aiecc's own Python imports come from uv.lock (poot-npu[xdna]: aiofiles; rich, numpy);
  # aie.extras (eudsl-python-extras) is a manifest placeholder.
  passthru.dependencies = { };

  meta = {
    description = "MLIR-based toolchain for AMD AI Engines (IRON, aiecc), prebuilt wheel";
    homepage = "https://github.com/Xilinx/mlir-aie";
    license = lib.licenses.asl20;
    platforms = [ "x86_64-linux" ];
  };
}
