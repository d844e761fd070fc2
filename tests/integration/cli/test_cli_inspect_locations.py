"""`subagents inspect` reads the project's files where the location options say."""

from __future__ import annotations

import shutil

import anyio
import httpx2

from tests.dialogue_harness import write_project
from tests.serve_process import serve_process

EXTRA = {
    "data/greet.yml": """
        flows:
          greet_flow:
            description: greets
            nlu_trigger:
              - intent: greet
            steps:
              - action: utter_side_hello
        """,
    "data/greet_domain.yml": """
        responses:
          utter_side_hello: [{text: "Hello from the moved files!"}]
        """,
}


async def test_inspect_takes_config_and_data_from_the_location_options(tmp_path, tools_url):
    project = write_project(tmp_path / "assistant", tools_url, dict(EXTRA))
    (project / "settings").mkdir()
    shutil.move(project / "config.yml", project / "settings" / "pipeline.yml")
    shutil.move(project / "data", project / "flows")
    env = {"OPENAI_API_KEY": "unused-by-this-test"}
    async with serve_process(project, "-c", "settings/pipeline.yml", "--data", "flows",
                             env=env, command="inspect") as server, \
            httpx2.AsyncClient(base_url=server.url, timeout=60) as client:
        with anyio.fail_after(60):
            reply = await client.post("/webhooks/rest/webhook",
                                      json={"sender": "loc1", "message": "/greet"})
    assert reply.status_code == 200, server.log()
    assert reply.json()[0]["text"] == "Hello from the moved files!"
