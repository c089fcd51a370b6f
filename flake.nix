{
  description = "poot: typed tensor programs on laptop NPUs (AMD XDNA2, Intel NPU4)";

  # uv2nix pattern for the `packages/*` uv workspace. flake.lock is written from real pins by
  # tools/gen_flake_lock.py (offline Nix cannot lock github inputs); see README "Nix shells".
  inputs = {
    nixpkgs.url = "github:NixOS/nixpkgs/nixos-unstable";

    pyproject-nix = {
      url = "github:pyproject-nix/pyproject.nix";
      inputs.nixpkgs.follows = "nixpkgs";
    };

    uv2nix = {
      url = "github:pyproject-nix/uv2nix";
      inputs.pyproject-nix.follows = "pyproject-nix";
      inputs.nixpkgs.follows = "nixpkgs";
    };

    pyproject-build-systems = {
      url = "github:pyproject-nix/build-system-pkgs";
      inputs.pyproject-nix.follows = "pyproject-nix";
      inputs.uv2nix.follows = "uv2nix";
      inputs.nixpkgs.follows = "nixpkgs";
    };

    # XRT + amdxdna shim (with pyxrt) and the mlir-aie wheel; nixpkgs has no XRT yet.
    nix-amd-npu = {
      url = "github:robcohen/nix-amd-npu";
      inputs.nixpkgs.follows = "nixpkgs";
    };
  };

  outputs =
    {
      nixpkgs,
      pyproject-nix,
      uv2nix,
      pyproject-build-systems,
      nix-amd-npu,
      ...
    }:
    let
      # Pure data; evaluating it touches no input (`nix eval .#shellManifest` works offline).
      manifest = import ./nix/shells.nix;
      # The NPUs are in x86_64 laptops. No nixpkgs.lib here, so that shellManifest stays offline.
      systems = [ "x86_64-linux" ];
      forSystems =
        f:
        builtins.listToAttrs (
          map (system: {
            name = system;
            value = f system;
          }) systems
        );
    in
    {
      shellManifest = manifest;

      devShells = forSystems (
        system:
        import ./nix/devshells.nix {
          inherit
            system
            manifest
            nixpkgs
            pyproject-nix
            uv2nix
            pyproject-build-systems
            nix-amd-npu
            ;
          workspaceRoot = ./.;
        }
      );
    };
}
