"""Action plugin p2p_probe: answer from the saved probe on the controller when it stands.

gpu_facts, which runs first on the node, returns the node's saved probe (validated, as
``ansible_facts.lingbot_saved_probe``). When the task's options let the saved probe stand
for the node (``lingbot_fleet.gpu.probe.controller_reuse``: the module's own reuse rules, on
the same facts, save directory and figure parameters), the task returns what the module
returns then, without a connection. Otherwise, or when anything only the node can tell
matters, the module runs as it would without this plugin; a result it saves becomes the
new ``lingbot_saved_probe``, so a later probe task of the play decides on it. What the
probe could not measure is returned as warnings (``lingbot_fleet.gpu.probe.probe_problems``).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible.plugins.action import ActionBase
from ansible.utils.vars import merge_hash

from lingbot_fleet.controller.ansible_data import expanded_on_node
from lingbot_fleet.controller.ansible_data import plain_data as plain
from lingbot_fleet.gpu.probe import (
    PROBE_ARGUMENT_SPEC,
    controller_reuse,
    probe_problems,
    reused_result,
)
from lingbot_fleet.gpu.probe_saved import LATEST_NAME, SAVED_PROBE_FACT_NAME

# Options whose paths the node expands: decided there when they name ~ or a variable.
NODE_PATHS = ("save_dir", "parameters_from")


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _supports_check_mode = True
    _supports_async = True

    def controller_answer(self, task_vars: dict[str, Any]) -> dict[str, Any] | None:
        """The module's result when the saved probe stands for the node, else None."""
        args = plain(self._task.args)
        if self._task.delegate_to or self._task.async_val:
            return None
        if expanded_on_node(args.get(name) for name in NODE_PATHS):
            return None
        validated = ArgumentSpecValidator(PROBE_ARGUMENT_SPEC).validate(args)
        if validated.error_messages:
            return None  # the module fails with its own message
        saved_fact = plain((task_vars.get("ansible_facts") or {}).get(SAVED_PROBE_FACT_NAME))
        reason, _ = controller_reuse(validated.validated_parameters, saved_fact, time.time())
        return reused_result(saved_fact["probe"], reason) if reason else None

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result = self.measure(tmp, task_vars)
        problems = probe_problems(result.get("probe"))
        if problems:
            host = (task_vars or {}).get("inventory_hostname", "this host")
            result.setdefault("warnings", []).append(
                f"{host}: the probe could not measure: " + "; ".join(problems)
            )
        return result

    def measure(self, tmp: Any, task_vars: dict[str, Any] | None) -> dict[str, Any]:
        result = super().run(tmp, task_vars)
        del tmp
        answer = self.controller_answer(task_vars or {})
        if answer is not None:
            result.update(answer)
            return result
        wrap_async = self._task.async_val and not self._connection.has_native_async
        result = merge_hash(
            result, self._execute_module(task_vars=task_vars, wrap_async=wrap_async)
        )
        if not wrap_async:
            self._remove_tmp_path(self._connection._shell.tmpdir)
        latest = (result.get("saved") or {}).get("latest")
        if latest and not result.get("failed") and Path(latest).name == LATEST_NAME:
            facts = result.setdefault("ansible_facts", {})
            facts[SAVED_PROBE_FACT_NAME] = {
                "save_dir": str(Path(latest).parent),
                "probe": result.get("probe"),
                "note": None,
                "read_at_s": None,
            }
        return result
