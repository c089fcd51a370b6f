# The mlir-python-extras source tree the pinned mlir-aie release pairs with (the manifest's
# mlir_python_extras: repository, revision, archive URL and hash, with the evidence for the
# pairing). Only its Python sources are used: nix/pkgs/mlir-aie.nix copies mlir/extras into the
# wheel's aie package as aie.extras. Fetched by the pinned revision; the hash of that archive
# cannot be computed offline, so the manifest holds null, a placeholder (`nox -s nix` lists it).
{
  lib,
  fetchzip,
}:
let
  pin = (builtins.fromJSON (builtins.readFile ../../packages/poot-codegen/src/poot_codegen/xdna/toolchain.json)).mlir_python_extras;
in
fetchzip {
  name = "mlir-python-extras-${builtins.substring 0 8 pin.rev}";
  inherit (pin) url;
  hash = if pin.hash == null then lib.fakeHash else pin.hash;
}
