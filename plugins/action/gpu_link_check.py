"""Action plugin: judge a host's PCIe links and NUMA placement on the controller.

The facts (``ansible_facts.lingbot_gpu``), the probe (``ansible_facts.lingbot_probe``) and
any load sample are already on the controller, so the judgement needs no connection to
the node: it runs ``lingbot_fleet.gpu.linkcheck.judge_options`` (the link checks, then
the fleet's severity per finding code, then ``fail_on``), the function the module of the
same name runs on a node. With ``sample`` and no ``load``, a load sample is taken first
(the module gpu_link_load, on the node) only when the probe's readings do not stand in
for one (``lingbot_fleet.gpu.linkcheck.sample_decision``), so a fresh probe costs no
connection. The findings are also set as the fact ``lingbot_link_findings`` so the
planner (role lingbot_service) decides with them, as the audit does, and returned as one
warning. With ``defer_failure`` the failure is returned (``failure``) instead of failing
the task.
"""

from __future__ import annotations

from ansible.errors import AnsibleActionFail
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible.plugins.action import ActionBase

from lingbot_fleet.controller.ansible_data import plain_data as plain
from lingbot_fleet.gpu.linkcheck import JUDGE_ARGUMENT_SPEC, judge_options, sample_decision

ARGUMENT_SPEC = JUDGE_ARGUMENT_SPEC


class ActionModule(ActionBase):
    TRANSFERS_FILES = False

    def take_sample(self, sample: dict, task_vars: dict) -> dict:
        """gpu_link_load on the node, with the sample's options; its ``load``."""
        answer = self._execute_module(
            module_name="gpu_link_load", module_args=dict(sample), task_vars=task_vars
        )
        self._remove_tmp_path(self._connection._shell.tmpdir)
        if answer.get("failed"):
            raise AnsibleActionFail(f"load sample: {answer.get('msg')}", result=answer)
        return answer.get("load")

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        validated = ArgumentSpecValidator(ARGUMENT_SPEC).validate(plain(self._task.args))
        if validated.error_messages:
            raise AnsibleActionFail("; ".join(validated.error_messages))
        params = validated.validated_parameters
        sample_needed, note = sample_decision(params)
        if sample_needed:
            params["load"] = self.take_sample(params["sample"], task_vars or {})
        try:
            judged, failure = judge_options(params)
        except ValueError as error:
            raise AnsibleActionFail(str(error)) from error
        result.update(judged)
        result.update(load=params["load"], load_note=note, failure=failure)
        if judged.get("findings"):
            findings = judged["summary"]
            host = (task_vars or {}).get("inventory_hostname", "this host")
            result["warnings"] = [f"{host}: {len(findings)} finding(s): " + "; ".join(findings)]
        if failure and not params["defer_failure"]:
            result["failed"] = True
            result["msg"] = failure
        return result
