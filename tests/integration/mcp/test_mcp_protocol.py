"""MCP protocol behaviour against a real server (stdio subprocess or HTTP on 127.0.0.1): binary
content, task-only tools, progress, server logging, client identity, lost HTTP sessions, 401."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest
import uvicorn
from structlog.testing import capture_logs
from subagents import __version__
from subagents.config.endpoints import EndpointsConfig, McpServerConfig
from subagents.exceptions import MCPConnectionError, ToolInvocationError
from subagents.mcp import MCPServerConnection
from subagents.testing import FakeModelServer
from subagents.testing.mcp_http import serve_mcp

from tests.servers.mcp_features_server import server as features_server
from tests.servers.oauth_standin import AuthServer, protected_mcp

REPO = Path(__file__).resolve().parents[3]
STDIO = {"type": "stdio", "command": "python", "args": ["-m", "tests.servers.mcp_features_server"],
         "cwd": str(REPO)}


@contextlib.asynccontextmanager
async def connected(transport: str, **extra) -> AsyncIterator[MCPServerConnection]:
    async with contextlib.AsyncExitStack() as stack:
        if transport == "stdio":
            config = McpServerConfig(name="features", **STDIO, **extra)
        else:
            url = await stack.enter_async_context(serve_mcp(features_server, transport))
            config = McpServerConfig(name="features", type=transport, url=url, **extra)
        conn = MCPServerConnection(config, root=REPO)
        await conn.start(attempts=1)
        try:
            yield conn
        finally:
            await conn.close()


@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_binary_content_reaches_the_model_as_short_placeholders(transport):
    with anyio.fail_after(30):
        async with connected(transport) as conn:
            picture = await conn.call_tool("picture", {}, timeout=5)
            audio = await conn.call_tool("recording", {}, timeout=5)
            files = await conn.call_tool("report_files", {}, timeout=5)
    assert picture.result == "Revenue chart\n[image: image/png, 4096 bytes]"
    assert audio.result == "[audio: audio/wav, 2000 bytes]"
    assert files.result.splitlines() == [
        "[resource: file:///reports/q3.pdf, application/pdf, 1000 bytes]",
        "[resource link: file:///reports/q3-full.pdf, q3-full.pdf, application/pdf, 123456 bytes]",
    ]


@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_binary_values_inside_structured_content_become_placeholders(transport):
    with anyio.fail_after(30):
        async with connected(transport) as conn:
            result = await conn.call_tool("media_file", {}, timeout=5)
    assert json.loads(result.result) == {
        "content": ["[image: image/png, 4096 bytes]",
                    "[resource: file:///reports/q3.pdf, application/pdf, 1000 bytes]"],
        "name": "chart.png", "thumbnail": "[data: image/png, 4096 bytes]",
        "raw": "[binary: 4096 bytes]"}
    assert len(result.result) < 300  # no base64 left anywhere
    assert [image.mime_type for image in result.images] == ["image/png"]


async def test_task_only_tools_are_left_out_with_a_log_line():
    with anyio.fail_after(30), capture_logs() as logs:
        async with connected("stdio") as conn:
            names = {t.name for t in await conn.tools()}
    assert "picture" in names
    assert "long_report" not in names
    skipped = [e for e in logs if e["event"] == "mcp.tools.task_only_skipped"]
    assert [(e["server"], e["tool"]) for e in skipped] == [("features", "long_report")]


@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_our_client_name_and_version_reach_the_server(transport):
    with anyio.fail_after(30):
        async with connected(transport) as conn:
            who = await conn.call_tool("client_name", {}, timeout=5)
    assert who.result == f"subagents {__version__}"


async def test_progress_notifications_extend_a_running_calls_timeout():
    # Five steps of 0.4 s take 2 s in all, twice the 1 s timeout; each step reports progress.
    with anyio.fail_after(30):
        async with connected("http") as conn:
            result = await conn.call_tool("crawl_with_progress", {"steps": 5, "step_ms": 400},
                                          timeout=1)
    assert (result.result, result.is_error) == ("crawled 5 pages", False)


@pytest.mark.parametrize("transport", ["stdio", "sse", "http"])
async def test_progress_keeps_an_agents_call_alive_and_a_silent_call_still_times_out(transport):
    # tool_timeout 1 s. Eight steps of 0.3 s report progress after each step: 2.4 s in all,
    # past the 1 s timeout and past the executor's own backstop (timeout + 1 s) as well; the
    # call completes. A call that reports nothing for 2 s is cut after the timeout.
    script = [{"tool_calls": [{"crawl_with_progress": {"steps": 8, "step_ms": 300}}]},
              {"tool_calls": [{"wait_quietly": {"ms": 2000}}]},
              {"text": "Done.", "tool_calls": [{"task_completed": {}}]}]
    _, fake = await run_agent_on_features(
        script, transport=transport,
        configuration={"tool_timeout": 1, "progress_messages": False})
    last = fake.requests_of("reader")[-1]
    crawled, waited = [str(m["content"]) for m in last.messages if m.get("role") == "tool"]
    assert crawled == "crawled 8 pages"
    assert "did not answer within 1s" in waited
    assert "waited" not in waited


async def test_progress_extends_a_call_at_most_ten_times_its_timeout():
    # tool_timeout 0.3 s: progress may keep the call alive for about 3 s. Thirty steps of 0.2 s
    # (6 s) each report progress, yet the call is cut once the cap is reached.
    script = [{"tool_calls": [{"crawl_with_progress": {"steps": 30, "step_ms": 200}}]},
              {"text": "Done.", "tool_calls": [{"task_completed": {}}]}]
    _, fake = await run_agent_on_features(
        script, transport="http",
        configuration={"tool_timeout": 0.3, "progress_messages": False})
    last = fake.requests_of("reader")[-1]
    (crawled,) = [str(m["content"]) for m in last.messages if m.get("role") == "tool"]
    assert "crawled 30 pages" not in crawled
    assert "did not answer" in crawled


@pytest.fixture
def mcp_log_level_info():
    logger = logging.getLogger("subagents.mcp")
    previous = logger.level
    logger.setLevel(logging.INFO)
    yield
    logger.setLevel(previous)


@pytest.mark.usefixtures("mcp_log_level_info")
@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_server_log_messages_reach_our_log_at_our_level(transport):
    with anyio.fail_after(30), capture_logs() as logs:
        async with connected(transport) as conn:
            await conn.call_tool("chatty", {}, timeout=5)
            # the notifications travel ahead of the result on stdio, but not always on HTTP
            for _ in range(200):
                if len([e for e in logs if e["event"] == "mcp.server.log"]) >= 2:
                    break
                await asyncio.sleep(0.01)
    server_logs = [e for e in logs if e["event"] == "mcp.server.log"]
    assert [(e["server"], e["logger"], e["mcp_level"]) for e in server_logs] == [
        ("features", "crawler", "info"), ("features", "crawler", "warning")]
    assert server_logs[0]["data"] == "fetched 3 pages"
    assert server_logs[1]["log_level"] == "warning"


@contextlib.asynccontextmanager
async def serve_on(port: int) -> AsyncIterator[int]:
    """A fresh app (new session manager, no sessions) for the features server on ``port``."""
    config = uvicorn.Config(features_server.streamable_http_app(), host="127.0.0.1", port=port,
                            log_level="error", lifespan="on")
    uv = uvicorn.Server(config)
    task = asyncio.create_task(uv.serve())
    try:
        while not uv.started:
            if task.done():
                task.result()
            await asyncio.sleep(0.01)
        yield uv.servers[0].sockets[0].getsockname()[1]
    finally:
        uv.should_exit = True
        await task


async def test_a_lost_http_session_is_re_established_and_the_call_resent():
    with anyio.fail_after(60), capture_logs() as logs:
        async with serve_on(0) as port:
            config = McpServerConfig(name="features", type="http",
                                     url=f"http://127.0.0.1:{port}/mcp")
            conn = MCPServerConnection(config, root=REPO)
            await conn.start(attempts=1)
            first = await conn.call_tool("client_name", {}, timeout=5)
        try:
            async with serve_on(port):  # restarted: it knows no session
                # not read-only: resent only because the server never saw it
                again = await conn.call_tool("client_name", {}, timeout=5)
                later = await conn.call_tool("client_name", {}, timeout=5)
        finally:
            await conn.close()
    assert first.result == again.result == later.result == f"subagents {__version__}"
    assert conn.connects == 2
    assert any(e["event"] in ("mcp.session.expired", "mcp.reconnecting") for e in logs)


@pytest.mark.parametrize("transport", ["http", "sse"])
async def test_a_401_at_connect_says_unauthorized(transport, monkeypatch):
    monkeypatch.setenv("FEATURES_TOKEN", "wrong")
    with anyio.fail_after(30):
        async with serve_mcp(features_server, transport,
                             require_header=("authorization", "Bearer right")) as url:
            config = McpServerConfig(name="features", type=transport, url=url,
                                     token="${FEATURES_TOKEN}")
            conn = MCPServerConnection(config, root=REPO)
            with pytest.raises(MCPConnectionError) as caught:
                await conn.start(attempts=1)
    assert caught.value.code == "mcp.unauthorized"


@pytest.mark.parametrize("auth_method", ["client_secret_basic", "client_secret_post"])
async def test_oauth_client_credentials_discover_the_token_endpoint_and_send_resource(
        auth_method, monkeypatch):
    monkeypatch.setenv("FEATURES_SECRET", "s3cret:/&")
    auth = AuthServer(client_id="agent one", client_secret="s3cret:/&")
    with anyio.fail_after(30):
        async with protected_mcp(features_server, auth) as url:
            oauth = {"client_id": "agent one", "client_secret": "${FEATURES_SECRET}",
                     "auth_method": auth_method, "issuer": auth.base, "scope": "tools"}
            async with connected_to(url, oauth=oauth) as conn:
                who = await conn.call_tool("client_name", {}, timeout=5)
    assert who.result == f"subagents {__version__}"
    assert len(auth.grants) == 1
    grant = auth.grants[0]
    assert grant["auth_method"] == ("basic" if auth_method == "client_secret_basic" else "post")
    assert ("client_secret" in grant) == (auth_method == "client_secret_post")
    assert grant["grant_type"] == "client_credentials"
    assert grant["resource"] == url
    assert grant["scope"] == "tools"


@pytest.mark.parametrize(("listed", "configured", "sent"), [
    (["client_secret_basic"], None, "basic"),
    (["client_secret_post"], None, "post"),
    (None, None, "basic"),  # the metadata lists nothing: Basic, the RFC 6749 default
    (["client_secret_basic", "client_secret_post"], None, "basic"),
    (["client_secret_basic", "client_secret_post"], "client_secret_post", "post"),
    (["client_secret_basic"], "client_secret_post", "post"),  # configured always wins
])
async def test_the_token_request_authenticates_as_the_metadata_allows_unless_configured(
        listed, configured, sent, monkeypatch):
    monkeypatch.setenv("FEATURES_SECRET", "s3cret")
    auth = AuthServer(client_id="agent", client_secret="s3cret", auth_methods=listed)
    oauth = {"client_id": "agent", "client_secret": "${FEATURES_SECRET}", "issuer": auth.base}
    if configured:
        oauth["auth_method"] = configured
    with anyio.fail_after(30):
        async with protected_mcp(features_server, auth) as url:
            oauth["issuer"] = auth.base
            config = McpServerConfig(name="features", type="http", url=url, oauth=oauth)
            conn = MCPServerConnection(config, root=REPO)
            try:
                await conn.start(attempts=1)
                who = await conn.call_tool("client_name", {}, timeout=5)
            except MCPConnectionError:
                who = None
            finally:
                await conn.close()
    assert [grant["auth_method"] for grant in auth.grants] == [sent]
    if configured is None or listed is None or configured in listed:
        assert who is not None
        assert who.result == f"subagents {__version__}"


async def test_oauth_fetches_a_new_token_after_a_401(monkeypatch):
    monkeypatch.setenv("FEATURES_SECRET", "s3cret")
    auth = AuthServer(client_id="agent", client_secret="s3cret")
    with anyio.fail_after(30):
        async with protected_mcp(features_server, auth) as url:
            oauth = {"client_id": "agent", "client_secret": "${FEATURES_SECRET}",
                     "issuer": auth.base}
            async with connected_to(url, oauth=oauth) as conn:
                first = await conn.call_tool("client_name", {}, timeout=5)
                auth.revoke_all()  # the token expires or is revoked mid-session
                second = await conn.call_tool("client_name", {}, timeout=5)
    assert first.result == second.result == f"subagents {__version__}"
    assert len(auth.grants) == 2
    assert conn.connects == 1


async def test_oauth_with_a_wrong_secret_fails_to_connect(monkeypatch):
    monkeypatch.setenv("FEATURES_SECRET", "wrong")
    auth = AuthServer(client_id="agent", client_secret="s3cret")
    with anyio.fail_after(30):
        async with protected_mcp(features_server, auth) as url:
            config = McpServerConfig(name="features", type="http", url=url, oauth={
                "client_id": "agent", "client_secret": "${FEATURES_SECRET}",
                "issuer": auth.base})
            conn = MCPServerConnection(config, root=REPO)
            with pytest.raises(MCPConnectionError):
                await conn.start(attempts=1)
    assert auth.grants[0]["grant_type"] == "client_credentials"


@contextlib.asynccontextmanager
async def connected_to(url: str, root: Path = REPO, type: str = "http", **extra
                       ) -> AsyncIterator[MCPServerConnection]:
    conn = MCPServerConnection(McpServerConfig(name="features", type=type, url=url, **extra),
                               root=root)
    await conn.start(attempts=1)
    try:
        yield conn
    finally:
        await conn.close()


@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_roots_are_offered_only_when_configured(transport, tmp_path):
    (tmp_path / "docs").mkdir()
    with anyio.fail_after(30):
        async with connected(transport) as conn:
            none = await conn.call_tool("show_roots", {}, timeout=5)
        async with connected(transport, roots=[str(tmp_path / "docs"), "file:///srv/data"]
                             ) as conn:
            some = await conn.call_tool("show_roots", {}, timeout=5)
    assert none.result == "no roots"
    assert some.result.splitlines() == [(tmp_path / "docs").resolve().as_uri(),
                                        "file:///srv/data"]


async def test_sampling_is_answered_by_the_configured_model_group_with_a_token_cap():
    async with FakeModelServer({"sampler": ["Shares rose 3% on strong demand."]}) as fake:
        endpoints = EndpointsConfig(model_groups=[{"id": "cheap", "models": [
            {"provider": "openai", "model": "small-model",
             "api_base": fake.base_url("sampler")}]}])
        with anyio.fail_after(30):
            async with contextlib.AsyncExitStack() as stack:
                url = await stack.enter_async_context(serve_mcp(features_server, "http"))
                config = McpServerConfig(name="features", type="http", url=url,
                                         sampling={"model_group": "cheap", "max_tokens": 200})
                conn = MCPServerConnection(config, root=REPO, endpoints=endpoints)
                await conn.start(attempts=1)
                stack.push_async_callback(conn.close)
                answer = await conn.call_tool("summarise", {"text": "A long report."},
                                              timeout=10)
        [request] = fake.requests_of("sampler")
    assert answer.result == "small-model: Shares rose 3% on strong demand."
    assert request.messages == [{"role": "system", "content": "Summarise in one line."},
                                {"role": "user", "content": "A long report."}]
    assert request.body["max_completion_tokens"] == 200  # the server asked for 500


async def test_sampling_is_not_offered_unless_configured():
    with anyio.fail_after(30):
        async with connected("http") as conn:
            answer = await conn.call_tool("summarise", {"text": "A long report."}, timeout=5)
    assert answer.result == "sampling not offered"


async def run_agent_on_features(script: list, *, server: dict | None = None,
                                ref: dict | None = None, transport: str = "http",
                                configuration: dict | None = None):
    """One agent turn against the features server (HTTP unless ``transport`` says otherwise);
    return (output, fake)."""
    from subagents.agents.open_agent import MCPOpenAgent
    from subagents.channels.collecting import CollectingOutputChannel
    from subagents.config.sub_agent import SubAgentConfig
    from subagents.llm import LLMClient, ModelSettings
    from subagents.mcp import MCPPool

    from tests.agent_harness import agent_input

    async with contextlib.AsyncExitStack() as stack:
        fake = await stack.enter_async_context(FakeModelServer({"reader": script}))
        if transport == "stdio":
            where = dict(STDIO)
        else:
            url = await stack.enter_async_context(serve_mcp(features_server, transport))
            where = {"type": transport, "url": url}
        endpoints = EndpointsConfig(mcp_servers=[McpServerConfig(
            name="features", **where, **(server or {}))])
        pool = MCPPool(endpoints, root=REPO)
        config = SubAgentConfig.model_validate({
            "agent": {"name": "reader", "description": "Read the reports."},
            "configuration": {"include_date_time": False, **(configuration or {})},
            "connections": {"mcp_servers": [{"name": "features", **(ref or {})}]}})
        llm = LLMClient(ModelSettings(model="fake", api_base=fake.base_url("reader"),
                                      max_retries=0, timeout=10), name="reader")
        agent = MCPOpenAgent.from_config(config, endpoints=endpoints, pool=pool, llm=llm)
        try:
            with anyio.fail_after(60):
                await agent.connect()
                output = await agent.run(agent_input("Q3?", name="reader"),
                                         CollectingOutputChannel())
        finally:
            await agent.disconnect()
            await pool.close()
    return output, fake


async def test_the_agent_reads_a_resource_link_through_read_resource():
    script = [
        {"tool_calls": [{"report_files": {}}]},
        {"tool_calls": [{"read_resource": {"uri": "file:///reports/q3-summary.txt"}},
                        {"read_resource": {"uri": "report://Q2/summary"}},
                        {"read_resource": {"uri": "file:///reports/q3-full.pdf"}}]},
        {"text": "Revenue is up 12%.", "tool_calls": [{"task_completed": {}}]},
    ]
    _, fake = await run_agent_on_features(script, server={"resources": True})
    fake.assert_done()
    first, _, last = fake.requests_of("reader")
    offered = next(t for t in first.body["tools"] if t["function"]["name"] == "read_resource")
    assert "file:///reports/q3-summary.txt" in offered["function"]["description"]
    assert "report://{quarter}/summary" in offered["function"]["description"]
    tool_texts = [m["content"] for m in last.messages if m.get("role") == "tool"][-3:]
    assert tool_texts == ["Q3: revenue up 12%, costs flat.", "Q2: nothing unusual.",
                          "[resource: file:///reports/q3-full.pdf, application/pdf, 1000 bytes]"]


@pytest.mark.parametrize(("server", "ref"), [
    ({}, {}),  # not enabled for the server
    ({"resources": True}, {"exclude_tools": ["read_resource"]}),
    ({"resources": True}, {"include_tools": ["report_files"]}),
])
async def test_read_resource_is_offered_only_when_enabled_and_allowed(server, ref):
    script = [{"text": "Done.", "tool_calls": [{"task_completed": {}}]}]
    _, fake = await run_agent_on_features(script, server=server, ref=ref)
    assert "read_resource" not in fake.requests_of("reader")[0].tool_names


async def test_oauth_private_key_jwt_signs_an_assertion_for_the_authorization_server(
        monkeypatch):
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    key = ec.generate_private_key(ec.SECP256R1())
    monkeypatch.setenv("FEATURES_KEY", key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption()).decode())
    public = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo).decode()
    auth = AuthServer(client_id="agent", client_secret="unused", public_key=public)
    with anyio.fail_after(30):
        async with protected_mcp(features_server, auth) as url:
            oauth = {"client_id": "agent", "auth_method": "private_key_jwt",
                     "private_key": "${FEATURES_KEY}", "signing_algorithm": "ES256",
                     "issuer": auth.base}
            async with connected_to(url, oauth=oauth) as conn:
                who = await conn.call_tool("client_name", {}, timeout=5)
    assert who.result == f"subagents {__version__}"
    [grant] = auth.grants
    assert grant["auth_method"] == "private_key_jwt"
    assert "client_secret" not in grant
    assert grant["resource"] == url


async def browser(url: str) -> None:
    """The person signing in: the stand-in approves at once and redirects to our callback."""
    import httpx2

    async with httpx2.AsyncClient(follow_redirects=True, timeout=10) as client:
        await client.get(url)


async def test_a_login_registers_signs_in_and_the_server_process_reuses_and_refreshes_it(
        tmp_path):
    from subagents.cli.mcp_login import login
    from subagents.mcp.oauth.login import token_file

    auth = AuthServer(client_id="unused", client_secret="unused")
    with anyio.fail_after(60):
        async with protected_mcp(features_server, auth) as url:
            config = McpServerConfig(name="features", type="http", url=url, oauth={
                "grant": "authorization_code", "scope": "tools", "issuer": auth.base})
            names = await login(config, tmp_path, open_url=browser)
            stored = token_file(tmp_path, "features")
            assert stored.stat().st_mode & 0o077 == 0  # the owner only
            # the server process: no browser, the stored login
            async with connected_to(url, oauth=config.oauth.model_dump(), root=tmp_path) as conn:
                first = await conn.call_tool("client_name", {}, timeout=5)
            # later, after the access token expired
            data = json.loads(stored.read_text())
            data["expires_at"] = 1.0  # long past
            stored.write_text(json.dumps(data))
            async with connected_to(url, oauth=config.oauth.model_dump(), root=tmp_path) as conn:
                second = await conn.call_tool("client_name", {}, timeout=5)
    assert "client_name" in names
    assert first.result == second.result == f"subagents {__version__}"
    assert list(auth.registered) == ["dyn-1"]
    assert [g["grant_type"] for g in auth.grants] == ["authorization_code", "refresh_token"]
    assert auth.grants[0]["resource"] == url


@pytest.mark.parametrize(("registration", "listed", "configured", "sent"), [
    (False, ["client_secret_basic"], None, "basic"),  # a server without registration
    (True, ["client_secret_post"], None, "post"),
    (True, ["client_secret_basic", "client_secret_post"], "client_secret_post", "post"),
])
async def test_a_login_with_a_configured_client_id_uses_it_and_never_registers(
        registration, listed, configured, sent, tmp_path, monkeypatch):
    from subagents.cli.mcp_login import login
    from subagents.mcp.oauth.login import token_file

    monkeypatch.setenv("FEATURES_SECRET", "s3cret")
    port = _free_port()
    auth = AuthServer(client_id="my-registered-client", client_secret="s3cret",
                      registration=registration, auth_methods=listed)
    # registered by the operator, with the login's fixed callback
    auth.registered["my-registered-client"] = [f"http://127.0.0.1:{port}/callback"]
    oauth = {"grant": "authorization_code", "client_id": "my-registered-client",
             "client_secret": "${FEATURES_SECRET}", "redirect_port": port, "scope": "tools"}
    if configured:
        oauth["auth_method"] = configured
    with anyio.fail_after(60):
        async with protected_mcp(features_server, auth) as url:
            config = McpServerConfig(name="features", type="http", url=url,
                                     oauth={**oauth, "issuer": auth.base})
            names = await login(config, tmp_path, open_url=browser)
            stored = token_file(tmp_path, "features")
            data = json.loads(stored.read_text())
            data["expires_at"] = 1.0  # the server process finds the access token expired
            stored.write_text(json.dumps(data))
            async with connected_to(url, oauth=config.oauth.model_dump(), root=tmp_path) as conn:
                who = await conn.call_tool("client_name", {}, timeout=5)
    assert "client_name" in names
    assert who.result == f"subagents {__version__}"
    assert list(auth.registered) == ["my-registered-client"]  # nothing registered
    assert [(g["grant_type"], g["client_id"], g["auth_method"]) for g in auth.grants] == [
        ("authorization_code", "my-registered-client", sent),
        ("refresh_token", "my-registered-client", sent)]


@pytest.mark.parametrize("transport", ["http", "sse"])
async def test_a_step_up_with_an_operators_login_says_which_login_to_run_and_keeps_the_session(
        transport, tmp_path):
    from subagents.cli.mcp_login import login

    auth = AuthServer(client_id="unused", client_secret="unused")
    with anyio.fail_after(60):
        async with protected_mcp(features_server, auth, tool_scopes={"picture": "media"},
                                 transport=transport) as url:
            config = McpServerConfig(name="features", type=transport, url=url, oauth={
                "grant": "authorization_code", "scope": "tools", "issuer": auth.base})
            await login(config, tmp_path, open_url=browser)
            grants = len(auth.grants)
            # the server process: the picture needs a scope the operator's login lacks
            async with connected_to(url, oauth=config.oauth.model_dump(), root=tmp_path,
                                    type=transport) as conn:
                with pytest.raises(ToolInvocationError) as refused:
                    await conn.call_tool("picture", {}, timeout=5)
                after = await conn.call_tool("client_name", {}, timeout=5)
    assert refused.value.code == "mcp.login_required"
    message = str(refused.value)
    assert "'tools media'" in message
    assert "subagents mcp login features" in message
    assert "may or may not" not in message
    assert after.result == f"subagents {__version__}"
    # no reconnect over streamable HTTP; the SDK's SSE transport sends nothing more after a
    # refused message, so there the next call opens a new session
    assert conn.connects == (1 if transport == "http" else 2)
    assert len(auth.grants) == grants  # nobody was asked to sign in again
    assert list(auth.registered) == ["dyn-1"]


@pytest.mark.parametrize(("auth_kind", "transport"), [
    ("client_credentials", "http"), ("client_credentials", "sse"), ("token", "http")])
async def test_a_step_up_with_client_credentials_gets_a_token_with_the_larger_scope(
        auth_kind, transport, monkeypatch):
    monkeypatch.setenv("FEATURES_SECRET", "s3cret")
    auth = AuthServer(client_id="agent", client_secret="s3cret")
    with anyio.fail_after(30):
        async with protected_mcp(features_server, auth, tool_scopes={"picture": "media"},
                                 transport=transport) as url:
            if auth_kind == "token":  # a fixed token: nothing can ask for more scope
                auth.valid.add("fixed")
                auth.scopes["fixed"] = "tools"
                monkeypatch.setenv("FEATURES_TOKEN", "fixed")
                extra = {"token": "${FEATURES_TOKEN}"}
            else:
                extra = {"oauth": {"client_id": "agent", "client_secret": "${FEATURES_SECRET}",
                                   "issuer": auth.base, "scope": "tools"}}
            async with connected_to(url, type=transport, **extra) as conn:
                try:
                    picture = await conn.call_tool("picture", {}, timeout=5)
                except ToolInvocationError as exc:
                    picture = exc
    if auth_kind == "token":
        assert isinstance(picture, ToolInvocationError)
        assert picture.code == "mcp.insufficient_scope"
        assert "'tools media'" in str(picture)
    else:
        assert picture.result == "Revenue chart\n[image: image/png, 4096 bytes]"
        assert [g["scope"] for g in auth.grants] == ["tools", "tools media"]
    assert conn.connects == 1


async def test_cross_app_access_exchanges_the_users_id_token_for_an_access_token(monkeypatch):
    from subagents.testing.mcp_http import serve_app

    from tests.servers.oauth_standin import IdentityProvider

    monkeypatch.setenv("FEATURES_SECRET", "s3cret")
    idp = IdentityProvider(id_tokens={"id-token-of-alice": "alice"})
    auth = AuthServer(client_id="assistant", client_secret="s3cret",
                      auth_methods=["client_secret_basic"], identity_provider=idp)
    with anyio.fail_after(30):
        async with serve_app(idp.app()) as idp_base, protected_mcp(features_server, auth) as url:
            config = McpServerConfig(
                name="features", type="http", url=url, session="per_conversation", oauth={
                    "grant": "identity_assertion", "client_id": "assistant",
                    "client_secret": "${FEATURES_SECRET}", "issuer": auth.base,
                    "id_token": "{{ metadata.id_token }}", "idp_token_url": f"{idp_base}/token",
                    "idp_client_id": "assistant-at-idp", "scope": "tools"})
            conn = MCPServerConnection(config, root=REPO,
                                       template_values={"metadata.id_token": "id-token-of-alice"})
            await conn.start(attempts=1)
            try:
                who = await conn.call_tool("client_name", {}, timeout=5)
            finally:
                await conn.close()
            # an ID token the identity provider does not know: nothing to present
            stranger = MCPServerConnection(config, root=REPO,
                                           template_values={"metadata.id_token": "forged"})
            with pytest.raises(MCPConnectionError) as refused:
                await stranger.start(attempts=1)
    assert who.result == f"subagents {__version__}"
    assert refused.value.code == "mcp.identity_assertion_failed"
    assert "forged" not in str(refused.value)
    idp.exchanges.pop()
    [exchange] = idp.exchanges
    assert exchange == {
        "grant_type": "urn:ietf:params:oauth:grant-type:token-exchange",
        "subject_token": "id-token-of-alice",
        "subject_token_type": "urn:ietf:params:oauth:token-type:id_token",
        "requested_token_type": "urn:ietf:params:oauth:token-type:id-jag",
        "audience": auth.base, "resource": url, "scope": "tools",
        "client_id": "assistant-at-idp"}
    [grant] = auth.grants
    assert (grant["grant_type"], grant["auth_method"], grant["assertion"]) == (
        "urn:ietf:params:oauth:grant-type:jwt-bearer", "basic", "jag-1")
    assert grant["resource"] == url


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def test_without_a_login_the_server_process_says_which_command_to_run(tmp_path):
    auth = AuthServer(client_id="unused", client_secret="unused")
    with anyio.fail_after(30):
        async with protected_mcp(features_server, auth) as url:
            config = McpServerConfig(name="features", type="http", url=url, oauth={
                "grant": "authorization_code", "issuer": auth.base})
            conn = MCPServerConnection(config, root=tmp_path)
            with pytest.raises(MCPConnectionError) as caught:
                await conn.start(attempts=3)
    assert caught.value.code == "mcp.login_required"
    assert auth.registered == {}  # no client registered behind the user's back
    assert auth.grants == []


@pytest.mark.parametrize(("level", "expected"), [(logging.INFO, "info"),
                                                 (logging.WARNING, "warning")])
async def test_the_server_log_level_follows_ours(level, expected):
    logger = logging.getLogger("subagents.mcp")
    previous = logger.level
    logger.setLevel(level)
    try:
        with anyio.fail_after(30):
            async with connected("stdio") as conn:
                asked = await conn.call_tool("requested_log_level", {}, timeout=5)
    finally:
        logger.setLevel(previous)
    assert asked.result == expected


async def test_the_resource_listing_is_kept_for_the_session():
    from subagents.config.sub_agent import McpServerRef
    from subagents.mcp import MCPPool
    from subagents.tools.mcp_tools import MCPToolset

    async with serve_mcp(features_server, "http") as url:
        pool = MCPPool(EndpointsConfig(mcp_servers=[McpServerConfig(
            name="features", type="http", url=url, resources=True)]))
        toolset = MCPToolset(pool, [McpServerRef(name="features")], agent_name="a")
        before = type(features_server).resource_listings
        try:
            with anyio.fail_after(30):
                await toolset.start(attempts=1)
                for _ in range(3):  # e.g. three conversations' turns
                    assert "read_resource" in [t.name for t in await toolset.tools()]
        finally:
            await pool.close()
    assert type(features_server).resource_listings - before == 1
