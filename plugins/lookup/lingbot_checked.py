"""Lookup plugin: a value checked by its validator in lingbot_fleet.node.values, or an error."""

from __future__ import annotations

DOCUMENTATION = r"""
---
name: lingbot_checked
short_description: A value checked as the policy play checks it, where a play or task uses it
description:
  - Returns the value in its checked form, or fails the play or task with the message the
    policy play gives for it (C(lingbot_fleet.node.values)). For values that no module sees
    before they act - a play's C(serial), an argument of a command task - so that the
    check holds under C(--skip-tags always), C(--start-at-task) and from other playbooks.
options:
  _terms:
    description: The kind of value, then the value.
    required: true
  variable:
    description: The variable the value comes from, named in the message.
    type: str
    required: true
author:
  - lingbot-fleet maintainers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Provision in batches; 0 or less (every node at once) fails the play
  hosts: gpu-nodes
  serial: >-
    {{ lookup('lingbot_checked', 'batch_size', kernel_cmdline_reboot_batch | default('100%'),
       variable='kernel_cmdline_reboot_batch') }}
"""

RETURN = r"""
_raw:
  description: The checked value (a batch size as an int or C('N%'); a batch list as a list).
  type: list
"""

from ansible.errors import AnsibleError
from ansible.plugins.lookup import LookupBase

from lingbot_fleet.node import values
from lingbot_fleet.rollout.batches import BatchSpecError, parse_batch_spec

CHECKS = {
    "batch_size": values.batch_size,
    # The rollout's batch list (rollout.yml's serial), checked by its own rules.
    "batch_list": lambda spec, _variable: parse_batch_spec(spec),
    "pip_requirement": values.pip_requirement,
    "file_name": values.file_name,
    "command": values.command,
}


class LookupModule(LookupBase):
    def run(self, terms, variables=None, **kwargs):
        self.set_options(var_options=variables, direct=kwargs)
        if len(terms) != 2 or terms[0] not in CHECKS:
            raise AnsibleError(
                f"lingbot_checked takes a kind ({', '.join(sorted(CHECKS))}) and a value; "
                f"got {terms!r}"
            )
        kind, value = terms
        try:
            return [CHECKS[kind](value, self.get_option("variable"))]
        except (values.ValueRefusedError, BatchSpecError) as error:
            raise AnsibleError(str(error)) from None
