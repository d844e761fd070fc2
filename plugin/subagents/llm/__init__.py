"""Calling language models: the model client, routing between models, token usage."""
