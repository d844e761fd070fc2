"""Deployment defaults of the HTTP server: browsers from foreign origins are refused unless CORS
allows them, bodies must be JSON, Host names can be pinned, stalled connections are closed, a
public bind without a token is announced loudly."""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
from pathlib import Path

import anyio
import httpx2
import pytest
import uvicorn
from subagents.server.app import create_app, uvicorn_config
from subagents.server.security import is_loopback, warn_if_exposed
from subagents.testing import FakeModelServer

from tests.dialogue_harness import assistant_for, write_project

REPO = Path(__file__).resolve().parents[3]
HOURS = {"command_generator": ["start flow opening_hours"] * 3}
BODY = {"sender": "b-1", "message": "hours?"}


@pytest.fixture
def project(tmp_path, tools_url):
    return write_project(tmp_path / "assistant", tools_url)


@contextlib.asynccontextmanager
async def serve(app, **config):
    """The app under the server's own uvicorn settings on 127.0.0.1; yields (host, port)."""
    server = uvicorn.Server(uvicorn_config(app, host="127.0.0.1", port=0, **config))
    task = asyncio.create_task(server.serve())
    try:
        with anyio.fail_after(10):
            while not server.started:
                if task.done():
                    task.result()
                await asyncio.sleep(0.01)
        yield "127.0.0.1", server.servers[0].sockets[0].getsockname()[1]
    finally:
        server.should_exit = True
        with anyio.fail_after(10):
            await task


@contextlib.asynccontextmanager
async def running(project, script=None, **app_options):
    async with FakeModelServer(script or HOURS) as fake, \
            assistant_for(project, fake) as assistant, \
            serve(create_app(assistant, **app_options)) as (host, port), \
            httpx2.AsyncClient(base_url=f"http://{host}:{port}", timeout=30) as client:
        yield client, assistant, fake


async def test_a_cross_origin_form_post_runs_no_turn(project):
    async with running(project) as (client, assistant, fake):
        forged = await client.post("/webhooks/rest/webhook", content=str(BODY).encode(),
                                   headers={"origin": "https://evil.example",
                                            "content-type": "text/plain"})
        foreign_json = await client.post("/webhooks/rest/webhook", json=BODY,
                                         headers={"origin": "https://evil.example"})
        state = await assistant.state("b-1")
    assert (forged.status_code, forged.json()["code"]) == (403, "http.origin_forbidden")
    assert foreign_json.status_code == 403
    assert state["events"] == []
    assert fake.requests == []


async def test_a_browsers_post_body_must_be_declared_json(project):
    async with running(project) as (client, _, fake):
        own = f"http://{client.base_url.host}:{client.base_url.port}"
        plain = await client.post("/webhooks/rest/webhook", content=b'{"sender": "b-1", '
                                  b'"message": "hours?"}',
                                  headers={"content-type": "text/plain", "origin": own})
        none = await client.post("/conversations/b-1/client_tool_results", content=b"{}",
                                 headers={"origin": own})
        fine = await client.post("/webhooks/rest/webhook", json=BODY, headers={"origin": own})
    assert (plain.status_code, plain.json()["code"]) == (415, "http.unsupported_media_type")
    assert none.status_code == 415
    assert fine.status_code == 200
    assert fake.requests


async def test_configured_origins_get_cors_headers_and_preflights(project):
    app_origin = "https://shop.example"
    async with running(project, cors_origins=[app_origin]) as (client, _, _fake):
        preflight = await client.options("/webhooks/rest/webhook", headers={
            "origin": app_origin, "access-control-request-method": "POST",
            "access-control-request-headers": "content-type, authorization"})
        allowed = await client.post("/webhooks/rest/webhook", json=BODY,
                                    headers={"origin": app_origin})
        other = await client.post("/webhooks/rest/webhook", json=BODY,
                                  headers={"origin": "https://evil.example"})
    assert preflight.status_code == 200
    assert preflight.headers["access-control-allow-origin"] == app_origin
    assert allowed.status_code == 200
    assert allowed.headers["access-control-allow-origin"] == app_origin
    assert other.status_code == 403


