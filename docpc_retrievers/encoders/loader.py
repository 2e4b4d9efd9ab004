"""The encoder of an index, loaded on first use and checked against what the store recorded.

Why lazy: opening a store to list, delete or re-run an unchanged folder must
not pay for loading a model (seconds on a GPU, tens of seconds on a CPU).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from docpc_retrievers.config import EncoderOptions
from docpc_retrievers.encoders.families import DEFAULT_MODEL
from docpc_retrievers.encoders.identity import ModelIdentity
from docpc_retrievers.encoders.protocol import Encoder
from docpc_retrievers.errors import ModelLoadError
from docpc_retrievers.progress import PROGRESS

logger = logging.getLogger(__name__)

__all__ = ["EncoderLoader", "EncoderRecipe"]


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

    def check_given(self) -> None:
        """Load and check a model given for a store that already records one (ModelMismatchError), even when the
        caller may need no encoding: a run that only finds unchanged files must not accept the wrong model."""
        if self.must_check():
            self.get()

    def must_check(self) -> bool:
        """Whether a model was given for a store that already records one (so it is checked before a run)."""
        return (self._model is not None or self._encoder is not None) and bool(self._recorded())

    @property
    def model(self) -> str:
        """The checkpoint: the encoder's, else the one asked for, else where the store's model is found, else the default."""
        if self._encoder is not None:
            return self._encoder.model_id
        if self._model is not None:
            return self._model
        recorded = self._recorded()
        if not recorded:
            return DEFAULT_MODEL
        candidates = ModelIdentity.from_settings(recorded).candidates()
        return candidates[0] if candidates else DEFAULT_MODEL

    def recipe(self) -> EncoderRecipe | None:
        """How to build this encoder in another process, or None: an encoder given as an object, or one already
        loaded here (a second copy would be loaded for nothing)."""
        with self._lock:
            if self._encoder is not None:
                return None
        return EncoderRecipe(self._model, self.options, dict(self._recorded()), name=self.model)

    def check(self, encoder: Encoder) -> None:
        """Raise when ``encoder``'s settings differ from the store's (an encoder built elsewhere, from a recipe)."""
        self._check(encoder)

    def get(self) -> Encoder:
        """The encoder, built and checked on first call (thread-safe)."""
        with self._lock:
            if self._encoder is None:
                PROGRESS.info("loading the model %s", self.model)
                encoder = self._load()
                self._check(encoder)
                self._encoder = encoder
            return self._encoder

    def _load(self) -> Encoder:
        """The model asked for; else the store's: its hub id (local cache first when offline), then its path."""
        from docpc_retrievers.encoders.checkpoints import HOW_TO_FIX
        from docpc_retrievers.encoders.colpali import ColPaliEncoder

        if not self._recorded():
            return ColPaliEncoder(self.model, **self.options.kwargs())
        identity = ModelIdentity.from_settings(self._recorded())
        if self._model is not None:
            try:
                return ColPaliEncoder(self._model, **self.options.kwargs())
            except ModelLoadError as exc:  # a download hint for the default model would mislead: name the store's
                raise ModelLoadError(f"{str(exc).split(HOW_TO_FIX)[0].rstrip(' .')}. This store was built with "
                                     f"{_named(identity)}: {_remedy(identity)}") from exc
        tried: list[str] = []
        for candidate in identity.candidates():
            try:
                return ColPaliEncoder(candidate, **self.options.kwargs())
            except ModelLoadError as exc:
                logger.info("store model not loaded from %s: %s", candidate, exc)
                tried.append(f"{candidate} ({_first_sentence(exc)})")
        remedy = _remedy(identity)
        raise ModelLoadError(f"the store's model, {_named(identity)}, cannot be loaded here; tried: "
                             f"{'; '.join(tried) or 'nothing recorded'}. {remedy[0].upper()}{remedy[1:]}")


def _named(identity: ModelIdentity) -> str:
    """The store's model for messages: where it came from, its family and fingerprint."""
    return (f"{identity.describe()} (family {identity.family or 'unknown'}, fingerprint "
            f"{identity.fingerprint or identity.revision or 'unknown'})")


def _remedy(identity: ModelIdentity) -> str:
    return ("pass a copy of that checkpoint with --model DIR / model=DIR (any path; its fingerprint must match)"
            + (f", or make {identity.hub_id} available in the Hugging Face cache" if identity.hub_id else ""))


def _first_sentence(exc: BaseException) -> str:
    text = str(exc)
    cut = text.find(". ")
    return text if cut < 0 else text[:cut]


@dataclass(frozen=True)
class EncoderRecipe:
    """What an :class:`EncoderLoader` builds, as plain data another process can build it from: the model asked
    for (None: the store's), the encoder's options and the store's recorded encoder settings."""

    model: str | None
    options: EncoderOptions
    recorded: dict[str, Any] = field(default_factory=dict)
    name: str = ""
    """The model as messages name it (the one asked for, else the store's, else the default)."""

    def load(self) -> Encoder:
        """Build the encoder as the loader would (the store's model found the same way); not checked here."""
        recorded = self.recorded
        return EncoderLoader(encoder=None, model=self.model, options=self.options, recorded=lambda: recorded,
                             check=lambda encoder: None).get()

    def device(self) -> str:
        """The device the encoder would run on (imports torch to tell)."""
        from docpc_retrievers.encoders.colpali import pick_device

        return pick_device(self.options.device)
