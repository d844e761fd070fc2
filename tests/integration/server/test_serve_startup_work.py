"""What ``subagents serve`` does before it answers: the project is read once, and libraries
the project does not use are not imported.

The command runs in a child process up to the point where the server would start listening;
there the driver below records how often the project was loaded and which modules are
imported, and stops instead of serving.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from tests.dialogue_harness import write_project

_DRIVER = textwrap.dedent("""
    import json, sys
    import subagents.config.project as project_module
    import subagents.server.app as server_module
    from subagents import cli

    loads = []
    real_collect = project_module.collect_issues

    def counting_collect(*args, **kwargs):
        loads.append(1)
        return real_collect(*args, **kwargs)

    def stop_before_listening(assistant, **kwargs):
        print(json.dumps({"loads": len(loads), "agents": len(assistant.agents),
                          "modules": sorted(sys.modules)}))

    project_module.collect_issues = counting_collect
    server_module.serve = stop_before_listening
    sys.exit(cli.main(["serve", "--project", sys.argv[1], "--no-model-check"]))
""")

# optional libraries a project without A2A agents, elicitation answers, metrics or tracing
# has no use for before its first request
_NOT_NEEDED = ("a2a", "jsonschema", "opentelemetry", "prometheus_client")


def _serve_until_listening(project: str) -> dict[str, object]:
    done = subprocess.run([sys.executable, "-c", _DRIVER, project], capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def test_serve_reads_the_project_once(tmp_path):
    result = _serve_until_listening(str(write_project(tmp_path, "http://127.0.0.1:9/mcp")))
    assert result["agents"]
    assert result["loads"] == 1


def test_serve_does_not_import_libraries_the_project_does_not_use(tmp_path):
    result = _serve_until_listening(str(write_project(tmp_path, "http://127.0.0.1:9/mcp")))
    modules = result["modules"]
    assert isinstance(modules, list)
    loaded = sorted({name.split(".")[0] for name in modules} & set(_NOT_NEEDED))
    assert loaded == []


_HEAP_DRIVER = textwrap.dedent("""
    import gc, json, sys
    import uvicorn
    from subagents.dialogue.processor import Assistant
    from subagents.server.app import serve

    async def report_then_stop(self):
        print(json.dumps({"frozen": gc.get_freeze_count(), "thresholds": gc.get_threshold()}))
        self.should_exit = True

    uvicorn.Server.main_loop = report_then_stop  # listening by now: report, then shut down
    frozen_before = gc.get_freeze_count()
    assistant = Assistant.load(sys.argv[1])
    serve(assistant, port=0)
    print(json.dumps({"frozen_before": frozen_before}))
""")


def _model_only_project(tmp_path) -> str:
    return str(write_project(tmp_path, "http://127.0.0.1:9/mcp", {
        # no MCP server to reach: the agents here only need a model
        "sub_agents/weather/config.yml": """
            agent: {name: weather_agent, description: Tells the weather.}
            """,
        "sub_agents/booking/config.yml": """
            agent: {name: booking_agent, description: Books a table.}
            """}))


def _heap_while_serving(project: str, **env: str) -> dict[str, object]:
    done = subprocess.run([sys.executable, "-c", _HEAP_DRIVER, project], capture_output=True,
                          text=True, timeout=120, check=False, env={**os.environ, **env})
    assert done.returncode == 0, done.stderr
    serving, after = (json.loads(line) for line in done.stdout.strip().splitlines()[-2:])
    assert after["frozen_before"] == 0
    result: dict[str, object] = serving
    return result


def test_serve_freezes_its_start_up_heap_before_it_answers(tmp_path):
    serving = _heap_while_serving(_model_only_project(tmp_path))
    # the modules, the project and the model clients' pools: far more than a few objects
    assert isinstance(serving["frozen"], int)
    assert serving["frozen"] > 10_000
    assert serving["thresholds"] == [50_000, 10, 10]


def test_the_collection_thresholds_come_from_the_environment_when_set(tmp_path):
    serving = _heap_while_serving(_model_only_project(tmp_path),
                                  SUBAGENTS_GC_THRESHOLDS="700,10,10")
    assert serving["thresholds"] == [700, 10, 10]
    assert isinstance(serving["frozen"], int)
    assert serving["frozen"] > 10_000


@pytest.mark.parametrize(("variable", "value", "code"), [
    ("SUBAGENTS_GC_THRESHOLDS", "lots", "server.gc_thresholds_invalid"),
])
def test_a_wrong_setting_in_the_environment_stops_serve_with_the_variable_named(
        tmp_path, variable, value, code):
    project = _model_only_project(tmp_path)
    done = subprocess.run(
        [sys.executable, "-m", "subagents.cli.main", "serve", "--project", project, "--port", "0",
         "--no-model-check"], capture_output=True, text=True, timeout=120, check=False,
        env={**os.environ, variable: value})
    assert done.returncode == 1
    assert f"[{code}]" in done.stderr
    assert variable in done.stderr
    assert "serving on" not in done.stderr


_PLAIN_CALL_DRIVER = textwrap.dedent("""
    import asyncio, json, sys
    from subagents.dialogue.processor import Assistant
    from subagents.stores import InMemoryTrackerStore
    from subagents.testing import FakeModelServer

    async def main():
        script = {"command_generator": ["start flow weather_flow"],
                  "weather_agent": ["Where are you?"]}
        async with FakeModelServer(script) as fake:
            assistant = Assistant.load(sys.argv[1], llm_factory=fake.llm_factory(),
                                       tracker_store=InMemoryTrackerStore())
            async with assistant:
                started = {"aiohttp": "aiohttp" in sys.modules}
                events = await assistant.handle_message("u1", "weather?")
            fake.assert_done()
        texts = [e["text"] for e in events if e["event"] == "bot"]
        print(json.dumps({**started, "texts": texts, "openai": "openai" in sys.modules,
                          "aiohttp_after": "aiohttp" in sys.modules}))

    asyncio.run(main())
""")


def _two_agent_project(tmp_path):
    return str(write_project(tmp_path, "http://127.0.0.1:9/mcp", {
        "sub_agents/weather/config.yml": """
            agent: {name: weather_agent, description: Tells the weather.}
            configuration: {include_date_time: false}
            """,
        "sub_agents/booking/config.yml": """
            agent: {name: booking_agent, description: Books a table.}
            """}))


def _plain_call(project, **env):
    done = subprocess.run([sys.executable, "-c", _PLAIN_CALL_DRIVER, project],
                          capture_output=True, text=True, timeout=120, check=False,
                          env={**os.environ, **env})
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_model_clients_open_at_start_and_never_import_the_openai_sdk(tmp_path):
    result = _plain_call(_two_agent_project(tmp_path))
    assert result["texts"] == ["Where are you?"]
    assert result["aiohttp"] is True  # the connection pools opened during start-up
    assert result["openai"] is False  # model calls post JSON themselves: no SDK import
