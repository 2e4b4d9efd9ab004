"""How a retriever takes its arguments: unknown names refused by name, one path or many."""

from __future__ import annotations

import os
from collections.abc import Iterable

__all__ = ["PathLike", "check_known", "path_list"]

PathLike = str | os.PathLike[str]


def check_known(given: Iterable[str], known: Iterable[str], who: str) -> None:
    """Raise ``TypeError`` naming each unknown option and listing the known ones (no option is ever dropped silently)."""
    known_set = set(known)
    unknown = sorted(set(given) - known_set)
    if unknown:
        raise TypeError(
            f"{who} got unknown option{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))}; "
            f"known options: {', '.join(sorted(known_set))}"
        )


def path_list(paths: PathLike | Iterable[PathLike]) -> list[PathLike]:
    """One path or many, as a list (a bare string is one path, not its characters)."""
    if isinstance(paths, (str, os.PathLike)):
        return [paths]
    return list(paths)
