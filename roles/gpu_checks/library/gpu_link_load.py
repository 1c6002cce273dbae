#!/usr/bin/python
"""Ansible module: read every GPU's PCIe link under sustained host-to-device copies."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: gpu_link_load
short_description: Read each GPU's PCIe link generation, width and performance state under load
description:
  - On every GPU at once, runs host-to-device copies from pinned memory through the
    driver's libcuda.so.1 (ctypes, no CUDA toolkit) for I(duration_s), then, while the
    copies go on, reads the performance state, the current link generation and width, and
    the performance state again through NVML (nvidia-smi when pynvml does not import).
    The judge (gpu_link_check) counts the reading only when the GPU was in P0 at both ends
    and the load lasted long enough.
  - Changes nothing on the node; the GPUs are busy for about I(duration_s).
  - When no load can be made (no libcuda, no device), C(possible) is false with the reason.
  - With I(probe) and I(facts), no load is made when the probe's readings stand in for
    one (the probe is younger than I(probe_max_age_s) and every GPU the driver answers for
    has a reading taken after at least I(min_load_s) of sustained copies, in P0 before and
    after). The role calls it through the action plugin of the same name, which decides
    that on the controller, so a fresh probe costs no connection.
options:
  facts:
    description: The lingbot_gpu facts document (the GPUs the probe's readings must cover).
    type: dict
  probe:
    description: The p2p_probe result whose readings may stand in for the load.
    type: dict
  probe_max_age_s:
    description: The probe's readings stand in only while it is younger than this (seconds).
    type: float
    default: 3600.0
  min_load_s:
    description: Sustained copies a probe reading must have had to count (seconds).
    type: float
    default: 0.5
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
- name: Read the links under load
  gpu_link_load:
    duration_s: 1.0
  register: link_load
"""

RETURN = r"""
load:
  description: possible, reason (when not), sampler (nvml or nvidia-smi), min_load_s,
    notes, and per GPU ordinal, bus_id, possible, copies, copied_bytes, elapsed_ms,
    h2d_gbytes_per_s (with every GPU loading at once, the host's bandwidth is shared; the
    probe's figure is the GPU's own) and reading ({gen, width, performance_state,
    pstate_before, pstate_after, load_s}, or {error, load_s}). Null when the probe's
    readings stood in.
  returned: always
  type: dict
"""


from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.lingbot_fleet.facts.load import link_under_load
from ansible.module_utils.lingbot_fleet.gpu.linkcheck import (
    MIN_LOAD_S,
    SAMPLE_ARGUMENT_SPEC,
    probe_readings_problem,
)


def run_module() -> None:
    module = AnsibleModule(
        argument_spec={
            "facts": {"type": "dict"},
            "probe": {"type": "dict"},
            "probe_max_age_s": {"type": "float", "default": 3600.0},
            "min_load_s": {"type": "float", "default": MIN_LOAD_S},
            **SAMPLE_ARGUMENT_SPEC,
        },
        supports_check_mode=True,
    )
    params = module.params
    if params["duration_s"] <= 0 or params["size_mib"] <= 0:
        module.fail_json(msg="duration_s and size_mib must be greater than 0")
    if params["probe"] is not None and params["facts"] is not None:
        problem = probe_readings_problem(
            params["probe"],
            params["facts"],
            max_age_s=params["probe_max_age_s"],
            min_load_s=params["min_load_s"],
        )
        if problem is None:
            stamp = params["probe"].get("timestamp")
            module.exit_json(
                changed=False,
                load=None,
                msg=f"the readings of the probe of {stamp} stand: no load sample taken",
            )
    paths = params["nvml_python_path"]
    smi = module.get_bin_path(params["nvidia_smi"]) or params["nvidia_smi"]
    load = link_under_load(
        cuda_library=params["cuda_library"],
        duration_s=params["duration_s"],
        size_bytes=params["size_mib"] << 20,
        nvml_python_path=paths,
        smi_command=[smi],
        use_nvml=params["use_nvml"],
    )
    module.exit_json(changed=False, load=load)


def main() -> None:
    run_module()


if __name__ == "__main__":
    main()
