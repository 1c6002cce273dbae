"""Action plugin: the rollout summary, per node: batch, gate outcome, evidence, rollback.

Runs on the controller (no connection to the node). Reads each host's registered
`rollout_gate_result` and `rollout_gate_before` (its change play started) from hostvars,
for every host of the batch plan: a host without a result was not reached, or, when its
change play had started, lost (unreachable). Without ``batch_plan``, the plan is the first
`rollout_gate_batch_plan` among ``hosts`` (the last play runs on localhost); none there
(the first play stopped before it was made): skipped. Returns `rows`, `lines`,
`stopped_after_batch` and `lost`.
"""

from __future__ import annotations

from ansible.plugins.action import ActionBase

from lingbot_fleet.controller.ansible_data import plain_data
from lingbot_fleet.rollout.outcome import batch_plan_of_hosts
from lingbot_fleet.rollout.summary import summarize

RESULT_VARIABLE = "rollout_gate_result"
REACHED_VARIABLE = "rollout_gate_before"
PLAN_VARIABLE = "rollout_gate_batch_plan"


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        result["changed"] = False
        task_vars = task_vars or {}
        hostvars = task_vars.get("hostvars") or {}
        plan = plain_data(self._task.args.get("batch_plan"))
        if plan is None:
            hosts = plain_data(self._task.args.get("hosts") or [])
            plan = batch_plan_of_hosts(
                plain_data(self._templar.template((hostvars.get(host) or {}).get(PLAN_VARIABLE)))
                for host in hosts
            )
            if plan is None:
                result.update(
                    skipped=True, msg="no batch plan: the rollout stopped before one was made"
                )
                return result
        if not isinstance(plan, dict) or not isinstance(plan.get("batches"), list):
            result["failed"] = True
            result["msg"] = (
                "batch_plan must be the rollout_gate_batch_plan fact set by the first play of "
                "playbooks/rollout.yml (tasks_from: validate of role rollout_gate)"
            )
            return result
        results = {}
        reached = set()
        for batch in plan["batches"]:
            for host in batch:
                host_vars = hostvars.get(host) or {}
                value = host_vars.get(RESULT_VARIABLE)
                results[host] = plain_data(self._templar.template(value)) if value else None
                if host_vars.get(REACHED_VARIABLE):
                    reached.add(host)
        summary = summarize(plan, results, reached)
        result.update(summary)
        result["msg"] = summary["lines"]
        return result
