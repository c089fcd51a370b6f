#!/usr/bin/env bash
# The install step of nix/pkgs/mlir-aie.nix that puts mlir-python-extras into the wheel:
#
#   merge-extras.sh EXTRAS_SRC WHEEL_EXTRAS
#
# EXTRAS_SRC is the mlir-python-extras tree's mlir/extras (nix/pkgs/mlir-python-extras.nix);
# WHEEL_EXTRAS is the wheel's own <site-packages>/mlir_aie/python/aie/extras. The v1.1 wheel
# already ships that directory with upstream MLIR's extras/types.py and extras/meta.py
# (llvm-project mlir/python/CMakeLists.txt, MLIRPythonSources.Core.Python.Extras), which
# aie.dialects.aie imports; aiecc imports aie.extras.runtime.passes and aie.extras.util from the
# fork. So the fork's files are merged into the existing directory: copied by content
# (`SRC/.`, never the directory itself, which would nest as aie/extras/extras), refusing before
# anything is copied if one of them would overwrite a file the wheel has. Afterwards the files
# both sides need must be there. Run with bash by a pytest test on a tree laid out like the wheel
# (tests/test_nix_mlir_aie_install.py).
set -euo pipefail

if [ "$#" -ne 2 ]; then
  echo "usage: $0 EXTRAS_SRC WHEEL_EXTRAS" >&2
  exit 2
fi
src=$1
dst=$2
if [ ! -d "$src" ]; then
  echo "merge-extras: $src is not a directory (the mlir-python-extras tree's mlir/extras)" >&2
  exit 1
fi
mkdir -p "$dst"

clashes=()
while IFS= read -r -d '' file; do
  rel=${file#"$src"/}
  if [ -e "$dst/$rel" ] || [ -L "$dst/$rel" ]; then
    clashes+=("$rel")
  fi
done < <(find "$src" \( -type f -o -type l \) -print0)
if [ "${#clashes[@]}" -ne 0 ]; then
  echo "merge-extras: mlir-python-extras would overwrite the wheel's own aie/extras files: ${clashes[*]}" >&2
  echo "merge-extras: drop mlir_python_extras from the toolchain manifest if this wheel vendors them" >&2
  exit 1
fi

cp -R "$src"/. "$dst"/
chmod -R u+w "$dst"

for need in types.py meta.py util.py runtime/passes.py dialects/ext/arith.py; do
  if [ ! -f "$dst/$need" ]; then
    echo "merge-extras: aie/extras/$need is missing after the merge" >&2
    exit 1
  fi
done
if [ -e "$dst/extras" ]; then
  echo "merge-extras: aie/extras/extras exists: the copy nested" >&2
  exit 1
fi
