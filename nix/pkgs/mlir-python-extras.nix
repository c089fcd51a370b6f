# The mlir-python-extras source tree the pinned mlir-aie release pairs with (the manifest's
# mlir_python_extras: repository, revision, archive URL and hash, with the evidence for the
# pairing). Only its Python sources are used: nix/pkgs/mlir-aie.nix merges its mlir/extras into
# the wheel's aie/extras (nix/pkgs/merge-extras.sh). The archive is fetched flat (fetchurl), so
# its hash is the sha256 of the file the URL serves, which `uv run python tools/pin_hashes.py`
# computes once online and writes into the manifest; while it is null, evaluation stops here
# naming that command.
{
  lib,
  stdenvNoCC,
  fetchurl,
}:
let
  pin = (builtins.fromJSON (builtins.readFile ../../packages/poot-codegen/src/poot_codegen/xdna/toolchain.json)).mlir_python_extras;
  placeholder = import ../placeholder.nix;
in
stdenvNoCC.mkDerivation {
  pname = "mlir-python-extras";
  version = builtins.substring 0 8 pin.rev;
  src = fetchurl {
    inherit (pin) url;
    hash = placeholder "mlir_python_extras" pin.hash;
  };
  dontConfigure = true;
  dontBuild = true;
  installPhase = ''
    runHook preInstall
    test -d mlir/extras || { echo "no mlir/extras in ${pin.url}" >&2; exit 1; }
    mkdir -p $out
    cp -R . $out/
    runHook postInstall
  '';
  meta.license = lib.licenses.asl20;
}
