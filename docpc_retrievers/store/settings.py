"""The settings a store is built with: recorded on the first write, compared on every later one."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from docpc_retrievers.encoders.identity import IDENTITY_KEYS, ModelIdentity
from docpc_retrievers.errors import ModelMismatchError, SettingsMismatchError

__all__ = ["check_settings", "with_current_identity"]


def _flatten(data: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"a": {"b": 1}}`` -> ``{"a.b": 1}``, so a mismatch message names the exact setting."""
    out: dict[str, Any] = {}
    for key, value in data.items():
        if isinstance(value, Mapping):
            out.update(_flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = list(value) if isinstance(value, tuple) else value
    return out


def check_settings(
    path: Path, recorded_all: Mapping[str, Any], settings: Mapping[str, Any], *, section: str | None = None
) -> None:
    """Raise when ``settings`` differ from the recorded ones of the store at ``path``, naming each differing setting.

    The error is :class:`ModelMismatchError` for the ``encoder`` section and
    :class:`SettingsMismatchError` otherwise. The model is compared by identity
    (fingerprint or hub commit, see :class:`ModelIdentity`), never by the path it was loaded from.
    """
    if section is None:
        for name, part in settings.items():
            if isinstance(part, Mapping):
                check_settings(path, recorded_all, part, section=name)
        return
    recorded = recorded_all.get(section) or {}
    if not recorded:
        return
    diffs: list[str] = []
    have, want = _flatten(recorded), _flatten(settings)
    if section == "encoder":
        diffs = [f"{section}.{d}" for d in
                 ModelIdentity.from_settings(recorded).differences(ModelIdentity.from_settings(settings))]
        have = {k: v for k, v in have.items() if k not in IDENTITY_KEYS}
        want = {k: v for k, v in want.items() if k not in IDENTITY_KEYS}
    keys = [key for key in sorted(set(have) | set(want)) if have.get(key) != want.get(key)]
    diffs += [f"{section}.{key}: store has {have.get(key)!r}, got {want.get(key)!r}" for key in keys]
    if diffs:
        if section == "encoder":
            raise ModelMismatchError(
                f"store {path} was built with a different model or encoder settings ({'; '.join(diffs)}); "
                "pass a copy of the store's own model (any path; its fingerprint must match), omit --model / "
                "model= to use the recorded one, or index into a new store"
            )
        rebuild = ""
        if "pool_factor" in keys:
            rebuild = (f"; to change the pool factor, build a new store: docpc index YOUR_PDFS --store NEW_STORE "
                       f"--pool-factor {want.get('pool_factor')}")
        raise SettingsMismatchError(
            f"store {path} was built with different {section} settings ({'; '.join(diffs)}); "
            f"these are fixed when a store is created; index into a new store to change them{rebuild}"
        )


def with_current_identity(recorded: Mapping[str, Any], settings: Mapping[str, Any]) -> dict[str, Any] | None:
    """The recorded settings with the model identity of a matching write, or None when nothing changes.

    A store written before identities gains its fingerprint; the path becomes the one last written with.
    """
    encoder = settings.get("encoder")
    if not isinstance(encoder, Mapping) or not ModelIdentity.from_settings(encoder).fingerprint:
        return None
    merged = {**(recorded.get("encoder") or {}), **{k: v for k, v in encoder.items() if k in IDENTITY_KEYS}}
    if merged == recorded.get("encoder"):
        return None
    return json.loads(json.dumps({**recorded, "encoder": merged}))
