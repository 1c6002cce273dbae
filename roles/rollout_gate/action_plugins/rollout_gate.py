"""Action plugin: judge a node's rollout gates (python/lingbot_fleet/rollout/).

Runs on the controller (no connection to the node) on the raw results of what the node's
tasks gathered: the plan, the fresh probe, the registered results of action
rollout_gate_reading before and after the change (``before``: the previous probe and the
chat load; ``after``: the chat load), the link findings, the loop results of
lingbot_service's readiness check (``health``) and, when the change or the measurements
broke, the evidence action rollout_gate_failure kept. Returns `gate` (passed, failures
[{gate, evidence}], gates, notes, message) and `msg` naming every failed gate with its
evidence. It does not fail the host itself: the role rolls the node back first, then fails
it.
"""

from __future__ import annotations

from ansible.plugins.action import ActionBase

from lingbot_fleet.controller.ansible_data import plain_data
from lingbot_fleet.rollout.gates import GateInputs, GatePolicy, evaluate_gates
from lingbot_fleet.rollout.inputs import failure_text, health_from_results, node_reading


def _failure(value: object) -> str | None:
    return failure_text(value) if value else None


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        result["changed"] = False
        task_vars = task_vars or {}
        args = plain_data(self._task.args)
        try:
            before, after = node_reading(args.get("before")), node_reading(args.get("after"))
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
                previous_probe=before.previous_probe,
                previous_probe_problem=before.previous_probe_problem,
                link_findings=args.get("link_findings") or [],
                health=health_from_results(args.get("health") or []),
                change_failure=_failure(args.get("change_failure")),
                measure_failure=_failure(args.get("measure_failure")),
                service_before=before.service_load,
                service_after=after.service_load,
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
