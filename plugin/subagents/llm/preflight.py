"""Checks run by ``subagents shell`` and ``serve`` before they accept a message.

Every model the project uses (the command generator's and each sub agent's) must have an API
key (or an ``api_base``, where local servers often need none) and its endpoint must answer; a
provider reached through LiteLLM needs LiteLLM installed and the keys or variables it reads
(its endpoint is not probed). ``${VAR}`` references in ``api_base`` and the key are resolved
first. The problems are reported together on one screen, with the fixes, instead of a
traceback after the first message.
"""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass

from subagents.config import providers
from subagents.config._base import resolve_env
from subagents.config.project import Project
from subagents.exceptions import ConfigError, LLMError
from subagents.llm.settings import ModelSettings, api_key, base_url, resolve_model_settings

OPENAI_BASE = "https://api.openai.com/v1"


@dataclass(frozen=True)
class ModelProblem:
    """One model that cannot be used, and for whom."""

    code: str
    """``preflight.api_key_missing``, ``preflight.extra_missing``,
    ``preflight.model_unreachable`` or ``preflight.credentials_refused``."""
    callers: tuple[str, ...]
    model: str
    endpoint: str
    message: str
    cause: str = ""
    """Why: ``key_missing``, ``key_refused``, ``dns`` (the host name does not resolve),
    ``refused`` (nothing listens at the address), ``timeout`` or ``other``."""


def project_models(project: Project) -> dict[tuple[str, str, str, str | None],
                                             tuple[ModelSettings, list[str]]]:
    """The distinct models of a project -> (settings, who uses them)."""
    found: dict[tuple[str, str, str, str | None], tuple[ModelSettings, list[str]]] = {}

    def add(caller: str, settings: ModelSettings) -> None:
        for model in settings.members():  # every model of a routed group
            key = (model.provider, model.called_model, model.api_base or "", model.api_key)
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


def endpoint_label(settings: ModelSettings) -> str:
    """Where the model's calls go, for messages."""
    if settings.route == "litellm":
        return f"{settings.provider} (through LiteLLM)"
    if settings.provider == "azure":
        return settings.api_base or os.environ.get("AZURE_API_BASE") or "azure"
    try:
        return base_url(settings)
    except (ConfigError, LLMError):
        return settings.api_base or OPENAI_BASE


def _key_problem(settings: ModelSettings) -> tuple[str, str] | None:
    """(code, message) when the model lacks LiteLLM, its key or a variable it names."""
    if settings.route == "litellm" and not providers.litellm_installed():
        return ("preflight.extra_missing", f"the {settings.provider} provider is reached "
                f"through LiteLLM, which is not installed: {providers.EXTRA_INSTALL}")
    try:
        for value, what in ((settings.api_key, "api_key"), (settings.api_base, "api_base")):
            if value:
                resolve_env(value, what=f"the {what} of model {settings.model!r}")
    except ConfigError as exc:
        return ("preflight.api_key_missing", exc.issue.message)
    data = {**settings.options, "api_key": settings.api_key, "api_base": settings.api_base}
    needs = providers.missing(settings.provider, data)
    if needs:
        message, fix = providers.describe_missing(settings.provider, needs)
        return ("preflight.api_key_missing", f"{message}: {fix}")
    if settings.api_key or settings.provider not in ("openai", "azure"):
        return None
    if settings.provider == "azure":
        return None if os.environ.get("AZURE_API_KEY") else \
            ("preflight.api_key_missing", "no API key: AZURE_API_KEY is not set")
    if os.environ.get("OPENAI_API_KEY") or settings.api_base:
        return None
    return ("preflight.api_key_missing", "no API key: OPENAI_API_KEY is not set")


def _probe_key(settings: ModelSettings) -> str | None:
    # the OpenAI key goes to OpenAI's models only, never to another server
    if settings.api_key or settings.provider in providers.HOSTED:
        key = api_key(settings)
        return None if key == "not-needed" else key
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

    try:
        base, key = base_url(settings), _probe_key(settings)
    except (ConfigError, LLMError) as exc:
        return ("preflight.model_unreachable", str(exc), "other")
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
        missing = _key_problem(settings)
        if missing:
            cause = "extra_missing" if missing[0] == "preflight.extra_missing" else "key_missing"
            problems.append(ModelProblem(missing[0], tuple(callers), settings.model,
                                         endpoint_label(settings), missing[1], cause))
        elif settings.provider != "azure" and settings.route == "direct":
            # azure answers on other paths, LiteLLM's providers on their own: keys checked
            to_probe.append((settings, callers))
    results = await asyncio.gather(*(_probe(s, timeout) for s, _ in to_probe))
    for (settings, callers), result in zip(to_probe, results, strict=True):
        if result is not None:
            problems.append(ModelProblem(result[0], tuple(callers), settings.model,
                                         endpoint_label(settings), result[1], result[2]))
    return problems
