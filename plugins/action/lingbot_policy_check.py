"""Action plugin: check inventory and extra-vars against the roles' argument specs.

Runs on the controller only (no connection to the node); fails the host with every
problem found, each naming the variable and the fix.
"""

from __future__ import annotations

from pathlib import Path

from ansible.plugins.action import ActionBase

from lingbot_fleet.controller.policy import check_policy, load_role_specs, play_wide_problems
from lingbot_fleet.controller.role_dirs import RolesNotFoundError, roles_dir

# A role of the toolkit: the directory it is in holds every role whose specs are checked.
ANCHOR_ROLE = "generations"


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        task_vars = task_vars or {}
        try:
            roles = Path(
                self._task.args.get("roles_dir")
                or roles_dir(ANCHOR_ROLE, self._loader, self._task.collections)
            )
        except RolesNotFoundError as error:
            result.update(failed=True, changed=False, msg=str(error))
            return result
        problems = check_policy(task_vars, load_role_specs(roles))
        variable_manager = self._task.get_variable_manager()
        extra_vars = variable_manager.extra_vars if variable_manager is not None else {}
        problems += play_wide_problems(task_vars, extra_vars)
        result["changed"] = False
        result["problems"] = [str(problem) for problem in problems]
        if problems:
            result["failed"] = True
            result["msg"] = "invalid policy variables:\n- " + "\n- ".join(result["problems"])
        else:
            result["msg"] = "policy variables are valid"
        return result
