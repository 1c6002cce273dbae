#!/usr/bin/python
"""Ansible module: judge the GPU facts (and a load sample) against the link policy."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: gpu_link_check
short_description: PCIe link and NUMA findings from the GPU facts and policy
description:
  - Runs lingbot_fleet.gpu.linkcheck on the facts gathered by gpu_facts and, when given, the
    under-load sample of gpu_link_load. Width is judged at rest; generation under load or
    against what GPU and slot can negotiate; a GPU idling at a low generation is never a
    finding.
  - Gives each finding the severity I(finding_severity) names for its code, then fails
    when a finding is at or above I(fail_on) (unless I(defer_failure)); changes nothing.
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
  sample:
    description:
      - Without I(load), take a load sample first (as gpu_link_load does, with these of its
        options) unless the readings of I(probe) stand in for one (younger than
        I(probe_max_age_s), every GPU read after I(load_min_s) of sustained copies in P0).
      - The role's action plugin decides that on the controller and runs gpu_link_load
        only when the sample is needed, so a fresh probe costs no connection.
    type: dict
    suboptions:
      duration_s:
        description: Seconds of sustained copies before the link is read.
        type: float
        default: 1.0
      size_mib:
        description: Size of each copy in MiB.
        type: int
        default: 64
      cuda_library:
        description: The driver library to load.
        type: str
        default: libcuda.so.1
      use_nvml:
        description: Read through NVML when pynvml imports; false reads with nvidia-smi.
        type: bool
        default: true
      nvml_python_path:
        description: Directories (patterns allowed) searched for pynvml.
        type: list
        elements: str
        default: []
      nvidia_smi:
        description: The nvidia-smi command used when NVML is not available.
        type: str
        default: nvidia-smi
  probe:
    description:
      - A p2p_probe result; its per-GPU link reading under load stands in for I(load)
        when I(load) is not given.
      - Its H2D/D2H figures are judged against the floor of what each GPU's PCIe path
        can do, while the probe is younger than the role's gpu_checks_probe_max_age_s.
    type: dict
  probe_max_age_s:
    description:
      - The probe's link readings under load count only while the probe is younger than
        this (seconds); an older probe's readings are not judged without a load sample.
    type: float
    default: 3600.0
  load_min_s:
    description: Sustained copies a reading must have had to count as under load (seconds).
    type: float
    default: 0.5
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
  nvlinks_by_model:
    description:
      - NVLinks each GPU model has (its NVML name to a count), over the built-in table of
        baseboard GPUs (C(NVIDIA H100 80GB HBM3) 18, C(NVIDIA A100-SXM4-80GB) 12, ...). A
        GPU with fewer active NVLinks is an C(NVLINK_LINKS_DOWN) finding.
    type: dict
    default: {}
  finding_severity:
    description:
      - The fleet's severity per finding code (e.g. C(PCIE_GPU_BEHIND_CHIPSET) to one of
        C(info), C(warning), C(error), C(critical)), over the one the check gives; applied
        before I(fail_on), and to the findings the planner and the rollout gate read.
      - An overridden finding keeps the check's severity in its evidence as
        C(severity_default). The role passes C(lingbot_fleet_finding_severity).
    type: dict
    default: {}
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
    description: Can run in check mode and predicts the change without making it.
    support: full
  diff_mode:
    description: Returns the before and after of what it changes (or would change) with --diff.
    support: none
author:
  - lingbot-fleet maintainers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Check the PCIe links
  gpu_link_check:
    facts: "{{ ansible_facts['lingbot_gpu'] }}"
    load: "{{ link_load.load }}"
    fail_on: error
    finding_severity:
      PCIE_GPU_BEHIND_CHIPSET: info
"""

RETURN = r"""
ansible_facts:
  description: C(lingbot_link_findings), the findings, for the planner (role lingbot_service).
  returned: always
  type: dict
findings:
  description:
    - Findings, each with code, severity, subject, message, evidence and fix.
    - The severity is the one I(finding_severity) sets for the code; the check's own one
      is then in the evidence as C(severity_default).
  returned: always
  type: list
  elements: dict
counts:
  description: Number of findings per severity.
  returned: always
  type: dict
load:
  description: The load sample judged (I(load), or the one taken for I(sample)); null when none.
  returned: always
  type: dict
load_note:
  description: Why a sample was taken, or that the probe's readings stood in; null without it.
  returned: always
  type: str
summary:
  description:
    - 'One line per finding, "<severity> <code> <subject>: <message>".'
    - An overridden severity reads "info (default critical)".
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
from ansible.module_utils.lingbot_fleet.gpu.linkcheck import (
    JUDGE_ARGUMENT_SPEC,
    judge_options,
    sample_decision,
)

ARGUMENT_SPEC = JUDGE_ARGUMENT_SPEC


def take_sample(module: AnsibleModule, sample: dict) -> dict:
    from ansible.module_utils.lingbot_fleet.facts.load import link_under_load

    if sample["duration_s"] <= 0 or sample["size_mib"] <= 0:
        module.fail_json(msg="sample: duration_s and size_mib must be greater than 0")
    smi = module.get_bin_path(sample["nvidia_smi"]) or sample["nvidia_smi"]
    return link_under_load(
        cuda_library=sample["cuda_library"],
        duration_s=sample["duration_s"],
        size_bytes=sample["size_mib"] << 20,
        nvml_python_path=sample["nvml_python_path"],
        smi_command=[smi],
        use_nvml=sample["use_nvml"],
    )


def run_module() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    params = module.params
    sample_needed, note = sample_decision(params)
    if sample_needed:
        params["load"] = take_sample(module, params["sample"])
    try:
        result, failure = judge_options(params)
    except ValueError as error:
        module.fail_json(msg=str(error))
    result.update(failure=failure, load=params["load"], load_note=note)
    if failure and not params["defer_failure"]:
        module.fail_json(msg=failure, **result)
    module.exit_json(**result)


def main() -> None:
    run_module()


if __name__ == "__main__":
    main()
