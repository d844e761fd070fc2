"""``subagents test --live-model``: the configured models are checked once before the first case.

A model that cannot be called would make every step of every case differ from what was recorded;
instead each case fails once, naming the model, its address and the fix.
"""

from __future__ import annotations

from pathlib import Path

from subagents.config.project import ProjectPaths

_FIXES = {
    "preflight.api_key_missing": "set the model's API key (export OPENAI_API_KEY=..., or the "
                                 "variable its api_key names in endpoints.yml)",
    "preflight.model_unreachable": "start the model server, or correct the model's api_base in "
                                   "endpoints.yml",
    "preflight.credentials_refused": "check the model's API key",
}


class LiveModelCheck:
    """Checks the project's models on first use and remembers the answer for the run."""

    def __init__(self, project_dir: Path | ProjectPaths) -> None:
        self.project_dir = project_dir
        self._checked = False
        self._problem: str | None = None

    async def problem(self) -> str | None:
        """Why the live models cannot answer (one text for the case's failure), or None."""
        if not self._checked:
            self._problem = await _problem(self.project_dir)
            self._checked = True
        return self._problem


async def _problem(project_dir: Path | ProjectPaths) -> str | None:
    from subagents.config.project import load_project
    from subagents.llm.preflight import check_models

    problems = await check_models(load_project(project_dir))
    if not problems:
        return None
    lines = ["the live model cannot be used, so the case did not run:"]
    fixes: list[str] = []
    for problem in problems:
        lines.append(f"  [{problem.code}] model {problem.model!r} at {problem.endpoint} (used by "
                     f"{', '.join(problem.callers)}): {problem.message}")
        fix = _FIXES.get(problem.code, "check the model settings in endpoints.yml")
        if fix not in fixes:
            fixes.append(fix)
    lines.append("  fix: " + "; ".join(fixes) + " (without --live-model the case replays its "
                 "llm_script)")
    return "\n".join(lines)
