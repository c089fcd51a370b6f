# The npu-intel shell's one pairing rule, pure (no inputs: `nox -s nix` evaluates it offline
# against the locked nixpkgs' version): the user-mode driver and the graph compiler it dlopens
# must come from one linux-npu-driver release, since each release's pair speaks one VCL API
# version. True, or evaluation stops naming both versions.
{ driver, compiler }:
if driver == compiler then
  true
else
  throw "the Intel NPU user-mode driver (intel-npu-driver ${driver}) and its graph compiler (nix/pkgs/intel-npu-compiler.nix ${compiler}) are not one linux-npu-driver release: both come from nix/intel-npu.json's release (nix/pkgs/intel-npu-driver.nix overrides nixpkgs' driver to it)"
