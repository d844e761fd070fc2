"""What ``subagents serve`` does before it answers: the project is read once, and libraries
the project does not use are not imported.

The command runs in a child process up to the point where the server would start listening;
there the driver below records how often the project was loaded and which modules are
imported, and stops instead of serving.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

from tests.dialogue_harness import write_project

_DRIVER = textwrap.dedent("""
    import json, sys
    import subagents.config.project as project_module
    import subagents.server as server_module
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
