# The Intel NPU graph compiler (linux-npu-driver's `intel-driver-compiler-npu` component), which
# nixpkgs' intel-npu-driver does not install: its package.nix installs only the level-zero-npu,
# validation-npu and fw-npu components, and the driver builds no compiler by default
# (ENABLE_NPU_COMPILER_BUILD is OFF in linux-npu-driver's CMakeLists.txt). Without it every graph
# call fails with ZE_RESULT_ERROR_UNSUPPORTED_FEATURE (umd/level_zero_driver/source/ext/compiler.cpp).
#
# Built here from the release's prebuilt Ubuntu 24.04 package (building the compiler from source
# pulls a whole LLVM/MLIR and OpenVINO build): the release tarball is fetched, the compiler's .deb
# unpacked, and every shared library it ships installed into $out/lib, patched to find its
# dependencies in the store. The driver loads the compiler with dlopen by file name
# (umd/level_zero_driver/source/ext/vcl_symbols.hpp), which searches LD_LIBRARY_PATH: the
# npu-intel shell puts $out/lib there (nix/devshells.nix).
#
# The version must be the user-mode driver's: the compiler and the driver speak one VCL API
# version per release. Both come from nix/intel-npu.json's release (the driver through
# nix/pkgs/intel-npu-driver.nix), and nix/devshells.nix refuses to evaluate when they differ
# (nix/intel-npu-pair.nix). The release, build, URL and hash are read from that manifest; the
# hash there was recorded by independent public install scripts for this very URL and could not
# be recomputed here (no network). A wrong hash fails the first build with a fixed-output
# mismatch that prints the right one.
{
  lib,
  stdenv,
  fetchurl,
  dpkg,
  autoPatchelfHook,
  onetbb,
  zlib,
  zstd,
}:
let
  pin = builtins.fromJSON (builtins.readFile ../intel-npu.json);
  placeholder = import ../placeholder.nix;
in
stdenv.mkDerivation {
  pname = "intel-npu-compiler";
  version = pin.release;

  src = fetchurl {
    inherit (pin.compiler) url;
    hash = placeholder "intel-npu-compiler" pin.compiler.hash;
  };

  nativeBuildInputs = [
    dpkg
    autoPatchelfHook
  ];
  buildInputs = [
    stdenv.cc.cc.lib
    onetbb
    zlib
    zstd
  ];

  unpackPhase = ''
    runHook preUnpack
    tar -xzf $src --wildcards '*intel-driver-compiler-npu_*.deb'
    dpkg-deb -x ./*intel-driver-compiler-npu_*.deb deb
    runHook postUnpack
  '';

  installPhase = ''
    runHook preInstall
    mkdir -p $out/lib
    find deb -name '*.so*' \( -type f -o -type l \) -exec cp -P {} $out/lib/ \;
    test -n "$(ls $out/lib)" || { echo "the compiler package ships no library"; exit 1; }
    runHook postInstall
  '';

  # Prebuilt: do not strip it.
  dontStrip = true;

  meta = {
    description = "Intel NPU graph compiler (libnpu_driver_compiler / libopenvino_intel_npu_compiler), prebuilt";
    homepage = "https://github.com/intel/linux-npu-driver";
    license = lib.licenses.asl20; # openvinotoolkit/npu_compiler
    platforms = [ "x86_64-linux" ];
  };
}
