"""The gate inputs as Ansible hands them: the saved probe's text, failure messages."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from .gates import HealthResult

_JOURNAL_LINES_IN_EVIDENCE = 5


def parse_previous_probe(text: str | None) -> tuple[dict[str, Any] | None, str | None]:
    """The saved latest.json's text -> (probe, problem). Empty or None: no previous probe."""
    if text is None or not text.strip():
        return None, None
    try:
        document = json.loads(text)
    except json.JSONDecodeError as error:
        return None, f"latest.json is not JSON ({error})"
    if not isinstance(document, dict) or not isinstance(document.get("gpus"), list):
        return None, "latest.json is not a probe document (no gpus list)"
    return document, None


def failure_text(message: Any) -> str:
    """One line from a task's failure message; a [message, journal lines] list (the health
    check's) keeps the message and the last journal lines."""
    if isinstance(message, list | tuple):
        head = [str(item) for item in message if not isinstance(item, list | tuple)]
        journal = [str(line) for item in message if isinstance(item, list | tuple) for line in item]
        text = " ".join(head)
        if journal:
            text += " | journal: " + " / ".join(journal[-_JOURNAL_LINES_IN_EVIDENCE:])
        return " ".join(text.split())
    return " ".join(str(message).split())


def health_results(entries: Sequence[Mapping[str, Any]]) -> list[HealthResult]:
    return [
        HealthResult(
            instance=str(entry["instance"]),
            healthy=bool(entry.get("healthy")),
            evidence=failure_text(entry.get("evidence", "")),
        )
        for entry in entries
    ]