async def test_pinned_host_names_refuse_others(project):
    async with running(project, allowed_hosts=["127.0.0.1", "localhost"]) as (client, _, _f):
        rebound = await client.get("/health", headers={"host": "attacker.example"})
        local = await client.get("/health")
    assert rebound.status_code == 400
    assert local.status_code == 200


async def test_a_connection_that_stalls_mid_request_line_is_closed(project):
    async with FakeModelServer({}) as fake, assistant_for(project, fake) as assistant, \
            serve(create_app(assistant), header_timeout=0.5) as (host, port):
        reader, writer = await asyncio.open_connection(host, port)
        writer.write(b"POST /webhooks/rest/webhook HTTP/1.1\r\nHost: x\r\n")  # never finished
        await writer.drain()
        with anyio.fail_after(10):
            assert await reader.read() == b""  # the server hung up
        writer.close()


async def test_a_body_that_stops_arriving_gets_408(project):
    async with FakeModelServer({}) as fake, assistant_for(project, fake) as assistant, \
            serve(create_app(assistant, body_timeout=0.5)) as (host, port):
        reader, writer = await asyncio.open_connection(host, port)
        writer.write(b"POST /webhooks/rest/webhook HTTP/1.1\r\nHost: x\r\n"
                     b"content-type: application/json\r\ncontent-length: 100\r\n\r\n{\"sen")
        await writer.drain()
        with anyio.fail_after(10):
            status = await reader.readline()
        writer.close()
    assert status.split()[1] == b"408"


def test_binding_publicly_without_a_token_warns_loudly(capsys):
    warn_if_exposed("0.0.0.0", None)
    loud = capsys.readouterr().err
    warn_if_exposed("0.0.0.0", "secret")
    warn_if_exposed("127.0.0.1", None)
    quiet = capsys.readouterr().err
    assert "WARNING" in loud
    assert "0.0.0.0" in loud
    assert quiet == ""
    assert [is_loopback(h) for h in ("127.0.0.1", "::1", "localhost", "0.0.0.0", "10.0.0.2")] \
        == [True, True, True, False, False]


def test_bench_serve_help_prints_help_and_runs_nothing():
    done = subprocess.run([sys.executable, "benchmarks/bench_serve.py", "--help"], cwd=REPO,
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0
    assert done.stdout.startswith("usage: bench_serve.py")


async def test_serve_on_a_public_address_warns_and_honours_cors(tmp_path):
    import signal
    import socket

    from tests.integration.cli.test_shell_and_demo import shell_project

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    async with FakeModelServer({}) as fake:
        root = shell_project(tmp_path / "p", fake)
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "subagents.cli.main", "serve", "--project", str(root), "--host",
            "0.0.0.0", "--port", str(port), "--cors", "https://shop.example",
            stderr=asyncio.subprocess.PIPE, env={**os.environ, "SUBAGENTS_TOKEN": ""})
        assert proc.stderr is not None
        seen = b""
        async with httpx2.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30) as client:
            with anyio.fail_after(60):
                while b"subagents: serving on" not in (line := await proc.stderr.readline()):
                    assert line, "the server exited before it was ready"
                    seen += line
                preflight = await client.options("/webhooks/rest/webhook", headers={
                    "origin": "https://shop.example", "access-control-request-method": "POST"})
                foreign = await client.post("/webhooks/rest/webhook", json=BODY,
                                            headers={"origin": "https://evil.example"})
                proc.send_signal(signal.SIGTERM)
                await proc.wait()
    assert b"WARNING" in seen
    assert b"without a token" in seen
    assert preflight.headers["access-control-allow-origin"] == "https://shop.example"
    assert foreign.status_code == 403


def test_the_c_http_parser_serves_when_installed_and_h11_otherwise(monkeypatch):
    pytest.importorskip("httptools")
    from subagents.server.security import http_protocol
    from uvicorn.protocols.http.h11_impl import H11Protocol
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    assert issubclass(http_protocol(), HttpToolsProtocol)
    monkeypatch.setitem(sys.modules, "httptools", None)  # as if it were not installed
    assert issubclass(http_protocol(), H11Protocol)


async def test_with_h11_a_stalled_connection_is_closed_too(project, monkeypatch):
    monkeypatch.setitem(sys.modules, "httptools", None)
    await test_a_connection_that_stalls_mid_request_line_is_closed(project)
