"""XDNA2 (AMD AIE2P) code generation: Peano C kernels and their host build."""
