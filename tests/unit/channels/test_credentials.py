"""credentials.yml: Rasa's format loads; `validate` reports unknown channels, missing keys and
literal secrets with file, line and code."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from subagents.channels.registry import build_channels, load_channels
from subagents.channels.socketio import SocketIOInput
from subagents.config.credentials import Credentials, check_credentials, load_credentials
from subagents.config.project import collect_issues
from subagents.exceptions import ConfigError, ProjectInvalidError

from tests.unit.cli.test_cli_validate import run

RASA_CREDENTIALS = """
    # the file `rasa init` writes, with the channels filled in
    rest:
      # you don't need to provide anything here - this channel doesn't
      # require any credentials

    socketio:
      user_message_evt: user_uttered
      bot_message_evt: bot_uttered
      session_persistence: true

    slack:
      slack_token: "${SLACK_TOKEN}"
      slack_channel: "C0123"
      slack_signing_secret: "${SLACK_SIGNING_SECRET}"

    telegram:
      access_token: ${TELEGRAM_TOKEN}
      verify: "my_bot"
      webhook_url: "https://example.org/webhooks/telegram/webhook"

    twilio:
      account_sid: "ACxxxxxxxxxxxxxxxx"
      auth_token: "${TWILIO_AUTH_TOKEN}"
      twilio_number: "+15550001111"

    rasa:
      url: "http://localhost:5002/api"
    """


def codes(issues) -> list[str]:
    return [i.code for i in issues]


def test_a_rasa_credentials_file_loads_unchanged(make_project):
    root = make_project({"credentials.yml": RASA_CREDENTIALS})
    credentials, issues = check_credentials(root)
    assert [c.name for c in credentials.channels] == ["rest", "socketio", "slack", "telegram",
                                                      "twilio"]
    assert codes(issues) == ["credentials.channel.unsupported"]  # `rasa:` is skipped
    assert issues[0].severity == "warning"
    assert (issues[0].file, issues[0].line) == ("credentials.yml", 26)
    project, all_issues = collect_issues(root)
    assert project is not None
    assert "credentials.channel.unsupported" in codes(all_issues)


def test_a_rasa_credentials_file_builds_every_channel(make_project, monkeypatch):
    for var in ("SLACK_TOKEN", "SLACK_SIGNING_SECRET", "TELEGRAM_TOKEN", "TWILIO_AUTH_TOKEN"):
        monkeypatch.setenv(var, f"value-of-{var}")
    root = make_project({"credentials.yml": RASA_CREDENTIALS})
    channels = load_channels(root)
    assert [type(c).__name__ for c in channels] == ["SocketIOInput", "SlackInput",
                                                    "TelegramInput", "TwilioInput"]
    socket, slack, telegram, twilio = channels
    assert socket.session_persistence is True  # type: ignore[attr-defined]
    assert slack.token == "value-of-SLACK_TOKEN"  # type: ignore[attr-defined]
    assert telegram.verify == "my_bot"  # type: ignore[attr-defined]
    assert twilio.twilio_number == "+15550001111"  # type: ignore[attr-defined]


def test_settings_resolve_environment_variables(make_project, monkeypatch):
    monkeypatch.setenv("SLACK_TOKEN", "xoxb-1")
    monkeypatch.setenv("SLACK_SIGNING_SECRET", "s3")
    root = make_project({"credentials.yml": RASA_CREDENTIALS})
    slack = load_credentials(root).get("slack")
    assert slack is not None
    assert slack.resolved()["slack_token"] == "xoxb-1"
    monkeypatch.delenv("SLACK_SIGNING_SECRET", raising=False)
    with pytest.raises(ConfigError) as err:
        slack.resolved()
    assert err.value.code == "config.env_var_missing"


def test_unknown_channels_missing_keys_and_literal_secrets_are_errors(make_project):
    root = make_project({"credentials.yml": """
        rest:
        whatsapp_cloud:
          token: abc
        slack:
          slack_token: xoxb-literal-token
        telegram:
          access_token: ${TELEGRAM_TOKEN}
          verify: my_bot
          webhook_url: https://example.org/hook
          colour: blue
        socketio:
          session_persistence: maybe
        """})
    _, issues = check_credentials(root)
    found = {(i.code, i.line, i.key, i.severity) for i in issues}
    assert ("credentials.channel.unknown", 2, "whatsapp_cloud", "error") in found
    assert ("credentials.channel.missing_key", 4, "slack.slack_signing_secret", "error") in found
    assert ("validation.sensitive_key_string_value_must_be_set_as_env_var", 5,
            "slack.slack_token", "error") in found
    assert ("credentials.channel.unknown_key", 10, "telegram.colour", "warning") in found
    assert ("credentials.channel.invalid_value", 12, "socketio.session_persistence",
            "error") in found
    with pytest.raises(ProjectInvalidError) as err:
        load_credentials(root)
    assert "credentials.channel.unknown" in err.value.codes


def test_validate_reports_credentials_problems(make_project):
    root = make_project({"credentials.yml": "socketio:\n  jwt_key: plain-text-key\n"})
    result = run("validate", "--project", str(root))
    assert result.returncode == 1
    assert ("credentials.yml:2: error [validation.sensitive_key_string_value_must_be_set_as_"
            "env_var] socketio.jwt_key:") in result.stderr


def test_a_custom_channel_class_is_loaded_by_module_path(make_project):
    root = make_project({
        "addons/__init__.py": "",
        "addons/my_channel.py": """
            from subagents.channels import InputChannel


            class MyChannel(InputChannel):
                name = "mine"

                def __init__(self, greeting):
                    self.greeting = greeting

                @classmethod
                def from_credentials(cls, credentials):
                    return cls(credentials["greeting"])


            class NotAChannel:
                pass
            """,
        "credentials.yml": """
            addons.my_channel.MyChannel:
              greeting: hello
            socketio:
              bot_message_evt: bot_says
            """})
    channels = load_channels(root)
    assert [type(c).__name__ for c in channels] == ["MyChannel", "SocketIOInput"]
    assert channels[0].greeting == "hello"  # type: ignore[attr-defined]
    assert isinstance(channels[1], SocketIOInput)
    assert channels[1].bot_message_evt == "bot_says"

    (root / "credentials.yml").write_text("addons.my_channel.NotAChannel:\n"
                                          "addons.missing.Channel:\n"
                                          "addons.my_channel.MyChannel:\n"
                                          "  api_token: literal-value\n")
    _, issues = check_credentials(root)
    assert codes(issues) == ["credentials.channel.not_a_channel",
                             "credentials.channel.module_not_found",
                             "validation.sensitive_key_string_value_must_be_set_as_env_var"]
    assert [i.line for i in issues] == [1, 2, 4]


def test_a_channel_whose_library_is_missing_names_the_extra(make_project, monkeypatch):
    monkeypatch.setenv("TWILIO_AUTH_TOKEN", "t")
    root = make_project({"credentials.yml": RASA_CREDENTIALS.split("    rasa:")[0]})
    monkeypatch.setitem(sys.modules, "twilio", None)  # as if the extra were not installed
    with pytest.raises(ConfigError) as err:
        build_channels(root, Credentials(channels=[
            c for c in load_credentials(root).channels if c.name == "twilio"]))
    assert err.value.code == "credentials.channel.extra_missing"
    assert err.value.issue.hint == "pip install 'subagents[twilio]'"


def test_no_credentials_file_means_only_the_rest_api(make_project):
    root = make_project()
    assert load_channels(root) == []
    assert build_channels(root, load_credentials(root)) == []
    missing = Path(root) / "nowhere.yml"
    _, issues = check_credentials(root, missing)
    assert codes(issues) == ["credentials.not_found"]
