"""Wall time and peak memory of `import subagents` and of loading the example project."""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# VmHWM (peak RSS of this process image); ru_maxrss would carry the parent's peak across exec
SNIPPET = ("import time; t = time.perf_counter(); {stmt}; "
           "hwm = [l for l in open('/proc/self/status') if l.startswith('VmHWM')][0]; "
           "print((time.perf_counter() - t) * 1000, int(hwm.split()[1]) / 1024)")


def measure(stmt: str, runs: int = 7) -> tuple[float, float]:
    times, rss = [], []
    for _ in range(runs):
        out = subprocess.run([sys.executable, "-c", SNIPPET.format(stmt=stmt)], cwd=ROOT,
                             capture_output=True, text=True, check=True).stdout.split()
        times.append(float(out[0]))
        rss.append(float(out[1]))
    return statistics.median(times), max(rss)


def main() -> None:
    print("== import and load ==")
    for label, stmt in [
        ("import subagents", "import subagents"),
        ("import subagents.MCPOpenAgent", "from subagents import MCPOpenAgent"),
        ("load example project", "from subagents.config import load_project; "
                                 "load_project('.')"),
    ]:
        wall, rss = measure(stmt)
        print(f"{label:32s} median {wall:8.1f} ms   peak RSS {rss:6.1f} MB (whole process, VmHWM)")


if __name__ == "__main__":
    # --help describes the benchmark instead of running it
    argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0]).parse_args()
    main()
