"""Action plugin: what the rollout gate reads on the node, before and after its change.

With ``previous_probe_path`` (before the change): the node's previous probe, read with
``ansible.builtin.slurp`` (and, only when that fails, ``ansible.builtin.stat``, so a probe
that is not there yet is told from one that cannot be read by the file's state, not by the
message; ``lingbot_fleet.rollout.inputs.previous_probe_reading``). With ``service_load``
true, outside check mode: the chat load of module lingbot_chat_load with ``chat_load``, its
arguments (the role's ``__rollout_gate_chat_load``, the same before and after). Returns
``previous_probe`` ({document, problem}) and ``service_load`` (the module's ``load``, null
when not measured). Registered before the change as ``rollout_gate_before``, it marks the
node's change as started: the summary names a node with it and without a gate result LOST.
A failed chat load fails the task with the module's message.
"""

from __future__ import annotations

from typing import Any

from ansible.plugins.action import ActionBase

from lingbot_fleet.controller.ansible_data import plain_data
from lingbot_fleet.controller.receipt_action import execute
from lingbot_fleet.rollout.inputs import previous_probe_reading


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _supports_check_mode = True

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result = super().run(tmp, task_vars)
        del tmp
        result["changed"] = False
        args = plain_data(self._task.args)
        path = args.get("previous_probe_path")
        if path:
            path = str(path).strip()
            slurp = execute(self, "ansible.builtin.slurp", {"src": path}, task_vars)
            stat = None
            if slurp.get("failed"):
                stat = execute(
                    self, "ansible.builtin.stat", {"path": path, "get_checksum": False}, task_vars
                )
            document, problem = previous_probe_reading(slurp, stat)
            result["previous_probe"] = {"document": document, "problem": problem}
        result["service_load"] = None
        if args.get("service_load") and not self._task.check_mode:
            load = execute(self, "lingbot_chat_load", args.get("chat_load") or {}, task_vars)
            if load.get("failed"):
                result.update(failed=True, msg=load.get("msg"))
                return result
            result["service_load"] = load.get("load")
            result["msg"] = load.get("msg")
        return result
