"""The monitor's memory across runs: consecutive unusable runs per pair, each GPU's NVLink
error counters, the fallback flag.

``state.json`` in the state directory counts, per used pair, the runs in a row it was not
usable; a usable run resets the count and pairs the plan dropped are forgotten. A pair
that reaches ``consecutive_runs`` makes the monitor recommend the single-GPU fallback for
its instance; with ``auto_fallback`` the flag file ``fallback-recommended`` says so. That
flag is all the monitor writes for a fallback. ``nvlink_errors`` keeps each GPU's NVLink
error counters (by UUID) with the time they were read, so the next run judges their rise
over the whole period between runs, not only over its own reading.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..node.atomic import write_json_atomic
from .judge import PairVerdict

MONITOR_SCHEMA_VERSION = 1
STATE_NAME = "state.json"
FALLBACK_FLAG_NAME = "fallback-recommended"


def load_state(path: Path) -> tuple[dict[str, Any], str | None]:
    """(state, note): a missing or unreadable state starts from zero, with a note why."""
    empty: dict[str, Any] = {"schema_version": MONITOR_SCHEMA_VERSION, "pairs": {}}
    try:
        state = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return empty, None
    except (OSError, json.JSONDecodeError) as error:
        return empty, f"state {path} unreadable ({error}); counting consecutive runs from zero"
    if not isinstance(state, dict) or not isinstance(state.get("pairs"), dict):
        return empty, f"state {path} has no `pairs` object; counting consecutive runs from zero"
    return state, None


def advance_state(
    previous: Mapping[str, Any], verdicts: Sequence[PairVerdict], timestamp: str
) -> dict[str, Any]:
    """Count consecutive unusable runs per used pair; pairs the plan dropped are forgotten.

    Sets each verdict's `below_threshold_runs`.
    """
    pairs: dict[str, Any] = {}
    for verdict in verdicts:
        before = (previous.get("pairs") or {}).get(verdict.key) or {}
        runs = 0 if verdict.usable else int(before.get("below_threshold_runs") or 0) + 1
        verdict.below_threshold_runs = runs
        pairs[verdict.key] = {
            "instance": verdict.instance,
            "src": verdict.src,
            "dst": verdict.dst,
            "below_threshold_runs": runs,
            "below_threshold_since": (before.get("below_threshold_since") or timestamp)
            if runs
            else None,
            "last_gbytes_per_s": verdict.measured_gbytes_per_s,
        }
    return {"schema_version": MONITOR_SCHEMA_VERSION, "updated": timestamp, "pairs": pairs}


def nvlink_error_readings(facts: Mapping[str, Any], unix_s: float) -> dict[str, Any]:
    """UUID -> {counts, unix_s}: this run's NVLink error counters, for the next run."""
    readings: dict[str, Any] = {}
    for gpu in facts.get("gpus") or []:
        counts = (gpu.get("nvlink") or {}).get("errors") if not gpu.get("lost") else None
        if counts and gpu.get("uuid"):
            readings[gpu["uuid"]] = {"counts": dict(counts), "unix_s": round(unix_s, 3)}
    return readings


def widen_nvlink_error_windows(
    facts: Mapping[str, Any], previous: Mapping[str, Any], unix_s: float
) -> None:
    """Makes the last run's counters each GPU's earlier NVLink error reading, so a rise is
    judged since then. Kept to the run's own two readings: a GPU the last run did not read,
    a reading from the future (the clock was set back), and counters that fell since (the
    GPU was reset or the driver reloaded)."""
    readings = previous.get("nvlink_errors")
    if not isinstance(readings, Mapping):
        return
    for gpu in facts.get("gpus") or []:
        nvlink = gpu.get("nvlink")
        before = readings.get(gpu.get("uuid")) if isinstance(nvlink, dict) else None
        if not isinstance(before, Mapping) or not nvlink or not nvlink.get("errors"):
            continue
        counts, then_s = before.get("counts"), before.get("unix_s")
        if not isinstance(counts, Mapping) or not isinstance(then_s, (int, float)):
            continue
        latest = nvlink["errors"]
        shared = set(counts) & set(latest)
        valid = all(isinstance(counts[name], int) for name in shared)
        if not shared or not valid or then_s > unix_s:
            continue
        if any(latest[name] < counts[name] for name in shared):
            continue
        nvlink["errors_earlier"] = {name: counts[name] for name in shared}
        nvlink["errors_window_s"] = round(unix_s - then_s, 3)


def fallback_recommendations(
    instances: Sequence[str], verdicts: Sequence[PairVerdict], consecutive_runs: int
) -> dict[str, list[PairVerdict]]:
    """Instance -> the pairs that stayed unusable for `consecutive_runs` runs (may be [])."""
    recommended: dict[str, list[PairVerdict]] = {name: [] for name in instances}
    for verdict in verdicts:
        if verdict.below_threshold_runs >= consecutive_runs:
            recommended.setdefault(verdict.instance, []).append(verdict)
    return recommended


def update_fallback_flag(
    flag: Path, recommended: Mapping[str, Sequence[PairVerdict]], enabled: bool, timestamp: str
) -> bool:
    """With auto_fallback: the flag file exists while an instance is recommended to fall back.

    Without it the flag is removed. The flag is the only thing the monitor writes for a
    fallback; acting on it is left to the operator or the provision playbook. Returns
    whether the flag exists afterwards.
    """
    instances = sorted(name for name, pairs in recommended.items() if pairs)
    if enabled and instances:
        document = {
            "timestamp": timestamp,
            "instances": instances,
            "reasons": {name: [p.reason for p in recommended[name]] for name in instances},
        }
        write_json_atomic(str(flag), document)
        return True
    with contextlib.suppress(FileNotFoundError):
        flag.unlink()
    return False
