"""RetrieverOptions: the checked options of one retriever, a field per option of the schema (``options.py``).

Both framework retrievers hold one; it checks every option when built, names errors the way the framework
spells the option, becomes the core's :class:`~docpc_retrievers.config.SearchOptions`, and is saved with a store.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import asdict, field, make_dataclass
from typing import Any

from docpc_retrievers.config import SearchOptions, folders
from docpc_retrievers.options import BY_NAME, OPTIONS

__all__ = ["LEGACY_NAMES", "RetrieverOptions"]

_OPTIONS_FORMAT = 1
#: Keys of option files written by version 0.1 (LlamaIndex's persist).
LEGACY_NAMES = {"similarity_top_k": "top_k", "where": "filters"}
_NULLABLE = frozenset(o.name for o in OPTIONS if o.nullable)
"""Options for which None is a value (not "leave the default")."""


class _OptionsBehaviour:
    """What :class:`RetrieverOptions` does; its fields are :data:`~docpc_retrievers.options.OPTIONS`."""

    password: str | None

    def __post_init__(self) -> None:
        for option in OPTIONS:
            if option.check is not None:
                option.check(getattr(self, option.name))
        self.search_options()  # top_k, filters, aggregate, candidates, under and the rerank settings fail now

    @classmethod
    def from_framework(
        cls, values: Mapping[str, Any], names: Mapping[str, str], *, password: str | None = None
    ) -> RetrieverOptions:
        """Options from a retriever's own attribute names (``names``: framework name -> core name).

        Errors name the option as the framework spells it (``similarity_top_k``, ``k``, ...).
        """
        core = {names.get(k, k): v for k, v in values.items() if v is not None or names.get(k, k) in _NULLABLE}
        try:
            return RetrieverOptions(password=password, **core)
        except (TypeError, ValueError) as exc:
            message = str(exc)
            for framework, name in names.items():
                if framework != name:
                    message = re.sub(rf"\b{name}\b", framework, message)
            raise type(exc)(message) from None

    def search_options(self) -> SearchOptions:
        """These options as the core's :class:`SearchOptions` (the options a search uses, by name)."""
        used = {o.name: getattr(self, o.name) for o in OPTIONS if o.search}
        return SearchOptions.build(used.pop("top_k"), password=self.password, **used)

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe form saved with a store (without the password)."""
        data = asdict(self)  # type: ignore[call-overload]
        data.pop("password")
        data["filters"] = dict(data["filters"]) if data["filters"] else None
        data["under"] = list(folders(data["under"])) or None
        return {"format": _OPTIONS_FORMAT, **data}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RetrieverOptions:
        """Rebuild saved options; unknown keys are ignored, a newer format is refused."""
        if data.get("format", _OPTIONS_FORMAT) != _OPTIONS_FORMAT:
            raise ValueError(f"retriever options format {data.get('format')!r} is not supported")
        renamed = {LEGACY_NAMES.get(k, k): v for k, v in data.items()}
        return RetrieverOptions(**{k: v for k, v in renamed.items() if k in BY_NAME})


RetrieverOptions = make_dataclass(
    "RetrieverOptions",
    [(o.name, o.annotation, field(default=o.default)) for o in OPTIONS]
    + [("password", str | None, field(default=None, repr=False))],
    bases=(_OptionsBehaviour,),
    frozen=True,
)
RetrieverOptions.__module__ = __name__  # make_dataclass takes ``module=`` only from Python 3.12
RetrieverOptions.__doc__ = (
    "The options both retrievers expose (:data:`docpc_retrievers.options.OPTIONS`, one field each, plus "
    "``password``, which opens encrypted sources and is never saved), checked when the retriever is built."
)
