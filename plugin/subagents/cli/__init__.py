"""The ``subagents`` command line: parser, commands, shell, start-up checks and help."""

from subagents.cli.main import main

__all__ = ["main"]
