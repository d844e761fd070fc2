"""``credentials.yml`` (Rasa's format): which input channels ``serve`` opens, and their settings.

Each top-level key names a channel: a built-in one (``rest``, ``socketio``, ``slack``,
``telegram``, ``twilio``) or a custom channel class by its dotted module path (``pkg.mod.Class``),
imported from the project folder. The value is that channel's settings (or nothing). Secrets
(tokens, signing secrets, keys) must be written as ``${ENV_VAR}``; every other value may use
``${ENV_VAR}`` too. Channels that Rasa ships but this package does not are reported as warnings
and skipped, so a Rasa project's file still loads.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from subagents._yaml import YamlDoc, YamlSyntaxError, load_yaml
from subagents.config._base import SECRET_CODE, is_env_ref, looks_secret, resolve_env
from subagents.exceptions import ConfigIssue, ProjectInvalidError

CREDENTIALS_FILE = "credentials.yml"


@dataclass(frozen=True)
class ChannelKeys:
    """The settings a built-in channel reads: required, optional, and which ones are secrets."""

    required: tuple[str, ...] = ()
    optional: tuple[str, ...] = ()
    secrets: tuple[str, ...] = ()
    types: dict[str, tuple[type, ...]] = field(default_factory=dict)


BUILTIN_CHANNELS: dict[str, ChannelKeys] = {
    "rest": ChannelKeys(),
    "socketio": ChannelKeys(
        optional=("user_message_evt", "bot_message_evt", "session_persistence",
                  "socketio_path", "metadata_key", "jwt_key", "jwt_method", "namespace",
                  "cors_allowed_origins"),
        secrets=("jwt_key",),
        types={"session_persistence": (bool,), "cors_allowed_origins": (list, str)}),
    "slack": ChannelKeys(
        required=("slack_token", "slack_signing_secret"),
        optional=("slack_channel", "proxy", "slack_retry_reason_header",
                  "slack_retry_number_header", "errors_ignore_retry", "use_threads",
                  "conversation_granularity", "api_url"),
        secrets=("slack_token", "slack_signing_secret"),
        types={"use_threads": (bool,)}),
    "telegram": ChannelKeys(
        required=("access_token", "verify", "webhook_url"),
        optional=("secret_token", "api_url"),
        secrets=("access_token", "secret_token")),
    "twilio": ChannelKeys(
        required=("account_sid", "auth_token", "twilio_number"),
        optional=("webhook_url", "api_url"),
        secrets=("auth_token",)),
}
"""Built-in channels. ``api_url`` points a connector at another API address (a proxy, or a
stand-in in tests); ``webhook_url`` on Twilio is the public address its signature is made for."""

CHANNEL_EXTRAS = {"socketio": "socketio", "slack": "slack", "telegram": "telegram",
                  "twilio": "twilio"}
"""Built-in channels whose library is an optional extra (of the same name)."""
EXTRA_MISSING = "credentials.channel.extra_missing"
"""A channel whose extra is not installed: a warning when loading (only ``serve`` opens
channels), an error in ``validate``."""

RASA_ONLY_CHANNELS = frozenset({
    "callback", "facebook", "mattermost", "rocketchat", "botframework", "webexteams",
    "hangouts", "cisco_webex", "twilio_voice", "twilio_media_streams", "audiocodes",
    "audiocodes_stream", "vier_cvg", "genesys", "jambonz", "browser_audio", "studio_chat",
    "rasa", "console", "cmdline", "inspector", "jambonz_stream", "json_audio", "signalwire",
    "vonage", "websockets_voice", "collector",
})
"""Channel names Rasa knows that this package does not serve: skipped with a warning."""


@dataclass
class ChannelSettings:
    """One channel entry of ``credentials.yml``: its name and its raw settings."""

    name: str
    settings: dict[str, Any]
    line: int | None = None

    @property
    def is_custom(self) -> bool:
        """True for a custom channel class given by its dotted module path."""
        return "." in self.name

    def resolved(self) -> dict[str, Any]:
        """The settings with every ``${ENV_VAR}`` replaced (a missing variable is a ConfigError)."""
        return {key: resolve_env(value, what=f"credentials.yml {self.name}.{key}")
                if isinstance(value, str) else value for key, value in self.settings.items()}


@dataclass
class Credentials:
    """The channels of a ``credentials.yml``, in file order; empty when there is no file."""

    channels: list[ChannelSettings] = field(default_factory=list)
    file: str | None = None

    def get(self, name: str) -> ChannelSettings | None:
        """The entry of channel ``name``, if the file lists it."""
        return next((c for c in self.channels if c.name == name), None)


def check_credentials(root: Path, path: Path | None = None
                      ) -> tuple[Credentials, list[ConfigIssue]]:
    """Read and check ``credentials.yml`` (default: the one in the project folder ``root``).

    Returns the channels that can be served and every problem found (errors and warnings).
    A missing default file is no problem: the server then offers only its REST API.
    """
    path = path if path is not None else Path(root) / CREDENTIALS_FILE
    if not path.exists():
        if path.name == CREDENTIALS_FILE and path.parent == Path(root):
            return Credentials(), []
        return Credentials(), [ConfigIssue("credentials.not_found",
                                           f"credentials file {path} does not exist",
                                           file=str(path), hint="check the --credentials path")]
    try:
        shown = str(path.relative_to(root))
    except ValueError:
        shown = str(path)
    try:
        doc = load_yaml(path, display=shown)
    except YamlSyntaxError as exc:
        return Credentials(file=shown), [exc.issue]
    if doc.data is None:
        return Credentials(file=shown), []
    if not isinstance(doc.data, dict):
        return Credentials(file=shown), [doc.issue(
            "yaml.not_a_mapping", "the file must map channel names to their settings")]
    issues: list[ConfigIssue] = []
    channels = []
    for name, settings in doc.data.items():
        entry = _check_channel(doc, root, name, settings, issues)
        if entry is not None:
            channels.append(entry)
    return Credentials(channels=channels, file=shown), issues


def load_credentials(root: Path, path: Path | None = None) -> Credentials:
    """Like :func:`check_credentials`, but raise :class:`ProjectInvalidError` on any error."""
    credentials, issues = check_credentials(root, path)
    if any(i.severity == "error" for i in issues):
        raise ProjectInvalidError(issues, Path(root))
    return credentials


def _check_channel(doc: YamlDoc, root: Path, name: str, settings: Any,
                   issues: list[ConfigIssue]) -> ChannelSettings | None:
    loc = (name,)
    if settings is None:
        settings = {}
    if not isinstance(settings, dict):
        issues.append(doc.issue("credentials.channel.not_a_mapping",
                                f"the settings of channel {name!r} must be a mapping", loc,
                                hint="write `key: value` lines under the channel, or nothing"))
        return None
    if "." in name:
        if not _check_custom(doc, root, name, issues):
            return None
        keys = ChannelKeys(secrets=tuple(k for k in settings if looks_secret(k)))
    elif name in BUILTIN_CHANNELS:
        keys = BUILTIN_CHANNELS[name]
    elif name in RASA_ONLY_CHANNELS:
        issues.append(doc.issue("credentials.channel.unsupported",
                                f"channel {name!r} is not served by subagents; it is skipped",
                                loc, severity="warning",
                                hint="remove it, or connect it with a custom channel class"))
        return None
    else:
        known = ", ".join(sorted(BUILTIN_CHANNELS))
        issues.append(doc.issue("credentials.channel.unknown", f"unknown channel {name!r}", loc,
                                hint=f"use one of {known}, or a custom class as pkg.module.Class"))
        return None
    before = len(issues)
    _check_keys(doc, name, settings, keys, issues)
    if any(i.severity == "error" for i in issues[before:]):
        return None
    if name in CHANNEL_EXTRAS:
        from subagents.config.runtime_checks import extra_issue

        missing = extra_issue(CHANNEL_EXTRAS[name], f"channel {name!r}", file=doc.display,
                              line=doc.line_of(loc), key=name, code=EXTRA_MISSING)
        if missing is not None:  # only serve opens channels: the other commands still run
            issues.append(replace(missing, severity="warning",
                                  message=f"subagents serve cannot open it: {missing.message}"))
    return ChannelSettings(name=name, settings=settings, line=doc.line_of(loc))


def _check_keys(doc: YamlDoc, name: str, settings: dict[str, Any], keys: ChannelKeys,
                issues: list[ConfigIssue]) -> None:
    for key in keys.required:
        if settings.get(key) in (None, ""):
            issues.append(doc.issue("credentials.channel.missing_key",
                                    f"channel {name!r} needs {key!r}", (name,),
                                    key=f"{name}.{key}", hint=f"add {key}: ..."))
    known = {*keys.required, *keys.optional, *keys.secrets}
    for key, value in settings.items():
        loc = (name, key)
        if "." not in name and key not in known:
            issues.append(doc.issue("credentials.channel.unknown_key",
                                    f"channel {name!r} does not read {key!r}; it is ignored", loc,
                                    severity="warning", hint="remove it or check its spelling"))
        if key in keys.secrets and value is not None and not is_env_ref(value):
            issues.append(doc.issue(SECRET_CODE, f"{key} must be written as ${{ENV_VAR}}, not as "
                                    "a literal value", loc,
                                    hint=f"write {key}: ${{MY_VAR}} and export MY_VAR"))
        wanted = keys.types.get(key)
        if wanted is not None and value is not None and not isinstance(value, wanted) \
                and not is_env_ref(value):
            names = " or ".join(t.__name__ for t in wanted)
            issues.append(doc.issue("credentials.channel.invalid_value",
                                    f"{key!r} must be a {names}", loc))
        elif wanted is None and isinstance(value, dict | list) and "." not in name:
            issues.append(doc.issue("credentials.channel.invalid_value",
                                    f"{key!r} must be a single value", loc))


def _check_custom(doc: YamlDoc, root: Path, name: str, issues: list[ConfigIssue]) -> bool:
    from subagents.config._imports import import_from_project

    mod_name, _, cls_name = name.rpartition(".")
    try:
        module = import_from_project(root, mod_name)
    except Exception as exc:  # noqa: BLE001 - any import failure is reported
        issues.append(doc.issue("credentials.channel.module_not_found",
                                f"cannot import {mod_name!r}: {exc}", (name,),
                                hint="module paths are relative to the project folder"))
        return False
    cls = getattr(module, cls_name, None)
    if cls is None:
        issues.append(doc.issue("credentials.channel.module_not_found",
                                f"module {mod_name!r} has no class {cls_name!r}", (name,)))
        return False
    if not callable(getattr(cls, "from_credentials", None)):
        issues.append(doc.issue("credentials.channel.not_a_channel",
                                f"{name!r} is not an input channel class (it has no "
                                "from_credentials)", (name,),
                                hint="subclass subagents.channels.InputChannel"))
        return False
    return True
