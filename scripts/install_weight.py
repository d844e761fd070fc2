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


def _extras(requirement: str) -> frozenset[str]:
    """The extras a requirement asks for (``sqlalchemy[asyncio]`` -> ``{"asyncio"}``)."""
    found = re.match(r"[^\[;]*\[([^\]]*)\]", requirement)
    return frozenset(e.strip().lower() for e in found.group(1).split(",")) if found else frozenset()


def _wanted(requirement: str, extras: frozenset[str]) -> bool:
    """A requirement needed without extras, or by one of ``extras``. Other markers (platform,
    Python version) are not evaluated: what they leave out is simply not installed."""
    asked = set(re.findall(r"extra\s*==\s*[\"']([^\"']+)[\"']", requirement))
    return not asked or bool(asked & extras)


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

    def closure(name: str, extras: frozenset[str] = frozenset()) -> set[str]:
        """The distributions ``name`` (with ``extras``) brings, itself included."""
        seen: set[tuple[str, frozenset[str]]] = set()
        todo = [(name, extras)]
        while todo:
            current, wanted = todo.pop()
            if (current, wanted) in seen or current not in dists:
                continue
            seen.add((current, wanted))
            for req in dists[current].requires or []:
                if _wanted(req, wanted):
                    todo.append((_name(req), _extras(req)))
        return {dist for dist, _ in seen}

    root = dists["subagents"]
    requirements = [r for r in root.requires or [] if _wanted(r, frozenset())]
    direct = [_name(r) for r in requirements]
    direct_extras = {_name(r): _extras(r) for r in requirements}
    sizes = {name: _size(dist) for name, dist in dists.items()}
    everything = closure("subagents")
    print(f"installed: {len(everything)} distributions, "
          f"{sum(sizes[n] for n in everything) / 1e6:.0f} MB")
    per = {name: closure(name, direct_extras[name]) for name in direct}
    for name in direct:
        others = set().union(*(per[o] for o in direct if o != name))
        own = per[name] - others
        print(f"  {name:22} {len(per[name]):3} distributions, {len(own):3} only its own, "
              f"{sum(sizes[n] for n in own) / 1e6:6.1f} MB only its own")
    return 0


if __name__ == "__main__":
    sys.exit(main())
