"""poot's benchmarks: each module ``bench_*.py`` defines ``run() -> list[Figure]``.

Every figure is a ratio against a baseline measured in the same run (the machines are shared and
noisy), with the absolute times beside it. Run them all with ``nox -s bench`` or
``python -m benchmarks [NAME ...]``.
"""
