"""The gate inputs as Ansible hands them: the raw results of the tasks and modules that
measured the node (the previous probe's slurp, the health checks, a failed task), turned
into what the gates judge."""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
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


def previous_probe_reading(
    slurp: Mapping[str, Any], stat: Mapping[str, Any] | None = None
) -> tuple[dict[str, Any] | None, str | None]:
    """The previous probe from the raw results of ``ansible.builtin.slurp`` on latest.json
    and, when that failed, ``ansible.builtin.stat`` on the same path -> (probe, problem).
    A file the stat found missing is no previous probe (the node's first run), not a
    problem; any other failure is the problem, with the slurp's message."""
    if not slurp.get("failed"):
        content = slurp.get("content")
        if not isinstance(content, str):
            return None, "latest.json was read but no content came back"
        try:
            text = base64.b64decode(content, validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError) as error:
            return None, f"latest.json is not UTF-8 text ({error})"
        return parse_previous_probe(text)
    if stat is not None and not stat.get("failed") and not (stat.get("stat") or {}).get("exists"):
        return None, None
    return None, failure_text(slurp.get("msg") or "latest.json could not be read")


def task_failure(task_name: Any, result: Any) -> str:
    """The evidence of a failed task from its name and raw result (``ansible_failed_task
    .name`` and ``ansible_failed_result`` in a rescue): "task 'NAME' failed: MESSAGE"."""
    message = result.get("msg") if isinstance(result, Mapping) else None
    return (
        f"task '{task_name or 'unknown task'}' failed: "
        f"{failure_text(message) if message else 'failed without a message'}"
    )


def health_from_results(results: Sequence[Mapping[str, Any]]) -> list[HealthResult]:
    """The readiness of each instance from the raw loop results of lingbot_service's
    ``tasks/health.yml`` (module lingbot_service, ``readiness_only``, one instance per
    item, never failing the host): an instance is healthy when the module reported it
    ready (``readiness.<name>.ready``); otherwise its message is the evidence."""
    found = []
    for result in results:
        item = result.get(str(result.get("ansible_loop_var") or "item"))
        if not isinstance(item, Mapping) or "name" not in item:
            raise TypeError(
                f"a health result needs its loop item (a plan instance), not {result!r}"
            )
        name = str(item["name"])
        readiness = (result.get("readiness") or {}).get(name) or {}
        healthy = readiness.get("ready") is True and not result.get("unreachable")
        evidence = "" if healthy else failure_text(result.get("msg") or "no answer")
        found.append(HealthResult(instance=name, healthy=healthy, evidence=evidence))
    return found


@dataclass(frozen=True)
class NodeReading:
    """What action rollout_gate_reading returned: the previous probe (before the change
    only) and the chat load (None: not measured: switched off, check mode)."""

    previous_probe: dict[str, Any] | None = None
    previous_probe_problem: str | None = None
    service_load: dict[str, Any] | None = None


def node_reading(result: Mapping[str, Any] | None) -> NodeReading:
    """The registered result of action rollout_gate_reading (None or empty: not read)."""
    if not result:
        return NodeReading()
    if not isinstance(result, Mapping):
        raise TypeError(
            f"a node reading must be the result of rollout_gate_reading, not {result!r}"
        )
    previous = result.get("previous_probe") or {}
    load = result.get("service_load") or None
    if load is not None and not isinstance(load, Mapping):
        raise TypeError(
            f"a service load must be the load mapping of lingbot_chat_load, not {load!r}"
        )
    return NodeReading(
        previous_probe=previous.get("document") or None,
        previous_probe_problem=previous.get("problem") or None,
        service_load=dict(load) if load is not None else None,
    )
