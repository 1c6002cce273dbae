"""Action plugin: check the rollout's batch list and compute the batches Ansible will run.

Runs on the controller (no connection to the node). Returns `batch_plan` (spec, sizes,
batches, batch_of; python/lingbot_fleet/rollout/) for the hosts given, in their order,
or fails naming the bad item and the fix.
"""

from __future__ import annotations

from ansible.plugins.action import ActionBase

from lingbot_fleet.ansible_data import plain_data
from lingbot_fleet.rollout.batches import BatchSpecError, batch_plan


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        result["changed"] = False
        args = self._task.args
        spec = plain_data(args.get("spec"))
        hosts = plain_data(args.get("hosts") or [])
        try:
            plan = batch_plan(spec, hosts)
        except BatchSpecError as error:
            result["failed"] = True
            result["msg"] = f"{error} (set it with -e rollout_batches=...; playbooks/rollout.yml)"
            return result
        result["batch_plan"] = plan
        result["msg"] = (
            f"{len(hosts)} host(s) in {len(plan['sizes'])} batch(es) of "
            f"{', '.join(str(size) for size in plan['sizes'])} (from {plan['spec']})"
        )
        return result
