"""Screens that focus a space's sampler: shipped as JSON, checked on load, never trusted stale.

A *screen* is what the verifier said about part of a space, e.g. which placements of a
task pass next to a canonical partner. The sampler draws from it, so it must describe the
code that runs now. Screening costs thousands of verifier calls, so each space ships its
screen in its ``data/`` folder, keyed by a digest of what the verdicts depend on
(:class:`ScreenKey`): the template's sources, the DSL version (the TS verifier lives in the
DSL) and the screening's own parameters (problem, canonical partners, choices screened).

:func:`load_screen` reads the shipped file and compares digests. On a mismatch (or a
missing or unreadable file) it tells the user (:class:`StaleScreenWarning`), recomputes
the screen with the ``compute`` the space passes (which judges with the injected verifier)
and writes it back where it was shipped; with no ``compute`` (no verifier injected) it
raises :class:`StaleScreenError` instead (``tsopt spaces NAME`` injects the verifier and so
refreshes a stale screen; deleting the file forces a fresh one). The file also records a
digest of the screen itself, so a hand-edited screen is caught the same way. A stale file
is never used.

API: ``ScreenKey(space, template, dsl, params)`` with ``.digest``; :func:`screen_key`
``(space, template, params)`` (the installed DSL's version filled in);
:func:`sources_digest` ``(*modules_or_functions)`` (a digest of their source code);
:func:`load_screen` ``(path, key, compute) -> value`` (the JSON value: tuples come back as
lists); :func:`shipped_screen` ``(path, key, compute, while_computing)``, the same once per
process and key (what a space's ``knobs`` calls); :func:`write_screen` ``(path, key, value)``.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import os
import threading
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from tsopt.core.errors import UserInputError

DSL_PACKAGE = "nvidia-cutlass-dsl"


class StaleScreenWarning(UserWarning):
    """A shipped screen did not match the code and is being recomputed."""


class StaleScreenError(UserInputError):
    """A shipped screen did not match the code and no verifier was given to recompute it."""


@dataclass(frozen=True)
class ScreenKey:
    """What a screen's verdicts depend on; ``params`` must be JSON (lists, not tuples)."""

    space: str
    template: str
    """Digest of the sources the verdicts read (kernel, genome mapping, checks, rules)."""
    dsl: str
    """Version of the DSL, whose TS verifier gives the verdicts."""
    params: dict[str, Any] = field(default_factory=dict)
    """The screening's own parameters: problem, canonical partners, choices screened."""

    def to_dict(self) -> dict[str, Any]:
        return {"space": self.space, "template": self.template, "dsl": self.dsl,
                "params": self.params}

    @property
    def digest(self) -> str:
        text = json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()[:16]


def dsl_version() -> str:
    try:
        return version(DSL_PACKAGE)
    except PackageNotFoundError:
        return "not installed"


def screen_key(space: str, template: str, params: dict[str, Any]) -> ScreenKey:
    """The key of a screen of ``space`` made with the installed DSL."""
    # A JSON round trip turns tuples into lists, so the key equals the one read back.
    return ScreenKey(space, template, dsl_version(), json.loads(json.dumps(params)))


def sources_digest(*parts: Any) -> str:
    """Digest of the source code of modules or functions, and of plain strings as given."""
    digest = hashlib.sha256()
    for part in parts:
        digest.update((part if isinstance(part, str) else inspect.getsource(part)).encode())
    return digest.hexdigest()[:16]


def content_digest(value: Any) -> str:
    """Digest of a screen's JSON value: a hand-edited screen is not a screen."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _read(path: Path) -> tuple[dict[str, Any] | None, str]:
    """The shipped document, or None and why it cannot be used."""
    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError:
        return None, f"{path} does not exist"
    except (OSError, ValueError) as exc:
        return None, f"{path} cannot be read ({type(exc).__name__}: {exc})"
    if not isinstance(doc, dict) or "key" not in doc or "screen" not in doc:
        return None, f"{path} is not a screen file (no 'key' and 'screen')"
    return doc, ""


def _difference(shipped: dict[str, Any], key: ScreenKey) -> str:
    """Which parts of the key changed, for the user."""
    current = key.to_dict()
    changed = [name for name in current if shipped.get(name) != current[name]]
    return ", ".join(changed) or "the digest"


def load_screen(path: Path, key: ScreenKey, compute: Callable[[], Any] | None) -> Any:
    """The screen shipped at ``path`` if its digest is ``key``'s, else ``compute()`` (written
    back to ``path``), after telling the user why. Raises :class:`StaleScreenError` when the
    shipped screen cannot be used and ``compute`` is None."""
    doc, why = _read(path)
    if doc is not None:
        if doc.get("digest") != key.digest or doc["key"] != key.to_dict():
            why = f"{path} was screened for another {_difference(doc['key'], key)}"
        elif doc.get("content") != content_digest(doc["screen"]):
            why = f"{path} was edited after it was screened (its content digest differs)"
        else:
            return doc["screen"]
    if compute is None:
        raise StaleScreenError(
            f"the {key.space} space's screen is stale: {why}. `tsopt spaces {key.space}` "
            "recomputes it with the verifier (and writes it back)"
        )
    warnings.warn(
        StaleScreenWarning(f"the {key.space} space's screen is stale: {why}; recomputing it "
                           "with the verifier (this can take minutes)"),
        stacklevel=2,
    )
    value = json.loads(json.dumps(compute()))  # as a shipped screen reads back: lists
    try:
        write_screen(path, key, value)
    except OSError as exc:
        warnings.warn(
            StaleScreenWarning(f"could not write the recomputed screen to {path} "
                               f"({type(exc).__name__}: {exc}): the next run recomputes it"),
            stacklevel=2,
        )
    return value


def write_screen(path: Path, key: ScreenKey, value: Any) -> None:
    """Write a screen and its key atomically (a reader never sees half a file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    value = json.loads(json.dumps(value))  # tuples as lists: the value as it is read back
    doc = {"digest": key.digest, "key": key.to_dict(), "content": content_digest(value),
           "screen": value}
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    os.replace(tmp, path)


_LOADED: dict[tuple[Path, str], Any] = {}
_COMPUTING = threading.local()


def shipped_screen(
    path: Path, key: ScreenKey, compute: Callable[[], Any] | None, while_computing: Any
) -> Any:
    """:func:`load_screen`, once per process for each file and key.

    Computing a screen judges genomes, and the verifier may list the space's knobs while it
    judges them (its genome schema): such a nested call, on the thread computing this file,
    gets ``while_computing`` (no screened choices: the screen is not known yet), rather than
    computing the screen again inside itself.
    """
    memo = (path, key.digest)
    if memo in _LOADED:
        return _LOADED[memo]
    busy: set[Path] = _COMPUTING.__dict__.setdefault("paths", set())
    if path in busy:
        return while_computing
    busy.add(path)
    try:
        value = load_screen(path, key, compute)
    finally:
        busy.discard(path)
    _LOADED[memo] = value
    return value
