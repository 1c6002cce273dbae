"""Action plugin pcie_acs: answer from the node's receipt when nothing moved.

A call of the module that changed nothing leaves a receipt of its result and of what it
read, wrote and ran systemctl on (``lingbot_fleet.node.receipts``); gpu_facts, the first call of
the run, returns it with that evidence now (``ansible_facts.lingbot_receipts``). When the
digest of this task's options (the GPU facts as the ACS view the module decides from,
``acs.DIGEST_VIEWS``) and of the toolkit's code is the receipt's and nothing moved, the
plugin answers with the module's own recorded result (``receipt_action.answer``), without a
connection. Anything else runs the module. docs/converged-runs.md is the contract.
"""

from __future__ import annotations

from typing import Any

from ansible.plugins.action import ActionBase

from lingbot_fleet.controller.ansible_data import controller_options
from lingbot_fleet.controller.receipt_action import answer, execute, refuse_internal
from lingbot_fleet.gpu import acs
from lingbot_fleet.node.values import ValueRefusedError, command

MODULE = "pcie_acs"


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _supports_check_mode = True

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result = super().run(tmp, task_vars)
        del tmp
        task_vars = task_vars or {}
        args = dict(self._task.args)
        refuse_internal(args, MODULE, ("receipt_digest",))
        params = controller_options(self._task, args, acs.ARGUMENT_SPEC)
        if params is not None:
            # Refused before any connection, with the module's (and policy play's) message.
            try:
                command(params["setpci"], acs.SETPCI_VARIABLE)
            except ValueRefusedError as error:
                result.update(failed=True, changed=False, msg=str(error))
                return result
            said = answer(
                self,
                MODULE,
                acs.RECEIPT_ROLE,
                acs.ARGUMENT_SPEC,
                params,
                args=args,
                task_vars=task_vars,
                views=acs.DIGEST_VIEWS,
            )
            if said is not None:
                result.update(said)
                return result
        result.update(execute(self, MODULE, args, task_vars))
        return result
