"""Action plugin: judge a node's rollout gates (python/lingbot_fleet/rollout/).

Runs on the controller (no connection to the node) on what the node's tasks gathered: the
plan, the fresh probe, the previous probe's saved text, the link findings, the health
results, the chat load measured before and after the change (``service_before``,
``service_after``: the ``load`` of module lingbot_chat_load) and, when the change or the
measurements broke, what failed. Returns `gate` (passed, failures [{gate, evidence}],
gates, notes) and `msg` naming every failed gate with its evidence.
It does not fail the host itself: the role rolls the node back first, then fails it.
"""

from __future__ import annotations

from ansible.plugins.action import ActionBase

from lingbot_fleet.ansible_data import plain_data
from lingbot_fleet.rollout.gates import GateInputs, GatePolicy, evaluate_gates
from lingbot_fleet.rollout.inputs import (
    failure_text,
    health_results,
    parse_previous_probe,
)


def _task_failure(value: object) -> str | None:
    if not value:
        return None
    if isinstance(value, dict):
        return f"task '{value.get('task') or 'unknown'}' failed: {failure_text(value.get('msg'))}"
    return failure_text(value)


def _service_load(value: object) -> dict | None:
    """A lingbot_chat_load ``load`` (None or empty: not measured); anything else than a
    mapping is refused."""
    if not value:
        return None
    if not isinstance(value, dict):
        raise TypeError(
            f"a service load must be the load mapping of lingbot_chat_load, not {value!r}"
        )
    return value


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        result["changed"] = False
        task_vars = task_vars or {}
        args = plain_data(self._task.args)
        previous, problem = parse_previous_probe(args.get("previous_probe_text"))
        if args.get("previous_probe_error"):
            previous, problem = None, str(args["previous_probe_error"])
        try:
            policy = GatePolicy(
                regression_tolerance_percent=float(args.get("regression_tolerance_percent", 10)),
                link_fail_on=str(args.get("link_fail_on", "error")),
                latency_tolerance_percent=float(args.get("latency_tolerance_percent", 25.0)),
                latency_tolerance_floor_ms=float(args.get("latency_tolerance_floor_ms", 15.0)),
                max_error_rate_percent=float(args.get("max_error_rate_percent", 0.5)),
            )
            inputs = GateInputs(
                plan=args.get("plan") or None,
                fresh_probe=args.get("fresh_probe") or None,
                previous_probe=previous,
                previous_probe_problem=problem,
                link_findings=args.get("link_findings") or [],
                health=health_results(args.get("health") or []),
                change_failure=_task_failure(args.get("change_failure")),
                measure_failure=_task_failure(args.get("measure_failure")),
                service_before=_service_load(args.get("service_before")),
                service_after=_service_load(args.get("service_after")),
            )
            report = evaluate_gates(inputs, policy)
        except (ValueError, KeyError, TypeError) as error:
            result["failed"] = True
            result["msg"] = f"cannot judge the rollout gates: {error}"
            return result
        host = str(task_vars.get("inventory_hostname", "this node"))
        gate = report.to_dict()
        gate["host"] = host
        gate["batch"] = args.get("batch")
        gate["message"] = report.message(host)
        gate["rollback"] = None
        result["gate"] = gate
        result["msg"] = gate["message"]
        return result
