"""Action plugin kernel_cmdline: answer from the node's receipt when the boot did not move.

After a call that configured the node, the module leaves a receipt (``lingbot_fleet.
kernel_options``): the digest of the options and code it ran with, the ``boot_state``
reading (every boot file, /proc/cmdline, the boot id) and its result. gpu_facts, read first
in the run, returns the receipt with the boot state now (``ansible_facts.lingbot_receipts``).
When both agree (``lingbot_fleet.receipts.unchanged``), this plugin answers with that
result, without a connection: the files it would read are the ones it left, in the same
boot. Anything else (verify mode, a delegated or async task, no receipt, any file or the
boot changed) runs the module, with the digest its receipt is to keep.
"""

from __future__ import annotations

from typing import Any

from ansible.plugins.action import ActionBase

from lingbot_fleet import kernel_options
from lingbot_fleet.ansible_data import controller_options
from lingbot_fleet.receipt_action import execute, refuse_internal, standing_receipt
from lingbot_fleet.values import ValueRefusedError

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
        if params is not None and not params["verify"]:
            options = kernel_options.receipt_options(params)
            receipt = standing_receipt(
                self, MODULE, kernel_options.RECEIPT_ROLE, options, args=args, task_vars=task_vars
            )
            answer = kernel_options.receipt_answer(receipt, self._task.diff) if receipt else None
            if answer is not None:
                result.update(answer)
                return result
        result.update(execute(self, MODULE, args, task_vars))
        return result
