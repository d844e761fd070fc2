"""Output channels (where bot text goes) and input channels (how users reach the assistant)."""

from subagents.channels.base import CollectingOutputChannel, OutputChannel
from subagents.channels.input import InputChannel

__all__ = ["CollectingOutputChannel", "InputChannel", "OutputChannel"]
