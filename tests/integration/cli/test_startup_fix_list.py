"""The start-up fix list of ``shell``/``serve`` names the actual cause: a missing key, a local
port where nothing listens, a host name that does not resolve, a refused key.

The missing key and the closed local port are produced for real (a child ``subagents shell``);
the DNS failure is classified from the exception chain a failed lookup raises (a real
``socket.gaierror`` behind the HTTP client's error), so no test depends on a name server.
"""

from __future__ import annotations

import os
import socket

import httpx2
from subagents.cli.startup_help import format_model_problems
from subagents.llm.preflight import ModelProblem, _cause

from tests.integration.cli.test_cli_first_run import cli, closed_port


def with_api_base(root, base: str) -> None:
    endpoints = root / "endpoints.yml"
    endpoints.write_text(endpoints.read_text().replace(
        "model: gpt-4.1-mini", f"model: gpt-4.1-mini\n        api_base: {base}"))


def test_a_missing_key_offers_the_key_and_a_local_server(tmp_path):
    assert cli("init", "p", "--template", "minimal", cwd=tmp_path).returncode == 0
    env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}
    result = cli("shell", "--project", "p", cwd=tmp_path, env=env)
    assert result.returncode == 1
    assert "[preflight.api_key_missing]" in result.stderr
    assert "export OPENAI_API_KEY=sk-..." in result.stderr
    assert "api_base: http://127.0.0.1:11434/v1" in result.stderr


def test_a_closed_local_port_says_to_start_the_server_not_to_set_a_key(tmp_path):
    assert cli("init", "p", "--template", "minimal", cwd=tmp_path).returncode == 0
    port = closed_port()
    with_api_base(tmp_path / "p", f"http://127.0.0.1:{port}/v1")
    result = cli("shell", "--project", "p", cwd=tmp_path,
                 env={**os.environ, "OPENAI_API_KEY": "sk-set"})
    assert result.returncode == 1
    assert "connection refused" in result.stderr
    assert f"start the model server that should listen on 127.0.0.1:{port}" in result.stderr
    assert "OPENAI_API_KEY" not in result.stderr
    assert "set api_base" not in result.stderr


def chained(cause: BaseException, message: str) -> httpx2.ConnectError:
    """The HTTP client's error with ``cause`` behind it, as raising it inside ``except`` links
    them."""
    error = httpx2.ConnectError(message)
    error.__cause__ = cause
    return error


def test_a_failed_name_lookup_is_classified_as_dns():
    lookup = socket.gaierror(socket.EAI_NONAME, "Name or service not known")
    assert _cause(chained(lookup, str(lookup))) == "dns"
    refused = ConnectionRefusedError(111, "Connect call failed")
    assert _cause(chained(refused, "All connection attempts failed")) == "refused"
    assert _cause(chained(ValueError("x"), "other")) == "other"


def problem(cause: str, endpoint: str = "https://api.openai.com/v1") -> ModelProblem:
    code = {"key_missing": "preflight.api_key_missing",
            "key_refused": "preflight.credentials_refused"}.get(cause,
                                                               "preflight.model_unreachable")
    return ModelProblem(code, ("command generator",), "gpt-4.1-mini", endpoint, "...", cause)


def test_a_dns_failure_with_a_key_set_does_not_offer_the_key():
    text = format_model_problems([problem("dns")], project_dir="p")
    assert "host name 'api.openai.com' could not be resolved" in text
    assert "export OPENAI_API_KEY" not in text
    assert "subagents demo" in text


def test_a_refused_key_says_so_and_fixes_are_not_repeated():
    text = format_model_problems([problem("key_refused"), problem("key_refused")],
                                 project_dir="p")
    assert text.count("the key was refused") == 1
    assert "set api_base" not in text
