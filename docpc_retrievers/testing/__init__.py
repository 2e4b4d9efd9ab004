"""Helpers for tests, examples and benchmarks: tiny random checkpoints that need no download.

Names are imported lazily so that ``python -m docpc_retrievers.testing.tiny_checkpoint``
does not import its own module twice (runpy warns about that) and so that importing
this package stays cheap until a builder is actually used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from docpc_retrievers.testing.tiny_checkpoint import TINY_SPECIAL_TOKENS, build_tiny_colpali, build_tiny_colqwen2

__all__ = ["TINY_SPECIAL_TOKENS", "build_tiny_colpali", "build_tiny_colqwen2"]


def __getattr__(name: str) -> Any:
    """Resolve the public names from ``tiny_checkpoint`` on first access."""
    if name in __all__:
        from docpc_retrievers.testing import tiny_checkpoint

        return getattr(tiny_checkpoint, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
