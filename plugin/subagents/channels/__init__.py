"""Output channels (where bot text goes) and input channels (how users reach the assistant)."""

from .base import CollectingOutputChannel, OutputChannel
from .input import InputChannel

__all__ = ["CollectingOutputChannel", "InputChannel", "OutputChannel"]
