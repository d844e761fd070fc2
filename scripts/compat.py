"""Run the projects that ``rasa init --template`` writes through ``subagents validate``.

Rasa's files are never part of this repository: the ``rasa-pro`` wheel is downloaded from PyPI
into a cache folder (reused when present), the template projects are extracted from it into a
temporary folder, and each is validated unchanged. Exit status 0 only if every project passes.

With ``--e2e`` the templates' own conversation tests run too, each with only an ``llm_script``
added (the scripted model replies in ``scripts/compat_scripts/<template>.yml``); their results
are reported, and fail the run only with ``--strict-e2e``.

Usage::

    python scripts/compat.py [--cache DIR] [--version 3.21.0] [--keep] [--e2e] [TEMPLATE ...]
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
HERE = Path(__file__).resolve().parent


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


def _subagents(*args: str, timeout: float = 300, cwd: Path | None = None) -> tuple[bool, str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(HERE.parent / "plugin"), os.environ.get("PYTHONPATH", "")])}
    # never a real key: the scripted model answers every model call; some template actions
    # build an OpenAI client when they are registered, which needs a key to exist
    env["OPENAI_API_KEY"] = "sk-compat-not-a-real-key"
    proc = subprocess.run([sys.executable, "-m", "subagents.cli.main", *args], capture_output=True,
                          text=True, timeout=timeout, env=env, check=False, cwd=cwd)
    return proc.returncode == 0, (proc.stdout + proc.stderr).strip()


def _validate(project: Path) -> tuple[bool, str]:
    return _subagents("validate", "--project", str(project))


def _scripted_tests(project: Path, template: str) -> tuple[Path | None, list[str], list[str]]:
    """Copy the template's tests with each case's ``llm_script`` added; returns the folder, the
    cases skipped on purpose (with the reason) and the cases that have no script yet."""
    from ruamel.yaml import YAML

    overlay_file = HERE / "compat_scripts" / f"{template}.yml"
    tests = project / "tests"
    if not tests.is_dir():
        return None, [], []
    yaml = YAML(typ="safe")
    overlay = yaml.load(overlay_file.read_text(encoding="utf-8")) if overlay_file.is_file() \
        else {}
    scripts = overlay.get("cases") or {}
    skips = overlay.get("skip") or {}
    skipped: list[str] = []
    missing: list[str] = []
    target = project / "compat_e2e"
    for path in sorted(tests.rglob("*.yml")):
        data = yaml.load(path.read_text(encoding="utf-8"))
        if not isinstance(data, dict) or "test_cases" not in data:
            continue
        kept = []
        for case in data["test_cases"] or []:
            name = case.get("test_case")
            if name in skips:
                skipped.append(f"{name}: {skips[name]}")
            elif name not in scripts:
                missing.append(f"{name}: no llm_script yet")
            else:
                kept.append({**case, "llm_script": scripts[name]})
        if kept:
            out = target / path.relative_to(tests)
            out.parent.mkdir(parents=True, exist_ok=True)
            with out.open("w", encoding="utf-8") as handle:
                YAML(typ="safe", pure=True).dump({**data, "test_cases": kept}, handle)
    return (target if target.is_dir() else None), skipped, missing


def _report_not_run(skipped: list[str], missing: list[str]) -> None:
    for note in skipped:
        print(f"   skipped: {note}")
    for note in missing:
        print(f"   not run: {note}")


def _e2e(project: Path, template: str) -> bool:
    """Run the template's scripted conversation tests; a case without a script fails it, a
    case skipped on purpose (listed with its reason) does not."""
    folder, skipped, missing = _scripted_tests(project, template)
    if folder is None:
        print(f"== {template}: no conversation tests"
              + (" scripted" if skipped or missing else ""))
        _report_not_run(skipped, missing)
        return not missing
    # from inside the project, as Rasa is run: custom actions open files by relative paths
    ok, output = _subagents("test", "--project", str(project), str(folder), timeout=900,
                            cwd=project)
    print(f"== {template}: e2e {'passed' if ok else 'FAILED'}")
    print("   " + output.replace("\n", "\n   "), flush=True)
    _report_not_run(skipped, missing)
    return ok and not missing


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("templates", nargs="*", default=list(TEMPLATES))
    parser.add_argument("--cache", type=Path, default=Path(os.environ.get(
        "SUBAGENTS_COMPAT_CACHE", Path.home() / ".cache" / "subagents" / "compat")))
    parser.add_argument("--version", default="3.21.0")
    parser.add_argument("--keep", action="store_true", help="keep the extracted projects")
    parser.add_argument("--e2e", action="store_true",
                        help="also run the templates' conversation tests (scripted model)")
    parser.add_argument("--strict-e2e", action="store_true",
                        help="a failing conversation test fails the run")
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
            e2e = args.e2e or args.strict_e2e
            if e2e and ok and not _e2e(project, template) and args.strict_e2e:
                failed.append(f"{template} e2e")
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
