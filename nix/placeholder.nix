# A fixed-output hash the manifest holds as null (a placeholder: nothing offline can compute
# it): evaluation stops naming the one command that fills every such hash in, run once online.
# Pure (no inputs), so `nox -s nix` evaluates it offline.
name: hash:
if hash == null then
  throw "${name}: its fixed-output hash is still a placeholder (null). Run `uv run python tools/pin_hashes.py` once, on a machine with network, and commit the manifest it writes (README \"Hardware\")."
else
  hash
