"""Output channels."""

from .base import CollectingOutputChannel, OutputChannel

__all__ = ["CollectingOutputChannel", "OutputChannel"]
