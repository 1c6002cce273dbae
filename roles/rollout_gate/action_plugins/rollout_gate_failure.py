"""Action plugin: the evidence of a failed task, in a rescue of the rollout gate.

Runs on the controller (no connection to the node). Takes the failed task's name
(``ansible_failed_task.name``) and raw result (``ansible_failed_result``) and returns
``failure``: "task 'NAME' failed: MESSAGE" (``lingbot_fleet.rollout.inputs.task_failure``),
registered for the gate's ``change`` or ``measure`` gate.
"""

from __future__ import annotations

from typing import Any

from ansible.plugins.action import ActionBase

from lingbot_fleet.controller.ansible_data import plain_data
from lingbot_fleet.rollout.inputs import task_failure


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = False

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result = super().run(tmp, task_vars)
        args = plain_data(self._task.args)
        failure = task_failure(args.get("task"), args.get("result"))
        result.update(changed=False, failure=failure, msg=failure)
        return result
