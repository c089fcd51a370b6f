# Peano (llvm-aie): the AIE compiler as a wheel from the Xilinx/llvm-aie GitHub releases (not on
# PyPI; no public flake packages it). Installed into the shell's virtualenv like a uv2nix wheel;
# PEANO_INSTALL_DIR points at <site-packages>/llvm-aie.
#
# The version is the nightly that mlir-aie's README pairs with its v1.1 wheels. The hash cannot be
# computed without network: lib.fakeHash is filled in on the first build with network (Nix prints
# the real hash in the mismatch error). Nightly assets can be pruned upstream; if the URL is gone,
# pick the llvm-aie nightly that the pinned mlir-aie release names and update both here.
{
  lib,
  stdenv,
  fetchurl,
  autoPatchelfHook,
  pyprojectWheelHook,
  pythonManylinuxPackages,
  zlib,
  zstd,
  ncurses,
  libxml2,
}:
stdenv.mkDerivation {
  pname = "llvm-aie";
  version = "20.0.0.2025090701+8c084497";

  src = fetchurl {
    url = "https://github.com/Xilinx/llvm-aie/releases/download/nightly/llvm_aie-20.0.0.2025090701+8c084497-py3-none-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl";
    hash = lib.fakeHash;
  };

  nativeBuildInputs = [
    pyprojectWheelHook
    autoPatchelfHook
  ];
  buildInputs = pythonManylinuxPackages.manylinux2014 ++ [
    zlib
    zstd
    ncurses
    libxml2
  ];

  # Prebuilt toolchain: do not strip it.
  dontStrip = true;

  # A wheel with no Python requirements, resolved by pyproject.nix's mkVirtualEnv.
  passthru.dependencies = { };

  meta = {
    description = "Peano: LLVM for AMD AI Engine (llvm-aie), prebuilt wheel";
    homepage = "https://github.com/Xilinx/llvm-aie";
    license = lib.licenses.asl20;
    platforms = [ "x86_64-linux" ];
  };
}
