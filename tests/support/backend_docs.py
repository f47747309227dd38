"""The queries docs/backends.md gives per backend, read the way a user copies them, so the
tests that run them against real servers fail when the page and the product drift apart::

    docs_query("mlflow")   # the one ```mlflow block: "failing faithfulness today"
"""

from __future__ import annotations

import re
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "backends.md"


def docs_query(system: str) -> str:
    """The one ``system`` code block of docs/backends.md (its query for failing faithfulness)."""
    text = DOC.read_text(encoding="utf-8")
    [query] = re.findall(rf"```{system}\n(.*?)\n```", text, re.S)
    return str(query)
