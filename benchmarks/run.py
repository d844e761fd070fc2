"""Run every benchmark and print its figures with the machine it ran on (`make bench`)."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import bench_example
import bench_history
import bench_import
import bench_loop
import bench_mcp
import bench_serve
from _common import machine


def main() -> None:
    logging.disable(logging.INFO)
    import structlog

    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    print(f"machine: {machine()}\n")
    bench_import.main()
    print()
    asyncio.run(bench_mcp.main())
    print()
    asyncio.run(bench_loop.main())
    print()
    asyncio.run(bench_serve.main())
    print()
    asyncio.run(bench_example.main())
    print()
    asyncio.run(bench_history.main())


if __name__ == "__main__":
    # --help describes the benchmark instead of running it
    argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0]).parse_args()
    main()
