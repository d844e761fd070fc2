"""Fixtures shared with the integration tests."""

from tests.integration.conftest import tools_url

__all__ = ["tools_url"]
