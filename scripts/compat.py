"""Run the projects that ``rasa init --template`` writes through ``subagents validate``.

Rasa's files are never part of this repository: the ``rasa-pro`` wheel is downloaded from PyPI
into a cache folder (reused when present), the template projects are extracted from it into a
temporary folder, and each is validated unchanged. Exit status 0 only if every project passes.

Usage::

    python scripts/compat.py [--cache DIR] [--version 3.21.0] [--keep] [TEMPLATE ...]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

TEMPLATES = ("tutorial", "basic", "finance", "telco")
PREFIX = "rasa/cli/project_templates/"


def _wheel(cache: Path, version: str) -> Path:
    found = sorted(cache.glob(f"rasa_pro-{version}-*.whl"))
    if found:
        return found[0]
    cache.mkdir(parents=True, exist_ok=True)
    print(f"downloading rasa-pro=={version} into {cache}", flush=True)
    subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                    "--only-binary", ":all:", f"rasa-pro=={version}", "-d", str(cache)],
                   check=True, timeout=600)
    found = sorted(cache.glob(f"rasa_pro-{version}-*.whl"))
    if not found:
        raise SystemExit(f"pip did not leave a rasa-pro {version} wheel in {cache}")
    return found[0]


def _extract(wheel: Path, template: str, target: Path) -> Path:
    prefix = f"{PREFIX}{template}/"
    with zipfile.ZipFile(wheel) as archive:
        members = [m for m in archive.namelist() if m.startswith(prefix) and not m.endswith("/")]
        if not members:
            raise SystemExit(f"template {template!r} is not in {wheel.name}")
        for member in members:
            dest = target / member[len(prefix):]
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(archive.read(member))
    return target


def _validate(project: Path) -> tuple[bool, str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(Path(__file__).resolve().parents[1] / "plugin"), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-m", "subagents.cli", "validate", "--project",
                           str(project)], capture_output=True, text=True, timeout=300, env=env,
                          check=False)
    return proc.returncode == 0, (proc.stdout + proc.stderr).strip()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("templates", nargs="*", default=list(TEMPLATES))
    parser.add_argument("--cache", type=Path, default=Path(os.environ.get(
        "SUBAGENTS_COMPAT_CACHE", Path.home() / ".cache" / "subagents" / "compat")))
    parser.add_argument("--version", default="3.21.0")
    parser.add_argument("--keep", action="store_true", help="keep the extracted projects")
    args = parser.parse_args(argv)
    wheel = _wheel(args.cache, args.version)
    work = Path(tempfile.mkdtemp(prefix="subagents-compat-"))
    failed = []
    try:
        for template in args.templates:
            project = _extract(wheel, template, work / template)
            ok, output = _validate(project)
            print(f"== {template}: validate {'passed' if ok else 'FAILED'}")
            print("   " + output.replace("\n", "\n   "), flush=True)
            if not ok:
                failed.append(template)
    finally:
        if args.keep:
            print(f"projects kept in {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    print(f"{len(args.templates) - len(failed)} passed, {len(failed)} failed"
          + (f" ({', '.join(failed)})" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
