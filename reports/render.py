"""The report as one self-contained HTML file: template, style, data and script inlined.

Nothing is fetched when the page opens (no CDN, no font, no image), so the
file works offline and can be mailed or archived as it is.
"""

from __future__ import annotations

import html
import json
import math
import re
from importlib import resources
from typing import Any

_PLACEHOLDER = re.compile(r"\{\{(TITLE|STYLE|SCRIPT|DATA)\}\}")


def _asset(name: str) -> str:
    return resources.files("tsopt.reports").joinpath("assets", name).read_text(encoding="utf-8")


def _finite(value: Any) -> Any:
    """JSON has no NaN or infinity: a non-finite figure is shown as missing."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def _script_json(document: Any) -> str:
    """JSON safe inside <script>: no '</script>' or '<!--' can close or confuse the element."""
    text = json.dumps(_finite(document), separators=(",", ":"), allow_nan=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def render_html(document: dict[str, Any]) -> str:
    """The whole page for a report document (see :func:`tsopt.reports.data.report_document`)."""
    parts = {
        "TITLE": html.escape(str(document["title"])),
        "STYLE": _asset("report.css"),
        "SCRIPT": _asset("report.js"),
        "DATA": _script_json(document),
    }
    # One substitution pass: inserted text is never scanned for placeholders again.
    return _PLACEHOLDER.sub(lambda m: parts[m.group(1)], _asset("report.html"))
