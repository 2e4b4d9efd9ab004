"""The ``docpc`` command line: one module per command group, :mod:`.app` builds the parser and runs it."""

from docpc_retrievers.cli.app import main

__all__ = ["main"]
