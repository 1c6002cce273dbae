"""What each run reads of LingBot's instances: whether each one answers.

Stdlib only: gpu_facts reads it on the node for lingbot_service's receipt (reading
``lingbot_answers``: instance address -> True when ``GET /metrics`` answers 200 with
LingBot's metric), so a no-op run still proves that every instance serves, without the
module's call. The module records every address as True once every instance was ready; an
instance that hangs, answers 5xx or is gone reads False, the receipt no longer stands, and
the module runs its full readiness check (a one-token chat completion too).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

ANSWERS_READING = "lingbot_answers"
# A hung instance costs the reading this long, once per instance.
TIMEOUT_S = 3.0


def address(host: str, port: int) -> str:
    return f"{host}:{int(port)}"


def answers(recorded: Mapping[str, Any]) -> dict[str, bool]:
    """Each recorded address -> whether it answers GET /metrics with LingBot's metric now."""
    from .warmup import METRICS_PATH, READY_METRIC, request  # noqa: PLC0415 - when asked

    found = {}
    for where in sorted(recorded):
        host, _colon, port = where.rpartition(":")
        try:
            status, text = request(host, int(port), "GET", METRICS_PATH, timeout_s=TIMEOUT_S)
        except ValueError:
            status, text = None, ""
        found[where] = status == 200 and READY_METRIC in text
    return found
