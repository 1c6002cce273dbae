"""Action plugin kernel_cmdline: answer from the node's receipt when the boot did not move.

A call of the module that changed nothing leaves a receipt (``lingbot_fleet.node.receipts``): its
result, what it wrote or read through NodeChanges, and the ``boot_state`` reading (every
boot file, /proc/cmdline, the boot id). gpu_facts, read first in the run, returns the
receipt with that evidence now (``ansible_facts.lingbot_receipts``). When the digest of this
task's options and of the toolkit's code is the receipt's and nothing moved, this plugin
answers with the module's recorded result (``receipt_action.answer``), without a
connection. Anything else (verify or guard_reboot mode, a delegated or async task, no
receipt, any file or the boot changed) runs the module, with the digest its receipt is to
keep.
docs/converged-runs.md is the contract.
"""

from __future__ import annotations

from typing import Any

from ansible.plugins.action import ActionBase

from lingbot_fleet.boot import kernel_options
from lingbot_fleet.controller.ansible_data import controller_options
from lingbot_fleet.controller.receipt_action import answer, execute, refuse_internal
from lingbot_fleet.node.values import ValueRefusedError

MODULE = "kernel_cmdline"


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _supports_check_mode = True

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result = super().run(tmp, task_vars)
        del tmp
        task_vars = task_vars or {}
        args = dict(self._task.args)
        refuse_internal(args, MODULE, ("receipt_digest",))
        params = controller_options(self._task, args, kernel_options.ARGUMENT_SPEC)
        if params is not None:
            # Refused here with the module's (and the policy play's) message, before any
            # connection; a receipt never answers for a value the module would refuse.
            try:
                kernel_options.check_values(
                    params["present"],
                    params["absent"],
                    params["dropin_name"],
                    params["allow_risky_params"],
                )
            except ValueRefusedError as error:
                result.update(failed=True, changed=False, msg=str(error))
                return result
        if params is not None and not (params["verify"] or params["guard_reboot"]):
            said = answer(
                self,
                MODULE,
                kernel_options.RECEIPT_ROLE,
                kernel_options.ARGUMENT_SPEC,
                params,
                args=args,
                task_vars=task_vars,
            )
            if said is not None:
                result.update(said)
                return result
        result.update(execute(self, MODULE, args, task_vars))
        return result
