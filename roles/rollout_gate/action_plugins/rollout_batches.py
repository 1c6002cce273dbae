"""Action plugin: check the rollout's batch list and compute the batches Ansible will run.

Runs on the controller (no connection to the node). Checks ``max_fail_percentage`` (the
change play's) and returns the batch plan (spec, sizes, batches, batch_of;
python/lingbot_fleet/rollout/) for the hosts given, in their order, which the role
registers as ``rollout_gate_batch_plan`` (run once: every host of the play gets it), or
fails naming the bad item and the fix.
"""

from __future__ import annotations

from ansible.plugins.action import ActionBase

from lingbot_fleet.controller.ansible_data import plain_data
from lingbot_fleet.rollout.batches import BatchSpecError, batch_plan
from lingbot_fleet.rollout.outcome import max_fail_percentage_problem


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        result["changed"] = False
        args = self._task.args
        spec = plain_data(args.get("spec"))
        hosts = plain_data(args.get("hosts") or [])
        problem = max_fail_percentage_problem(plain_data(args.get("max_fail_percentage", 0)))
        if problem is not None:
            result["failed"] = True
            result["msg"] = problem
            return result
        try:
            plan = batch_plan(spec, hosts)
        except BatchSpecError as error:
            result["failed"] = True
            result["msg"] = f"{error} (set it with -e rollout_batches=...; playbooks/rollout.yml)"
            return result
        result.update(plan)
        result["msg"] = (
            f"{len(hosts)} host(s) in {len(plan['sizes'])} batch(es) of "
            f"{', '.join(str(size) for size in plan['sizes'])} (from {plan['spec']})"
        )
        return result
