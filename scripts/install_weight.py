"""What a bare ``pip install subagents`` brings in, per direct dependency.

Run it with the Python of a fresh virtualenv in which only the package was installed::

    python3.11 -m venv /tmp/w && /tmp/w/bin/pip install .
    /tmp/w/bin/python scripts/install_weight.py

It prints the number of distributions and their size on disk (from each one's RECORD), then, for
each direct dependency, the distributions it pulls in and the megabytes that only it brings (those
no other direct dependency needs too).
"""

from __future__ import annotations

import re
import sys
from importlib import metadata
from pathlib import Path


def _name(requirement: str) -> str:
    return re.split(r"[\s\[<>=!~;(]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def _size(dist: metadata.Distribution) -> int:
    total = 0
    for file in dist.files or []:
        path = Path(str(dist.locate_file(file)))
        if path.is_file():
            total += path.stat().st_size
    return total


def main() -> int:
    """Print the figures; returns the exit status."""
    dists = {d.metadata["Name"].lower().replace("_", "-"): d for d in metadata.distributions()}
    dists.pop("pip", None)
    dists.pop("setuptools", None)

    def closure(name: str) -> set[str]:
        seen: set[str] = set()
        todo = [name]
        while todo:
            current = todo.pop()
            if current in seen or current not in dists:
                continue
            seen.add(current)
            for req in dists[current].requires or []:
                if "extra ==" not in req:
                    todo.append(_name(req))
        return seen

    root = dists["subagents"]
    direct = [_name(r) for r in root.requires or [] if "extra ==" not in r]
    sizes = {name: _size(dist) for name, dist in dists.items()}
    everything = closure("subagents")
    print(f"installed: {len(everything)} distributions, "
          f"{sum(sizes[n] for n in everything) / 1e6:.0f} MB")
    per = {name: closure(name) for name in direct}
    for name in direct:
        others = set().union(*(per[o] for o in direct if o != name))
        own = per[name] - others
        print(f"  {name:22} {len(per[name]):3} distributions, {len(own):3} only its own, "
              f"{sum(sizes[n] for n in own) / 1e6:6.1f} MB only its own")
    return 0


if __name__ == "__main__":
    sys.exit(main())
