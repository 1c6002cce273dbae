"""Action plugin nvidia_persistence: answer from gpu_facts' reading when nothing is to do.

gpu_facts, which runs first on the node (a dependency of the role), also runs this
module's own checks in check mode when the play has the role (``persistence_unit``) and
returns what the module would do as ``ansible_facts.lingbot_persistence_state``
(``lingbot_fleet.gpu.persistence.assess``). When that says nothing, for the task's options,
and the facts read in the same call show persistence mode on for every GPU, the task
returns what the module returns then, without a connection
(``lingbot_fleet.gpu.persistence.controller_answer``). Otherwise the module runs; its result
replaces the reading, so a later task of the play does not answer from it.
"""

from __future__ import annotations

import time
from typing import Any

from ansible.plugins.action import ActionBase
from ansible.utils.vars import merge_hash

from lingbot_fleet.controller.ansible_data import controller_options
from lingbot_fleet.controller.ansible_data import plain_data as plain
from lingbot_fleet.gpu.persistence import (
    ARGUMENT_SPEC,
    DECISION_OPTIONS,
    STATE_FACT_NAME,
    controller_answer,
)

# The options the answer depends on, with the module's own defaults.
DECISION_SPEC = {name: ARGUMENT_SPEC[name] for name in DECISION_OPTIONS}


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _supports_check_mode = True

    def answer(self, task_vars: dict[str, Any]) -> dict[str, Any] | None:
        params = controller_options(self._task, self._task.args, DECISION_SPEC)
        if params is None:
            return None
        facts = task_vars.get("ansible_facts") or {}
        return controller_answer(
            params,
            plain(facts.get(STATE_FACT_NAME)),
            plain(facts.get("lingbot_gpu")),
            time.time(),
        )

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result = super().run(tmp, task_vars)
        del tmp
        answer = self.answer(task_vars or {})
        if answer is not None:
            result.update(answer)
            return result
        result = merge_hash(result, self._execute_module(task_vars=task_vars))
        self._remove_tmp_path(self._connection._shell.tmpdir)
        if STATE_FACT_NAME in ((task_vars or {}).get("ansible_facts") or {}):
            result.setdefault("ansible_facts", {})[STATE_FACT_NAME] = None
        return result
