"""Names that end up in paths: a study name is a name, never a path.

A study's bundle lands in ``.tsopt/bundles/<study>``, so a study called ``../../x`` or
``/etc`` would write outside ``.tsopt/``. :func:`check_study_name` refuses every such name
wherever one enters (``tsopt tune --study``, a bundle manifest, the store).
"""

from __future__ import annotations

import re

from tsopt.core.errors import UserInputError

STUDY_NAME_MAX = 200
_STUDY_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+=-]*")


def check_study_name(name: object, where: str = "study name") -> str:
    """``name`` when it is a plain name (letters, digits, ``. _ + = -``; first a letter or
    digit; at most :data:`STUDY_NAME_MAX` characters); else UserInputError naming it."""
    if not isinstance(name, str) or not name:
        raise UserInputError(f"{where} {name!r} is empty: a study needs a name")
    if len(name) > STUDY_NAME_MAX:
        raise UserInputError(f"{where} {name[:40]!r}... has {len(name)} characters; at most "
                             f"{STUDY_NAME_MAX}")
    if not _STUDY_NAME.fullmatch(name):
        raise UserInputError(
            f"{where} {name!r} is not a plain name: use letters, digits and . _ + = - only, "
            "starting with a letter or digit (a study name is never a path)")
    return name
