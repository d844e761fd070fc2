"""Output channels (where bot text goes) and input channels (how users reach the assistant)."""

from subagents.channels.collecting import CollectingOutputChannel
from subagents.channels.input import InputChannel
from subagents.types import OutputChannel

__all__ = ["CollectingOutputChannel", "InputChannel", "OutputChannel"]
