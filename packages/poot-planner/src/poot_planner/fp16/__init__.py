"""FP16 narrowing for a target with a narrowing contract (intel-npu4): the pass that carries a
program in FP16 (``narrowing``), the in-graph checks it needs (``checks``: overflow and score
guards) and the host prelude that keeps float-free refused equations out of the device chain
(``prelude``)."""
