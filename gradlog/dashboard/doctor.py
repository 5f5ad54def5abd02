"""The doctor's findings on the heat map: which rows a finding names, and where it starts.

The ``doctor`` plugin logs every finding so far, as ``gradlog doctor --json`` prints them, in
a JSON code block of the text ``doctor/findings_json``; the run's last such text is read. A
finding names modules or parameters: it marks a row that is the same layer, a parameter of
the module it names, or the module of the parameter it names.
"""

from __future__ import annotations

import json
import re
from bisect import bisect_right

FINDINGS_TAG = "doctor/findings_json/text_summary"
_BLOCK = re.compile(r"```(?:json)?\s*(?P<body>.*?)\s*```", re.S)


def parse_findings(text: str | None) -> list[dict]:
    """The findings in the doctor's text; none when there is no text or it is not theirs
    (a marker must never break the heat map)."""
    if not text:
        return []
    block = _BLOCK.search(text)
    try:
        data = json.loads(block["body"] if block else text)
        found = data["findings"]
    except (ValueError, TypeError, KeyError):
        return []
    return [{"kind": str(f["kind"]), "layers": [str(x) for x in f.get("layers", [])],
             "first_step": int(f["first_step"]), "message": str(f.get("message", "")),
             "advice": str(f.get("advice", ""))}
            for f in found if isinstance(f, dict) and "kind" in f and "first_step" in f]


def names_row(finding_layer: str, row: str) -> bool:
    """Whether a finding about ``finding_layer`` is about the heat map's ``row``."""
    return (row == finding_layer or row.startswith(finding_layer + ".")
            or finding_layer.startswith(row + "."))


def row_findings(row: str, findings: list[dict]) -> list[dict]:
    """The findings that name ``row``, each once."""
    return [f for f in findings if any(names_row(layer, row) for layer in f["layers"])]


def first_column(step: int, steps: list[int]) -> int | None:
    """The column (starting at ``steps``) that holds ``step``; the first column for a step
    before it; None without columns."""
    if not steps:
        return None
    return max(0, bisect_right(steps, step) - 1)
