"""Issue 30, items 2, 3, 5 (A2A's part), 6 and 10 (A2A's part): sub agents published with
``serve --a2a`` keep callers apart, cap what they take, end every request by a deadline, keep
a bounded number of tasks, and say nothing of their internals."""

from __future__ import annotations

import json

import anyio
import pytest
from subagents.testing import FakeModelServer

from tests.security.a2a_rpc import call, message, rpc, send
from tests.security.served import WEATHER_AGENT, served, served_project

pytest.importorskip("a2a")

CALLERS = {"SUBAGENTS_A2A_TOKENS": "alice=alice-secret-token,bob=bob-secret-token"}
A, B = "alice-secret-token", "bob-secret-token"


def _agent_replies(*texts: str) -> dict[str, list[str]]:
    return {"weather_agent": list(texts)}


async def test_a2a_callers_reach_only_their_own_tasks(tmp_path, tools_url):
    script = _agent_replies("Which city, Alice?", "Which city, Bob?")
    async with FakeModelServer(script) as fake:
        project = served_project(tmp_path / "p", fake, tools_url)
        async with served(project, "--a2a", "weather_agent", env=CALLERS) as (_, client):
            task = await send(client, "my secret plans for Oslo", token=A)
            assert task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED", task
            listed = await call(client, "ListTasks", {}, token=B)
            got = await call(client, "GetTask", {"id": task["id"]}, token=B)
            cancelled = await call(client, "CancelTask", {"id": task["id"]}, token=B)
            continued = await send(client, "Berlin", token=B, task_id=task["id"],
                                   context_id=task["contextId"])
            # the same context named by another caller is another conversation
            joined = await send(client, "what did we say?", token=B,
                                context_id=task["contextId"])
            own = await call(client, "ListTasks", {}, token=A)
            anonymous = await rpc(client, "ListTasks", {})
    assert listed.get("tasks", []) == []
    assert "error" in got
    assert "error" in cancelled
    assert "error" in continued
    assert joined["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    bob_saw = json.dumps(fake.requests_of("weather_agent")[1].body["messages"])
    assert "secret plans" not in bob_saw
    assert [t["id"] for t in own["tasks"]] == [task["id"]]
    assert own["tasks"][0]["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    assert anonymous.status_code == 401


async def test_a2a_bodies_and_messages_are_capped(tmp_path, tools_url):
    async with FakeModelServer({}) as fake:
        project = served_project(tmp_path / "p", fake, tools_url)
        async with served(project, "--a2a", "weather_agent") as (_, client):
            huge = await rpc(client, "SendMessage", {"message": message("x" * 2_000_000)})

            async def chunks():  # no Content-Length: the cap counts what arrives
                yield b'{"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": ' \
                      b'{"message": {"role": "ROLE_USER", "messageId": "m", "parts": ' \
                      b'[{"text": "'
                for _ in range(40):
                    yield b"y" * 65536
                yield b'"}]}}}'

            streamed = await client.post("/a2a/weather_agent/", content=chunks(), headers={
                "content-type": "application/json", "A2A-Version": "1.0"})
            deep = await client.post("/a2a/weather_agent/", content=b"[" * 100_000,
                                     headers={"content-type": "application/json"})
    assert huge.status_code == 413
    assert streamed.status_code == 413
    assert deep.status_code == 400
    assert fake.requests == []  # nothing reached the model


async def test_an_a2a_request_ends_by_its_deadline(tmp_path, tools_url):
    # a tool that takes 100 s, which the agent allows: only the request's deadline ends it
    script = {"weather_agent": [{"text": "", "tool_calls": [
        {"timed_read": {"label": "far too late", "ms": 100_000}}]}]}
    patient = WEATHER_AGENT.replace("include_date_time: false,",
                                    "include_date_time: false, tool_timeout: 600,")
    async with FakeModelServer(script) as fake:
        project = served_project(tmp_path / "p", fake, tools_url, files={
            "sub_agents/weather/config.yml": patient})
        async with served(project, "--a2a", "weather_agent",
                          env={"SUBAGENTS_TURN_TIMEOUT": "3"}) as (_, client):
            with anyio.fail_after(25):
                task = await send(client, "weather?")
    assert task["status"]["state"] == "TASK_STATE_FAILED", task
    text = json.dumps(task)
    assert "far too late" not in text
    assert "Timeout" not in text
    assert "Error" not in text


async def test_a2a_task_storage_is_bounded(tmp_path, tools_url):
    script = _agent_replies(*[f"Which city ({n})?" for n in range(5)])
    async with FakeModelServer(script) as fake:
        project = served_project(tmp_path / "p", fake, tools_url)
        async with served(project, "--a2a", "weather_agent",
                          env={"SUBAGENTS_A2A_MAX_TASKS": "3"}) as (_, client):
            tasks = [await send(client, f"weather {n}?") for n in range(5)]
            listed = await call(client, "ListTasks", {})
            oldest = await call(client, "GetTask", {"id": tasks[0]["id"]})
            newest = await call(client, "GetTask", {"id": tasks[-1]["id"]})
    assert sorted(t["id"] for t in listed["tasks"]) == sorted(t["id"] for t in tasks[2:])
    assert "error" in oldest
    assert newest["id"] == tasks[-1]["id"]


async def test_a2a_errors_carry_no_exception_text_and_debug_logs_no_bodies(tmp_path,
                                                                          tools_url):
    marker = "cobalt-marmalade-7731"
    async with FakeModelServer(_agent_replies("Which city?")) as fake:
        project = served_project(tmp_path / "p", fake, tools_url)
        async with served(project, "--a2a", "weather_agent", "--log-level", "DEBUG") as (
                server, client):
            bad_json = await client.post("/a2a/weather_agent/", content=b'{"jsonrpc": "2.0",',
                                         headers={"content-type": "application/json"})
            bad_params = await rpc(client, "SendMessage", {"message": {"parts": [
                {"text": 12, "bogus": {"deep": True}}]}})
            bad_page = await rpc(client, "ListTasks", {"pageToken": marker})
            await send(client, f"weather for {marker}?")
            log = server.log()
    for reply in (bad_json, bad_params, bad_page):
        error = reply.json()["error"]
        assert set(error) <= {"code", "message"}, error
        for leak in ("Traceback", "line ", "char ", "Expecting", "parseError", marker):
            assert leak not in error["message"], error
    assert marker not in log


async def test_a2a_tasks_and_contexts_expire_and_keep_a_bounded_history():
    from a2a.server.context import ServerCallContext
    from a2a.server.routes.common import StarletteUser
    from a2a.types import Message, Part, Role, Task, TaskState, TaskStatus
    from a2a.types.a2a_pb2 import ListTasksRequest
    from starlette.authentication import SimpleUser
    from subagents.server.a2a import MAX_TASK_MESSAGES, BoundedTaskStore, SubAgentExecutor

    now = [0.0]
    store = BoundedTaskStore(max_tasks=10, ttl=60, clock=lambda: now[0])
    alice = ServerCallContext(user=StarletteUser(SimpleUser("alice")))
    task = Task(id="t1", context_id="c1",
                status=TaskStatus(state=TaskState.TASK_STATE_INPUT_REQUIRED),
                history=[Message(message_id=f"m{n}", role=Role.ROLE_USER,
                                 parts=[Part(text=f"message {n}")]) for n in range(500)])
    await store.save(task, alice)
    kept = await store.get("t1", alice)
    now[0] = 61.0
    expired = await store.get("t1", alice)
    listed = await store.list(ListTasksRequest(), alice)
    assert kept is not None
    assert len(kept.history) == MAX_TASK_MESSAGES
    assert kept.history[-1].parts[0].text == "message 499"
    assert expired is None
    assert list(listed.tasks) == []

    executor = SubAgentExecutor(agent=None, ttl=60, max_contexts=2,  # type: ignore[arg-type]
                                clock=lambda: now[0])
    first = executor.conversation("alice", "c1")
    first.events.append({"event": "user", "text": "hello"})
    assert executor.conversation("alice", "c1") is first
    assert executor.conversation("bob", "c1") is not first  # another caller, another one
    now[0] = 200.0
    assert executor.conversation("alice", "c1").events == []  # expired: a new conversation
