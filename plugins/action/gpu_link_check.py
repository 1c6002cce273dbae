"""Action plugin: judge a host's PCIe links and NUMA placement on the controller.

The facts (``ansible_facts.lingbot_gpu``), the probe (``ansible_facts.lingbot_probe``) and
any load sample are already on the controller, so the judgement needs no connection to
the node: it runs ``lingbot_fleet.linkcheck.judge_links``, the function the module of the
same name runs on a node. The findings are also set as the fact ``lingbot_link_findings``
so the planner (role lingbot_service) decides with them, as the audit does. With
``defer_failure`` the failure is returned (``failure``) instead of failing the task.
"""

from __future__ import annotations

from ansible.errors import AnsibleActionFail
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible.plugins.action import ActionBase

from lingbot_fleet.ansible_data import plain_data as plain
from lingbot_fleet.linkcheck import JUDGE_ARGUMENT_SPEC, judge_options

ARGUMENT_SPEC = JUDGE_ARGUMENT_SPEC


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        validated = ArgumentSpecValidator(ARGUMENT_SPEC).validate(plain(self._task.args))
        if validated.error_messages:
            raise AnsibleActionFail("; ".join(validated.error_messages))
        params = validated.validated_parameters
        try:
            judged, failure = judge_options(params)
        except ValueError as error:
            raise AnsibleActionFail(str(error)) from error
        result.update(judged)
        result["failure"] = failure
        if failure and not params["defer_failure"]:
            result["failed"] = True
            result["msg"] = failure
        return result
