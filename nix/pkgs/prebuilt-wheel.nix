# One way to install a prebuilt wheel that the XDNA2 toolchain manifest
# (packages/poot-codegen/src/poot_codegen/xdna/toolchain.json) pins: mlir-aie and Peano (llvm-aie)
# both come through here, each passing its own manifest entry (`pin`: version, url, hash).
#
# Installed as a wheel (pyprojectWheelHook), not unzipped: console scripts are created and a
# top-level .pth lands in the virtualenv's own site-packages, where Python reads it. Prebuilt
# native code: autoPatchelf, never stripped. A null hash in the manifest is a placeholder
# (nothing offline can compute it; `nox -s nix` lists it): evaluation stops naming the command
# that computes it once online, `uv run python tools/pin_hashes.py` (nix/placeholder.nix).
{
  stdenv,
  fetchurl,
  autoPatchelfHook,
  pyprojectWheelHook,
}:
{
  pname,
  pin,
  buildInputs ? [ ],
  autoPatchelfIgnoreMissingDeps ? [ ],
  postInstall ? "",
  meta,
}:
stdenv.mkDerivation {
  inherit
    pname
    buildInputs
    autoPatchelfIgnoreMissingDeps
    postInstall
    meta
    ;
  inherit (pin) version;

  src = fetchurl {
    inherit (pin) url;
    hash = import ../placeholder.nix pname pin.hash;
  };

  nativeBuildInputs = [
    pyprojectWheelHook
    autoPatchelfHook
  ];
  dontStrip = true;

  # The Python requirements come from uv.lock (poot-npu[xdna]), not from the wheel's metadata.
  passthru.dependencies = { };
}
