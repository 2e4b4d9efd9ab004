"""Which model a store was built with, told by content rather than by where the model lay.

A store records its model as an identity: the hub id when there is one, the
family, a fingerprint of the weights and configuration (``sha256:...``) and,
for hub checkpoints, the commit hash. The path it was loaded from is kept
only as a hint for finding it again. Two checkpoints are the same model when
their fingerprints match, or when both carry the same hub commit, whatever
their paths: a store can then move to another machine, container or cache.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["IDENTITY_KEYS", "ModelIdentity", "looks_like_path"]

#: Encoder-setting keys that describe which model it is (compared by :meth:`ModelIdentity.differences`).
IDENTITY_KEYS = frozenset({"model_id", "hub_id", "path", "revision", "fingerprint", "family", "base_model"})


def looks_like_path(model: object) -> bool:
    """Path-like names are never sent to the Hub (hub ids are ``name`` or ``org/name``)."""
    if not isinstance(model, str):
        return True  # a Path
    return (
        model.startswith(("/", ".", "~"))
        or "\\" in model
        or model.count("/") > 1
        or (len(model) > 1 and model[1] == ":")
    )


def _text(value: Any) -> str | None:
    return str(value) if value not in (None, "") else None


@dataclass(frozen=True)
class ModelIdentity:
    """A model as a store records it; ``path`` is a hint for finding it, never part of the comparison."""

    family: str | None = None
    fingerprint: str | None = None
    """``sha256:...`` over the checkpoint's config, tokenizer and weight files (big files sampled)."""
    hub_id: str | None = None
    revision: str | None = None
    """The Hugging Face commit hash, when the checkpoint came from the Hub (cache or ``--local-dir`` copy)."""
    path: str | None = None
    base_model: str | None = None
    model_id: str | None = None
    """What the encoder reported as its id (custom encoders without a fingerprint are compared by it)."""

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any]) -> ModelIdentity:
        """Read an encoder-settings record, old or new.

        Records written before identities (0.2) hold ``model_id`` (hub id or absolute folder) and
        ``revision`` (hub commit, or the folder's ``sha256:`` fingerprint): they are read as that.
        """
        model_id = _text(settings.get("model_id"))
        revision = _text(settings.get("revision"))
        fingerprint = _text(settings.get("fingerprint"))
        if revision is not None and revision.startswith("sha256:"):
            fingerprint, revision = fingerprint or revision, None
        hub_id = _text(settings.get("hub_id"))
        path = _text(settings.get("path"))
        if "hub_id" not in settings and "path" not in settings and model_id is not None:
            if looks_like_path(model_id):
                path = model_id
            else:
                hub_id = model_id
        return cls(
            family=_text(settings.get("family")),
            fingerprint=fingerprint,
            hub_id=hub_id,
            revision=revision,
            path=path,
            base_model=_text(settings.get("base_model")),
            model_id=model_id,
        )

    def same_weights(self, other: ModelIdentity) -> bool | None:
        """True or False when content tells (fingerprint or hub commit), None when neither side has one."""
        if self.fingerprint and other.fingerprint and self.fingerprint == other.fingerprint:
            return True
        if self.revision and other.revision and self.revision == other.revision:
            return True
        if (self.fingerprint and other.fingerprint) or (self.revision and other.revision):
            return False
        return None

    def differences(self, other: ModelIdentity) -> list[str]:
        """What tells ``other`` (the model given) apart from this one (the store's); empty when they are the same."""
        diffs: list[str] = []
        if self.family and other.family and self.family != other.family:
            diffs.append(f"family: store has {self.family!r}, got {other.family!r}")
        same = self.same_weights(other)
        if same is False:
            diffs.append(
                f"fingerprint: store has {self.fingerprint or self.revision!r} ({self.describe()}), "
                f"got {other.fingerprint or other.revision!r} ({other.describe()}): different weights or configuration"
            )
        elif same is None and self.model_id != other.model_id:  # custom encoders: only their ids can tell
            diffs.append(f"model_id: store has {self.model_id!r}, got {other.model_id!r}")
        return diffs

    def describe(self) -> str:
        """One line for messages: the hub id or the folder it was loaded from."""
        if self.hub_id:
            return f"hub model {self.hub_id}" + (f"@{self.revision[:12]}" if self.revision else "")
        if self.path:
            return f"folder {self.path}"
        return f"model {self.model_id or 'unknown'}"

    def candidates(self) -> list[str]:
        """Where to look for this model when no model is given: the hub id (local cache first), then the path."""
        out = [name for name in (self.hub_id, self.path) if name]
        if not out and self.model_id:
            out.append(self.model_id)
        return list(dict.fromkeys(out))

    def to_settings(self) -> dict[str, Any]:
        """The identity keys of an encoder-settings record."""
        return {
            "model_id": self.model_id,
            "hub_id": self.hub_id,
            "path": self.path,
            "family": self.family,
            "fingerprint": self.fingerprint,
            "revision": self.revision,
            "base_model": self.base_model,
        }
