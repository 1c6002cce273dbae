"""Action plugin: check inventory and extra-vars against the roles' argument specs.

Runs on the controller only (no connection to the node); fails the host with every
problem found, each naming the variable and the fix.
"""

from __future__ import annotations

import sys
from pathlib import Path

from ansible.plugins.action import ActionBase

_REPO = Path(__file__).resolve().parents[2]
if str(_REPO / "python") not in sys.path:
    sys.path.insert(0, str(_REPO / "python"))

from lingbot_fleet.policy import check_policy, load_role_specs, play_wide_problems  # noqa: E402


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        task_vars = task_vars or {}
        roles_dir = Path(self._task.args.get("roles_dir") or _REPO / "roles")
        problems = check_policy(task_vars, load_role_specs(roles_dir))
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
