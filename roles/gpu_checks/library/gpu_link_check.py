#!/usr/bin/python
"""Ansible module: judge the GPU facts (and a load sample) against the link policy."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: gpu_link_check
short_description: PCIe link and NUMA findings from the GPU facts and policy
description:
  - Runs lingbot_fleet.linkcheck on the facts gathered by gpu_facts and, when given, the
    under-load sample of gpu_link_load. Width is judged at rest; generation under load or
    against what GPU and slot can negotiate; a GPU idling at a low generation is never a
    finding.
  - Fails when a finding is at or above I(fail_on) (unless I(defer_failure)); changes
    nothing.
  - The role runs it on the controller (action plugin of the same name), since it only
    judges documents already gathered; no connection to the node is made.
options:
  facts:
    description: The lingbot_gpu facts document.
    type: dict
    required: true
  load:
    description: The C(load) result of gpu_link_load.
    type: dict
  probe:
    description:
      - A p2p_probe result; its per-GPU link reading under load stands in for I(load)
        when I(load) is not given.
      - Its H2D/D2H figures are judged against the floor of what each GPU's PCIe path
        can do, while the probe is younger than the role's gpu_checks_probe_max_age_s.
    type: dict
  expected_links:
    description: GPU model (as NVML names it) -> C({gen, width}) expected of it.
    type: dict
    default: {}
  expected_link_default:
    description: C({gen, width}) for other models; a missing key means the GPU's own maximum.
    type: dict
    default: {}
  chipset_bridge_ids:
    description: More C(vvvv:dddd) bridge ids to treat as chipset bridges.
    type: list
    elements: str
    default: []
  numa_node_count:
    description: NUMA nodes of the machine; 0 takes it from the facts.
    type: int
    default: 0
  fail_on:
    description: Fail when a finding has this severity or a worse one; C(never) only reports.
    type: str
    choices: [info, warning, error, critical, never]
    default: error
  defer_failure:
    description:
      - Do not fail; return the failure message in C(failure) for a later task to fail
        the node with, once the planner has left out the GPUs the findings name.
    type: bool
    default: false
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
author:
  - lingbot-fleet
"""

EXAMPLES = r"""
- name: Check the PCIe links
  gpu_link_check:
    facts: "{{ ansible_facts['lingbot_gpu'] }}"
    load: "{{ link_load.load }}"
    fail_on: error
"""

RETURN = r"""
ansible_facts:
  description: C(lingbot_link_findings), the findings, for the planner (role lingbot_service).
  returned: always
  type: dict
findings:
  description: Findings, each with code, severity, subject, message, evidence and fix.
  returned: always
  type: list
  elements: dict
counts:
  description: Number of findings per severity.
  returned: always
  type: dict
summary:
  description: One line per finding, "<severity> <code> <subject>: <message>".
  returned: always
  type: list
  elements: str
failure:
  description:
    - Why the node fails (findings at or above I(fail_on)), or null. With
      I(defer_failure) the module does not fail and this is for a later task.
  returned: always
  type: str
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.lingbot_fleet.linkcheck import JUDGE_ARGUMENT_SPEC, judge_options

ARGUMENT_SPEC = JUDGE_ARGUMENT_SPEC


def run_module() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    params = module.params
    try:
        result, failure = judge_options(params)
    except ValueError as error:
        module.fail_json(msg=str(error))
    result["failure"] = failure
    if failure and not params["defer_failure"]:
        module.fail_json(msg=failure, **result)
    module.exit_json(**result)


def main() -> None:
    run_module()


if __name__ == "__main__":
    main()
