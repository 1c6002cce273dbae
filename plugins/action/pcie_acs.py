"""Action plugin pcie_acs: answer from the node's receipt when nothing moved.

The module leaves a receipt while its unit is installed (``lingbot_fleet.receipts``);
gpu_facts, the first call of the run, returns it with the unit file's signature and the
unit's state now (``ansible_facts.lingbot_receipts``). When the digest of this task's
options and of the toolkit's code (``lingbot_fleet.receipt_action``) is the receipt's,
nothing moved, and the facts gathered in the same call show
ACS redirect off on every named port (with an IOMMU that allows it), the plugin answers
with what the module would return, without a connection. Anything else runs the module.
"""

from __future__ import annotations

from typing import Any

from ansible.plugins.action import ActionBase

from lingbot_fleet import acs
from lingbot_fleet.ansible_data import controller_options
from lingbot_fleet.receipt_action import execute, refuse_internal, standing_receipt
from lingbot_fleet.values import ValueRefusedError, command

MODULE = "pcie_acs"


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _supports_check_mode = True

    def receipt_answer(
        self, args: dict[str, Any], task_vars: dict[str, Any]
    ) -> dict[str, Any] | None:
        """Set ``receipt_digest`` in ``args``; the module's result when the node's receipt
        stands for these options and this code, else None."""
        params = controller_options(self._task, args, acs.ARGUMENT_SPEC)
        if params is None:
            return None
        options = acs.receipt_options(
            params["redirect_off_bridges"], params["allow_translating_iommu"], params["setpci"]
        )
        receipt = standing_receipt(
            self, MODULE, acs.RECEIPT_ROLE, options, args=args, task_vars=task_vars
        )
        try:
            moved = acs.facts_agree(
                params["redirect_off_bridges"], params["facts"], params["allow_translating_iommu"]
            )
        except acs.AcsError:
            return None  # the module fails with its own message
        if moved or receipt is None:
            return None
        return {
            "changed": False,
            "actions": [],
            "changed_paths": [],
            "diff": [],
            "decision": None,
            "unit_changed": False,
            "started": False,
            "ports_written": [],
            "receipt": "stands",
            "msg": "nothing changed since the module turned ACS redirect off (receipt); no call",
        }

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result = super().run(tmp, task_vars)
        del tmp
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
        answer = self.receipt_answer(args, task_vars or {})
        if answer is not None:
            result.update(answer)
            return result
        result.update(execute(self, MODULE, args, task_vars))
        return result
