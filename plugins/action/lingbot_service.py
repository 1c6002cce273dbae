"""Action plugin lingbot_service: gather the planner's inputs here, plan and converge there.

Without ``plan`` or ``plan_inputs`` in the task, gathers on the controller what the planner
needs from the host's variables (``lingbot_fleet.controller.plan_gather``: the GPU facts, the probe,
the link findings, the typed ``lingbot_service_*`` policy) and runs the lingbot_service
module once with them as ``plan_inputs``. The module reads the plan in force and the
model's layer count on the node, builds the plan (``build_plan``, as the audit does),
refuses what would fail before writing anything, converges, and sets the fact
``lingbot_plan``. A task that passes ``plan`` (readiness checks, tests) runs the module
unchanged.

A converged node costs no call: a call of the module that changed nothing leaves a receipt
of its result and of what it read, wrote, listed and ran systemctl on
(``lingbot_fleet.node.receipts``), gpu_facts returns it with that evidence now, and when nothing
moved and the plan made here from the same inputs (with the plan in force and the model's
layers the receipt holds) is the plan in force, this plugin answers with the module's
recorded result (``service_options.receipt_answer``). Otherwise the module runs, with the
digest its receipt is to keep. docs/converged-runs.md is the contract.
"""

from __future__ import annotations

from typing import Any

from ansible.plugins.action import ActionBase

from lingbot_fleet.controller.ansible_data import controller_options
from lingbot_fleet.controller.plan_gather import PlanGatherError, gather_plan_inputs
from lingbot_fleet.controller.receipt_action import (
    digest_options,
    execute,
    refuse_internal,
    standing_receipt,
)
from lingbot_fleet.controller.role_dirs import RolesNotFoundError, roles_dir
from lingbot_fleet.lingbot import service_options

MODULE = "lingbot_service"


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _supports_check_mode = True

    def receipt_answer(self, args: dict[str, Any], task_vars: dict[str, Any]) -> dict | None:
        """Set ``receipt_digest`` in ``args``; the module's result when the receipt stands."""
        if not isinstance(args.get("plan_inputs"), dict) or "plan" in args:
            return None
        # The inputs are the ones just gathered here; the other options are validated as
        # the module validates them.
        params = controller_options(self._task, args, service_options.DECISION_SPEC)
        if params is None or params["readiness_only"]:
            return None
        params["plan_inputs"] = args["plan_inputs"]
        options = digest_options(
            service_options.ARGUMENT_SPEC, params, service_options.DIGEST_VIEWS
        )
        receipt = standing_receipt(
            self, MODULE, service_options.RECEIPT_ROLE, options, args=args, task_vars=task_vars
        )
        if receipt is None:
            return None
        return service_options.receipt_answer(params, receipt)

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result = super().run(tmp, task_vars)
        del tmp
        task_vars = task_vars or {}
        args = dict(self._task.args)
        refuse_internal(args, MODULE, ("receipt_digest",))
        if "plan" not in args and "plan_inputs" not in args:
            try:
                roles = roles_dir(MODULE, self._loader, self._task.collections)
                args["plan_inputs"] = gather_plan_inputs(task_vars, self._templar.template, roles)
            except (PlanGatherError, RolesNotFoundError) as error:
                result.update(failed=True, changed=False, msg=str(error))
                return result
        answer = self.receipt_answer(args, task_vars)
        if answer is not None:
            result.update(answer)
            return result
        result.update(execute(self, MODULE, args, task_vars))
        return result
