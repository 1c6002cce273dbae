"""Action plugin: a node's gate result as the rollout keeps it, after any rollback.

Runs on the controller (no connection to the node). Takes the judged gate (action
rollout_gate's ``gate``) and what the generations role did (``committed``:
generations_committed; ``rollback_generation``: the generation the rollback was recorded
as; ``reboot_required``, ``kernel_cmdline_reboot``), and returns what the role registers as
``rollout_gate_result``: the gate, ``rollback`` (what the rollback did, null when the node
passed) and ``failure`` (the message that fails the node, null when it passed;
``lingbot_fleet.rollout.outcome``). It does not fail the host itself. Registered, not a
fact: a fact cache (AWX) would carry it into the next rollout.
"""

from __future__ import annotations

from typing import Any

from ansible.plugins.action import ActionBase

from lingbot_fleet.controller.ansible_data import plain_data
from lingbot_fleet.rollout.outcome import gate_result, rollback_text


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = False

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result = super().run(tmp, task_vars)
        result["changed"] = False
        args = plain_data(self._task.args)
        gate = args.get("gate")
        if not isinstance(gate, dict) or "passed" not in gate:
            result.update(failed=True, msg="gate must be the gate result of action rollout_gate")
            return result
        rollback = None
        if not gate["passed"]:
            try:
                rollback = rollback_text(
                    args.get("committed"),
                    args.get("rollback_generation"),
                    bool(args.get("reboot_required")),
                    str(args.get("kernel_cmdline_reboot") or "never"),
                )
            except (TypeError, ValueError) as error:
                result.update(failed=True, msg=f"cannot tell what the rollback did: {error}")
                return result
        kept = gate_result(gate, rollback)
        result.update(kept)
        result["msg"] = kept["failure"] or kept.get("message")
        return result
