# A .pth file that puts Python packages built outside uv.lock on the virtualenv's path: pyxrt
# (installed by XRT under /opt/xilinx/xrt/python). The shells unset PYTHONPATH, so the
# virtualenv's site-packages is the only way in. (The mlir-aie wheel is installed into the
# virtualenv itself, nix/pkgs/mlir-aie.nix: a .pth inside a directory that a .pth added is not
# read by Python, so its own aie.pth would be ignored here.)
{
  lib,
  stdenv,
  python,
  paths,
}:
stdenv.mkDerivation {
  pname = "poot-npu-site";
  version = "0";

  dontUnpack = true;
  dontConfigure = true;
  dontBuild = true;

  installPhase = ''
    runHook preInstall
    mkdir -p "$out/${python.sitePackages}"
    printf '%s\n' ${lib.escapeShellArgs paths} > "$out/${python.sitePackages}/poot_npu_site.pth"
    runHook postInstall
  '';

  passthru.dependencies = { };
}
