"""Action plugin: take a load sample of the PCIe links unless the probe's readings stand.

The probe (``ansible_facts.lingbot_probe``) reads every GPU's link under sustained load.
Its readings stand in for a load sample when the probe is younger than
``probe_max_age_s`` and every GPU the driver answers for has a reading that counts (at
least ``min_load_s`` of sustained copies, P0 before and after:
``lingbot_fleet.gpu.linkcheck.probe_readings_problem``); then nothing runs on the node.
Otherwise the module of the same name loads the GPUs and reads them. Decided on the
controller, so a fresh probe costs no connection.
"""

from __future__ import annotations

from ansible.errors import AnsibleActionFail
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible.plugins.action import ActionBase

from lingbot_fleet.controller.ansible_data import plain_data as plain
from lingbot_fleet.gpu.linkcheck import MIN_LOAD_S, probe_readings_problem

# What the plugin decides with (the module takes the same options and decides alike).
ARGUMENT_SPEC = {
    "facts": {"type": "dict"},
    "probe": {"type": "dict"},
    "probe_max_age_s": {"type": "float", "default": 3600.0},
    "min_load_s": {"type": "float", "default": MIN_LOAD_S},
}


class ActionModule(ActionBase):
    TRANSFERS_FILES = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        args = plain(self._task.args)
        decision_args = {key: args[key] for key in args if key in ARGUMENT_SPEC}
        validated = ArgumentSpecValidator(ARGUMENT_SPEC).validate(decision_args)
        if validated.error_messages:
            raise AnsibleActionFail("; ".join(validated.error_messages))
        params = validated.validated_parameters
        if params["probe"] is not None and params["facts"] is not None:
            problem = probe_readings_problem(
                params["probe"],
                params["facts"],
                max_age_s=params["probe_max_age_s"],
                min_load_s=params["min_load_s"],
            )
            if problem is None:
                result.update(
                    changed=False,
                    load=None,
                    msg=(
                        f"the readings of the probe of {params['probe'].get('timestamp')} "
                        "stand: no load sample taken"
                    ),
                )
                return result
            reason = f"load sampled: {problem}"
        else:
            reason = "load sampled: no probe result to take the readings from"
        # Decided here: the node gets no documents to decide with again.
        module_args = {key: value for key, value in args.items() if key not in ("facts", "probe")}
        result.update(self._execute_module(module_args=module_args, task_vars=task_vars))
        result.setdefault("msg", reason)
        return result
