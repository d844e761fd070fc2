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
from subagents.llm.client import ModelSettings, resolve_model_settings

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
    cause: str = ""
    """Why: ``key_missing``, ``key_refused``, ``dns`` (the host name does not resolve),
    ``refused`` (nothing listens at the address), ``timeout`` or ``other``."""


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


def _cause(exc: BaseException) -> str:
    """``dns``, ``refused``, ``timeout`` or ``other``, from the exception and what caused it."""
    import socket

    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, socket.gaierror):
            return "dns"
        if isinstance(seen, ConnectionRefusedError):
            return "refused"
        if isinstance(seen, TimeoutError) or "Timeout" in type(seen).__name__:
            return "timeout"
        seen = seen.__cause__ or seen.__context__
    return "other"


_CAUSE_TEXT = {"dns": "its host name could not be resolved (DNS lookup failed)",
               "refused": "nothing accepts connections there (connection refused)",
               "timeout": "no answer in time"}


async def _probe(settings: ModelSettings, timeout: float) -> tuple[str, str, str] | None:
    """GET <base>/models: any answer but 401/403 means the endpoint is there.

    Returns:
        None, or ``(code, message, cause)``.
    """
    import httpx2

    base = (settings.api_base or OPENAI_BASE).rstrip("/")
    key = _api_key(settings)
    headers = {"authorization": f"Bearer {key}"} if key else {}
    try:
        async with httpx2.AsyncClient(timeout=timeout) as client:
            response = await client.get(f"{base}/models", headers=headers)
    except httpx2.HTTPError as exc:
        cause = _cause(exc)
        why = _CAUSE_TEXT.get(cause, f"{type(exc).__name__}: {exc}")
        return ("preflight.model_unreachable", f"the endpoint {base} did not answer: {why}",
                cause)
    if response.status_code in (401, 403):
        return ("preflight.credentials_refused",
                f"the endpoint {base} refused the API key (HTTP {response.status_code})",
                "key_refused")
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
                                         settings.model, base, missing, "key_missing"))
        elif settings.provider != "azure":  # azure answers on other paths; the key is checked
            to_probe.append((settings, callers))
    results = await asyncio.gather(*(_probe(s, timeout) for s, _ in to_probe))
    for (settings, callers), result in zip(to_probe, results, strict=True):
        if result is not None:
            problems.append(ModelProblem(result[0], tuple(callers), settings.model,
                                         settings.api_base or OPENAI_BASE, result[1],
                                         result[2]))
    return problems
