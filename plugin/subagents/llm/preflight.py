"""Checks run by ``subagents shell`` and ``serve`` before they accept a message.

Every model the project uses (the command generator's and each sub agent's) must have an API
key (or an ``api_base``, where local servers often need none) and its endpoint must answer.
The problems are reported together on one screen, with the fixes, instead of a traceback after
the first message.
"""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass

from subagents.config._base import resolve_env
from subagents.config.project import Project
from subagents.exceptions import ConfigError
from subagents.llm.settings import ModelSettings, resolve_model_settings

OPENAI_BASE = "https://api.openai.com/v1"


@dataclass(frozen=True)
class ModelProblem:
    """One model that cannot be used, and for whom."""

    code: str
    """``preflight.api_key_missing``, ``preflight.model_unreachable`` or
    ``preflight.credentials_refused``."""
    callers: tuple[str, ...]
    model: str
    endpoint: str
    message: str


def project_models(project: Project) -> dict[tuple[str, str, str | None], tuple[ModelSettings,
                                                                              list[str]]]:
    """The distinct models of a project -> (settings, who uses them)."""
    found: dict[tuple[str, str, str | None], tuple[ModelSettings, list[str]]] = {}

    def add(caller: str, settings: ModelSettings) -> None:
        for model in settings.members():  # every model of a routed group
            key = (model.called_model, model.api_base or OPENAI_BASE, model.api_key)
            found.setdefault(key, (model, []))[1].append(caller)

    add("command generator", resolve_model_settings(project.pipeline.command_generator_llm(),
                                                    project.endpoints, where="config.yml"))
    called = {str(step.model.call) for _, step in project.agent_call_steps()
              if step.model.exit_if or  # an A2A agent called without exit_if needs no model
              project.agents[str(step.model.call)].config.agent.protocol.value != "A2A"}
    for name in sorted(called):
        spec = project.agents[name]
        add(f"sub agent {name}", resolve_model_settings(spec.config.configuration.llm,
                                                        project.endpoints, where=spec.file))
    return found


def _key_problem(settings: ModelSettings) -> str | None:
    if settings.api_key:
        try:
            resolve_env(settings.api_key, what=f"the api_key of model {settings.model!r}")
        except ConfigError as exc:
            return exc.issue.message
        return None
    if settings.provider == "azure":
        return None if os.environ.get("AZURE_API_KEY") else \
            "no API key: AZURE_API_KEY is not set"
    if os.environ.get("OPENAI_API_KEY") or settings.api_base:
        return None
    return "no API key: OPENAI_API_KEY is not set"


def _api_key(settings: ModelSettings) -> str | None:
    if settings.api_key:
        return resolve_env(settings.api_key)
    # the OpenAI key goes to OpenAI's models only, never to another server
    return os.environ.get("OPENAI_API_KEY") if settings.provider == "openai" else None


async def _probe(settings: ModelSettings, timeout: float) -> tuple[str, str] | None:
    """GET <base>/models: any answer but 401/403 means the endpoint is there."""
    import httpx2

    base = (settings.api_base or OPENAI_BASE).rstrip("/")
    key = _api_key(settings)
    headers = {"authorization": f"Bearer {key}"} if key else {}
    try:
        async with httpx2.AsyncClient(timeout=timeout) as client:
            response = await client.get(f"{base}/models", headers=headers)
    except httpx2.HTTPError as exc:
        return ("preflight.model_unreachable",
                f"the endpoint {base} did not answer ({type(exc).__name__}: {exc})")
    if response.status_code in (401, 403):
        return ("preflight.credentials_refused",
                f"the endpoint {base} refused the API key (HTTP {response.status_code})")
    return None


async def check_models(project: Project, *, timeout: float = 5.0) -> list[ModelProblem]:
    """Every problem with the project's models; an empty list when all can be called."""
    models = list(project_models(project).values())
    problems: list[ModelProblem] = []
    to_probe = []
    for settings, callers in models:
        base = settings.api_base or OPENAI_BASE
        missing = _key_problem(settings)
        if missing:
            problems.append(ModelProblem("preflight.api_key_missing", tuple(callers),
                                         settings.model, base, missing))
        elif settings.provider != "azure":  # azure answers on other paths; the key is checked
            to_probe.append((settings, callers))
    results = await asyncio.gather(*(_probe(s, timeout) for s, _ in to_probe))
    for (settings, callers), result in zip(to_probe, results, strict=True):
        if result is not None:
            problems.append(ModelProblem(result[0], tuple(callers), settings.model,
                                         settings.api_base or OPENAI_BASE, result[1]))
    return problems


def format_problems(problems: list[ModelProblem], *, project_dir: str) -> str:
    """One screen: what is wrong with which model, then the three ways to fix it."""
    lines = ["subagents: the assistant cannot reach its model(s), so it would fail on the "
             "first message.", ""]
    for problem in problems:
        lines.append(f"  [{problem.code}] model {problem.model!r} at {problem.endpoint} "
                     f"(used by {', '.join(problem.callers)}):")
        lines.append(f"      {problem.message}")
    lines += [
        "",
        "Fix it one of these ways:",
        "  1. set the key:  export OPENAI_API_KEY=sk-...  (or the variable named by api_key "
        "in endpoints.yml)",
        "  2. use a local OpenAI-compatible server: set api_base on the models in "
        f"{project_dir}/endpoints.yml,",
        "     e.g. api_base: http://127.0.0.1:11434/v1 (Ollama), and start that server",
        "  3. play the scripted conversation instead, no model needed:  subagents demo",
        "(--no-model-check skips this check.)",
    ]
    return "\n".join(lines)
