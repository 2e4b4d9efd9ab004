"""Fixtures for the LangChain integration tests: the shared ones from docpc-retrievers' testing plugin."""

from docpc_retrievers.testing.pytest_plugin import *  # noqa: F403 - pytest finds fixtures by name
