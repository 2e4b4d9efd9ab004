"""The encoder of an index, loaded on first use and checked against what the store recorded.

Why lazy: opening a store to list, delete or re-run an unchanged folder must
not pay for loading a model (seconds on a GPU, tens of seconds on a CPU).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Mapping
from typing import Any

from docpc_retrievers.config import EncoderOptions
from docpc_retrievers.encoders.families import DEFAULT_MODEL
from docpc_retrievers.encoders.protocol import Encoder

__all__ = ["EncoderLoader"]


class EncoderLoader:
    """Holds a given encoder, or builds a :class:`ColPaliEncoder` for ``model`` when first asked.

    ``recorded`` returns the store's recorded encoder settings ({} for a new
    store); ``check`` raises when an encoder's settings differ from them.
    """

    def __init__(
        self,
        *,
        encoder: Encoder | None,
        model: str | os.PathLike[str] | None,
        options: EncoderOptions | Mapping[str, Any] | None,
        recorded: Callable[[], Mapping[str, Any]],
        check: Callable[[Encoder], None],
    ) -> None:
        if model is not None and encoder is not None:
            raise ValueError("pass either model or encoder, not both")
        self._encoder = encoder
        self._model = str(model) if model is not None else None
        self.options = EncoderOptions.coerce(options)
        self._recorded = recorded
        self._check = check
        self._lock = threading.Lock()

    @property
    def model(self) -> str:
        """The checkpoint: the encoder's, else the one asked for, else the store's, else the default."""
        if self._encoder is not None:
            return self._encoder.model_id
        recorded = self._recorded().get("model_id")
        return self._model or (str(recorded) if recorded else DEFAULT_MODEL)

    def get(self) -> Encoder:
        """The encoder, built and checked on first call (thread-safe)."""
        with self._lock:
            if self._encoder is None:
                from docpc_retrievers.encoders.colpali import ColPaliEncoder

                encoder = ColPaliEncoder(self.model, **self.options.kwargs())
                self._check(encoder)
                self._encoder = encoder
            return self._encoder
