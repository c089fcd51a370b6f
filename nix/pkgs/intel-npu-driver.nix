# nixpkgs' intel-npu-driver (the NPU user-mode driver, libze_intel_npu, and its firmware output)
# moved to the linux-npu-driver release nix/intel-npu.json names, the release the graph compiler
# (nix/pkgs/intel-npu-compiler.nix) comes from. The locked nixpkgs has 1.28.0 (see the
# manifest's nixpkgs_at_lock); its package.nix (pkgs/by-name/in/intel-npu-driver/package.nix)
# builds `src = fetchFromGitHub { owner = "intel"; repo = "linux-npu-driver"; tag = "v${version}";
# fetchSubmodules = true; }` inside `rec`, so both version and src are replaced here; its build
# (cmake, the level-zero-npu, validation-npu and fw-npu components) is kept as it is.
# The source hash is a placeholder until `uv run python tools/pin_hashes.py` is run online.
{
  intel-npu-driver,
  fetchFromGitHub,
}:
let
  release = builtins.fromJSON (builtins.readFile ../intel-npu.json);
  placeholder = import ../placeholder.nix;
in
intel-npu-driver.overrideAttrs (_old: {
  version = release.release;
  src = fetchFromGitHub {
    inherit (release.source) owner repo tag;
    fetchSubmodules = true;
    hash = placeholder "intel-npu-driver ${release.release} source" release.source.hash;
  };
})
