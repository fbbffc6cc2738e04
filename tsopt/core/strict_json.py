"""The one reader of JSON that comes from users and from other machines (genome files, bundle
manifests and results, artifact manifests, library and evidence files, earlier exports).

Python's ``json`` reads a duplicated key last-wins, so ``{"stages": 2, "stages": 9}`` would be
judged as the 9 while a person reading the file sees the 2; and a document nested a hundred
thousand deep ends in ``RecursionError``, which no caller expects. Here both are bad input:
:class:`JsonInputError` (a UserInputError) with one line naming the key or the depth.
Standard library only: the GPU side reads bundles too.
"""

from __future__ import annotations

import json
from typing import Any

from tsopt.core.errors import UserInputError

MAX_DEPTH = 64
"""How deeply arrays and objects may nest: tsopt's deepest document (a bundle manifest: its
candidates, a genome, a schedule, an op) nests fewer than ten deep."""


class JsonInputError(UserInputError):
    """Text that is not a JSON document tsopt reads: malformed, a key given twice, or nested
    too deeply. The message says which, without the file's name (the caller adds it)."""


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    doc: dict[str, Any] = {}
    for key, value in pairs:
        if key in doc:
            raise JsonInputError(f"key {key!r} is given twice in one object (JSON readers "
                                 "disagree on which one counts)")
        doc[key] = value
    return doc


def _depth_error(doc: Any) -> str | None:
    """Why a parsed document nests too deeply, else None (walked without recursion)."""
    stack: list[tuple[Any, int]] = [(doc, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, dict):
            children = value.values()
        elif isinstance(value, list):
            children = value  # type: ignore[assignment]
        else:
            continue
        if depth > MAX_DEPTH:
            return (f"arrays and objects nest more than {MAX_DEPTH} deep; no tsopt document "
                    "does")
        stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list))
    return None


def strict_loads(text: str | bytes) -> Any:
    """Parse one JSON document; :class:`JsonInputError` for malformed JSON, a duplicated key
    or nesting beyond :data:`MAX_DEPTH`."""
    if isinstance(text, bytes):
        text = text.decode()
    try:
        doc = json.loads(text, object_pairs_hook=_no_duplicates)
    except json.JSONDecodeError as exc:
        raise JsonInputError(f"not valid JSON ({exc.msg} at line {exc.lineno} column "
                             f"{exc.colno})") from None
    except RecursionError:  # the parser's own stack: far deeper than MAX_DEPTH
        raise JsonInputError(f"arrays and objects nest more than {MAX_DEPTH} deep (hundreds "
                             "of levels); no tsopt document does") from None
    # Parsed but deep: every reader after this one recurses, so the bound is checked here.
    problem = _depth_error(doc)
    if problem is not None:
        raise JsonInputError(problem)
    return doc
