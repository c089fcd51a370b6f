"""Run the benchmarks: ``python -m benchmarks [NAME ...]`` (names without ``bench_``)."""

from __future__ import annotations

import importlib
import pkgutil
import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    here = Path(__file__).parent
    names = sorted(m.name for m in pkgutil.iter_modules([str(here)]) if m.name.startswith("bench_"))
    wanted = {f"bench_{a}" if not a.startswith("bench_") else a for a in argv}
    for name in names:
        if wanted and name not in wanted:
            continue
        module = importlib.import_module(f"benchmarks.{name}")
        print(f"== {name}: {(module.__doc__ or '').strip().splitlines()[0]}")
        for figure in module.run():
            print("  " + figure.line())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
