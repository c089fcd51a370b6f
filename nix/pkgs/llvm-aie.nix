# Peano (llvm-aie): the AIE compiler as a wheel from the Xilinx/llvm-aie GitHub releases (not on
# PyPI; no public flake packages it). Installed into the shell's virtualenv like a uv2nix wheel
# (nix/pkgs/prebuilt-wheel.nix); PEANO_INSTALL_DIR points at <site-packages>/llvm-aie.
#
# The version, URL and hash are read from packages/poot-codegen/src/poot_codegen/xdna/toolchain.json
# (the build that mlir-aie's README pairs with the pinned v1.1 wheels), so the shell and the
# renderer cannot disagree. Its hash cannot be computed without network: the manifest holds null,
# a placeholder (`nox -s nix` lists it). Nightly assets can be pruned upstream; if the URL is
# gone, pick the llvm-aie build the pinned mlir-aie release names and update the manifest.
{
  lib,
  callPackage,
  pythonManylinuxPackages,
  zlib,
  zstd,
  ncurses,
  libxml2,
}:
let
  pin = (builtins.fromJSON (builtins.readFile ../../packages/poot-codegen/src/poot_codegen/xdna/toolchain.json)).peano;
in
callPackage ./prebuilt-wheel.nix { } {
  pname = "llvm-aie";
  inherit pin;
  buildInputs = pythonManylinuxPackages.manylinux2014 ++ [
    zlib
    zstd
    ncurses
    libxml2
  ];
  meta = {
    description = "Peano: LLVM for AMD AI Engine (llvm-aie), prebuilt wheel";
    homepage = "https://github.com/Xilinx/llvm-aie";
    license = lib.licenses.asl20;
    platforms = [ "x86_64-linux" ];
  };
}
