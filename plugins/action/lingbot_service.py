"""Action plugin lingbot_service: gather the planner's inputs here, plan and converge there.

Without ``plan`` or ``plan_inputs`` in the task, gathers on the controller what the planner
needs from the host's variables (``lingbot_fleet.plan_gather``: the GPU facts, the probe,
the link findings, the typed ``lingbot_service_*`` policy) and runs the lingbot_service
module once with them as ``plan_inputs``. The module reads the plan in force and the
model's layer count on the node, builds the plan (``build_plan``, as the audit does),
refuses what would fail before writing anything, converges, and sets the fact
``lingbot_plan``. A task that passes ``plan`` (readiness checks, tests) runs the module
unchanged. A converged node costs this one module call.
"""

from __future__ import annotations

from typing import Any

from ansible.plugins.action import ActionBase

from lingbot_fleet.plan_gather import PlanGatherError, gather_plan_inputs
from lingbot_fleet.role_dirs import RolesNotFoundError, roles_dir

MODULE = "lingbot_service"


class ActionModule(ActionBase):
    TRANSFERS_FILES = False

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result = super().run(tmp, task_vars)
        del tmp
        task_vars = task_vars or {}
        args = dict(self._task.args)
        if "plan" not in args and "plan_inputs" not in args:
            try:
                roles = roles_dir(MODULE, self._loader, self._task.collections)
                args["plan_inputs"] = gather_plan_inputs(task_vars, self._templar.template, roles)
            except (PlanGatherError, RolesNotFoundError) as error:
                result.update(failed=True, changed=False, msg=str(error))
                return result
        try:
            result.update(self._execute_module(MODULE, module_args=args, task_vars=task_vars))
        finally:
            self._remove_tmp_path(self._connection._shell.tmpdir)
        return result
